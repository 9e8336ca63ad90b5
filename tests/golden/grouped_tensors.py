# frontend_cases.py:235 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def grouped_tensors(coords: List[cute.Tensor], outs: Sequence[cute.Tensor], atoms: List[cute.CopyAtom], g: int):
    """Tensor lists indexed at runtime: non-literal subscripts go through the lowering."""
    coords = __gcdsl__.tensor_table(coords, 'coords')  # frontend_cases.py:235
    outs = __gcdsl__.tensor_table(outs, 'outs')  # frontend_cases.py:235
    atoms = __gcdsl__.descriptor_array(atoms, 'atoms')  # frontend_cases.py:235
    tiles = cute.zipped_divide(__gcdsl__.tensor_from_table(coords, g), (64, 64))  # frontend_cases.py:237
    first = outs[0]
    out = __gcdsl__.tensor_from_table(outs, g)  # frontend_cases.py:239
    n = len(outs)
    cute.copy(__gcdsl__.bind(atoms[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(atoms, g)), tiles, out)  # frontend_cases.py:241
    __gcdsl__.end_of_trace()
