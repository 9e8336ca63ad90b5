# frontend_cases.py:51 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def method(atoms: List[cute.CopyAtom], i: int):
    atoms = __gcdsl__.descriptor_array(atoms, 'atoms')  # frontend_cases.py:51
    cute.copy(__gcdsl__.bind(atoms[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(atoms, i)), i, i)  # frontend_cases.py:52
    __gcdsl__.end_of_trace()
