# frontend_cases.py:84 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def allowed_uses(loads: List[cute.CopyAtom], stores: list[cute.CopyAtom], src: cute.Tensor, k: int):
    loads = __gcdsl__.descriptor_array(loads, 'loads')  # frontend_cases.py:84
    stores = __gcdsl__.descriptor_array(stores, 'stores')  # frontend_cases.py:84
    first = loads[0]
    last = stores[-1]
    n = len(loads) + len(stores[1:])
    for atom in loads:
        cute.copy(atom, src, src)
    for j, atom in enumerate(loads[1:]):
        cute.copy(atom, src, src)
    for load, store in zip(loads, reversed(stores)):
        cute.copy(load, src, src)
    picked = [__gcdsl__.bind(loads[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(loads, j % n)) for j in range(k)]  # frontend_cases.py:94
    every = [atom for atom in stores[::2]]
    second = loads[1:][0]

    def helper(atom, tensor):
        return cute.copy(atom, tensor, tensor)
    helper(__gcdsl__.bind(loads[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(loads, k)), src)  # frontend_cases.py:101
    scale = lambda t: t * 2
    cute.copy(__gcdsl__.bind(stores[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(stores, scale(k) - 1)), first, last)  # frontend_cases.py:103
    __gcdsl__.end_of_trace()
