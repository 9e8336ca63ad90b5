# frontend_cases.py:55 (@gcdsl.kernel)
@__gcdsl__.cute.kernel
def task_table(tasks: __gcdsl__.GridConstantParam, shapes: __gcdsl__.GridConstantParam, atoms: List[cute.CopyAtom]):
    """A docstring stays first; the prologue follows it."""
    tasks = __gcdsl__.grid_constant_tensor(tasks, param='tasks', origin='frontend_cases.py:55')  # frontend_cases.py:55
    shapes = __gcdsl__.grid_constant_tensor(shapes, param='shapes', origin='frontend_cases.py:55')  # frontend_cases.py:55
    t = tasks[cute.arch.block_idx()[0], 0]
    cute.copy(__gcdsl__.runtime_atom(atoms, t, origin='frontend_cases.py:59'), shapes[t], shapes[t])  # frontend_cases.py:59
