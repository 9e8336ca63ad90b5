# frontend_cases.py:235 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def grouped_tensors(coords: __gcdsl__.TensorListParam, outs: __gcdsl__.TensorListParam, atoms: List[cute.CopyAtom], g: int):
    """Tensor lists indexed at runtime: every subscript is lowered, literal ones too."""
    tiles = cute.zipped_divide(__gcdsl__.runtime_tensor(coords, g, origin='frontend_cases.py:237'), (64, 64))  # frontend_cases.py:237
    first = __gcdsl__.runtime_tensor(outs, 0, origin='frontend_cases.py:238')  # frontend_cases.py:238
    out = __gcdsl__.runtime_tensor(outs, g, origin='frontend_cases.py:239')  # frontend_cases.py:239
    n = len(outs)
    cute.copy(__gcdsl__.runtime_atom(atoms, g, origin='frontend_cases.py:241'), tiles, out)  # frontend_cases.py:241
