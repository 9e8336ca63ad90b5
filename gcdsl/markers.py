"""Annotation markers read by the front end (no DSL import needed)."""


class GridConstant:
    """Marks a kernel parameter as a grid-constant tensor:

        def kernel(tasks: Annotated[cute.Tensor, gcdsl.GridConstant], ...)

    The tensor's contents travel by value in the kernel's parameter space and
    are read through the constant cache; pass `gcdsl.grid_constant(cpu_data)`.
    """
