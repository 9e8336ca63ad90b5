# frontend_cases.py:14 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def copy_by_task(atoms: List[cute.CopyAtom], tasks: cute.Tensor, src: cute.Tensor, dst: cute.Tensor):
    bidx, _, _ = cute.arch.block_idx()
    task = tasks[bidx]
    cute.copy(__gcdsl__.runtime_atom(atoms, task, origin='frontend_cases.py:17'), src, dst, tma_bar_ptr=None)  # frontend_cases.py:17
