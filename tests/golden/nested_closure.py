def __gcdsl_bind__(limit, __default_scale__):
    # frontend_cases.py:41 (@gcdsl.kernel)
    @__gcdsl__.cute.kernel
    def nested(atoms: List[cute.CopyAtom], tile: int, scale: float=__default_scale__):
        which = tile % limit
        atom = __gcdsl__.runtime_atom(atoms, which, origin='frontend_cases.py:43')  # frontend_cases.py:43
        cute.copy(atom, tile, tile)
    return nested
