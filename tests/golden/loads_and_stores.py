# frontend_cases.py:29 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def loads_and_stores(loads: typing.Sequence[cute.CopyAtom], stores: Sequence[cute.CopyAtom], g: int):
    s, d = cpasync.tma_partition(__gcdsl__.runtime_atom(loads, g % 4, origin='frontend_cases.py:30'), 0, cute.make_layout(1), None, None)  # frontend_cases.py:30
    if g > 0:
        cute.copy(__gcdsl__.runtime_atom(loads, g, origin='frontend_cases.py:32'), d, s, tma_bar_ptr=None)  # frontend_cases.py:32
    else:
        cute.copy(__gcdsl__.runtime_atom(stores, g + 1, origin='frontend_cases.py:34'), s, d)  # frontend_cases.py:34
    while g < 3:
        __gcdsl__.prefetch_descriptor(__gcdsl__.runtime_atom(stores, g, origin='frontend_cases.py:36'))  # frontend_cases.py:36
        g = g + 1
