"""Sizes the CUDA ABI and the TMA unit fix, shared by the lowering and the PTX reader.

No imports: `gcdsl.ptx` and the front end use these without the DSL.
"""

DESCRIPTOR_BYTES = 128   # one CUtensorMap
DESCRIPTOR_ALIGN = 64    # what the TMA unit requires of a descriptor's address
PARAM_LIMIT = 32764      # bytes of kernel parameters (CUDA 12.1+, Volta and newer)
