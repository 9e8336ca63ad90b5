# frontend_cases.py:14 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def copy_by_task(atoms: List[cute.CopyAtom], tasks: cute.Tensor, src: cute.Tensor, dst: cute.Tensor):
    atoms = __gcdsl__.descriptor_array(atoms, 'atoms')  # frontend_cases.py:14
    bidx, _, _ = cute.arch.block_idx()
    task = tasks[bidx]
    cute.copy(__gcdsl__.bind(atoms[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(atoms, task)), src, dst, tma_bar_ptr=None)  # frontend_cases.py:17
    __gcdsl__.end_of_trace()
