def __gcdsl_bind__(limit, __default_scale__):
    # frontend_cases.py:41 (@gcdsl.kernel)
    @__gcdsl__.cute.kernel
    def nested(atoms: List[cute.CopyAtom], tile: int, scale: float=__default_scale__):
        atoms = __gcdsl__.descriptor_array(atoms, 'atoms')  # frontend_cases.py:41
        which = tile % limit
        atom = __gcdsl__.bind(atoms[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(atoms, which))  # frontend_cases.py:43
        cute.copy(atom, tile, tile)
        __gcdsl__.end_of_trace()
    return nested
