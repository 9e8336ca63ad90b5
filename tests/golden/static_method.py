# frontend_cases.py:51 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def method(atoms: List[cute.CopyAtom], i: int):
    cute.copy(__gcdsl__.runtime_atom(atoms, i, origin='frontend_cases.py:52'), i, i)  # frontend_cases.py:52
