# frontend_cases.py:29 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def loads_and_stores(loads: typing.Sequence[cute.CopyAtom], stores: Sequence[cute.CopyAtom], g: int):
    loads = __gcdsl__.descriptor_array(loads, 'loads')  # frontend_cases.py:29
    stores = __gcdsl__.descriptor_array(stores, 'stores')  # frontend_cases.py:29
    s, d = cpasync.tma_partition(__gcdsl__.bind(loads[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(loads, g % 4)), 0, cute.make_layout(1), None, None)  # frontend_cases.py:30
    if g > 0:
        cute.copy(__gcdsl__.bind(loads[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(loads, g)), d, s, tma_bar_ptr=None)  # frontend_cases.py:32
    else:
        cute.copy(__gcdsl__.bind(stores[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(stores, g + 1)), s, d)  # frontend_cases.py:34
    while g < 3:
        __gcdsl__.prefetch_descriptor(__gcdsl__.bind(stores[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(stores, g)))  # frontend_cases.py:36
        g = g + 1
    __gcdsl__.end_of_trace()
