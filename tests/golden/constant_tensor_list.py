# frontend_cases.py:244 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def constant_tensor_list(outs: List[cute.Tensor]):
    """Only literal indices: the list stays the DSL's own."""
    first = outs[0]
    return first
