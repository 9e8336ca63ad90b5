# frontend_cases.py:84 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def allowed_uses(loads: List[cute.CopyAtom], stores: list[cute.CopyAtom], src: cute.Tensor, k: int):
    first = loads[0]
    last = stores[-1]
    n = len(loads) + len(stores[1:])
    for atom in loads:
        cute.copy(atom, src, src)
    for j, atom in enumerate(loads[1:]):
        cute.copy(atom, src, src)
    for load, store in zip(loads, reversed(stores)):
        cute.copy(load, src, src)
    picked = [__gcdsl__.runtime_atom(loads, j % n, origin='frontend_cases.py:94') for j in range(k)]  # frontend_cases.py:94
    every = [atom for atom in stores[::2]]
    second = loads[1:][0]

    def helper(atom, tensor):
        return cute.copy(atom, tensor, tensor)
    helper(__gcdsl__.runtime_atom(loads, k, origin='frontend_cases.py:101'), src)  # frontend_cases.py:101
    scale = lambda t: t * 2
    cute.copy(__gcdsl__.runtime_atom(stores, scale(k) - 1, origin='frontend_cases.py:103'), first, last)  # frontend_cases.py:103
