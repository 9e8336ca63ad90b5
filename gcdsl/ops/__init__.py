"""Ready-made operators built on gcdsl (torch and the CuTe DSL are imported here, on demand).

    import gcdsl.ops
    out = gcdsl.ops.grouped_mm(a, b, offs)   # torch._grouped_mm, every case, with autograd (Hopper)
"""
from .grouped_mm import MAX_GROUPS, grouped_mm

__all__ = ["MAX_GROUPS", "grouped_mm"]
