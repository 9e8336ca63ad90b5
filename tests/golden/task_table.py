# frontend_cases.py:55 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def task_table(tasks: __gcdsl__.GridConstantParam, shapes: __gcdsl__.GridConstantParam, atoms: List[cute.CopyAtom]):
    """A docstring stays first; the prologue follows it."""
    tasks = __gcdsl__.table_view(tasks, __gcdsl__.param_space_ptr(tasks))  # frontend_cases.py:55
    shapes = __gcdsl__.table_view(shapes, __gcdsl__.param_space_ptr(shapes))  # frontend_cases.py:55
    atoms = __gcdsl__.descriptor_array(atoms, 'atoms')  # frontend_cases.py:56
    t = tasks[cute.arch.block_idx()[0], 0]
    cute.copy(__gcdsl__.bind(atoms[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(atoms, t)), shapes[t], shapes[t])  # frontend_cases.py:59
    __gcdsl__.end_of_trace()
