"""Host functions at the edge of the 32,764-byte parameter budget (table_lookup's kernel)."""
import numpy as np

import cutlass
import cutlass.cute as cute

import gcdsl
from tests.kernels import table_lookup as tl


def args_for(table_rows: int):
    """An Int32 [rows, 1] grid-constant table (16-byte aligned) plus an 8-byte output pointer."""
    table = gcdsl.grid_constant(np.zeros((table_rows, 1), dtype=np.int32))
    out = cute.runtime.make_fake_compact_tensor(cutlass.Int32, (2, tl.THREADS), stride_order=(1, 0), assumed_align=4)
    return table, out


JUST_UNDER = (32764 - 8 - 4) // 4   # 8188 rows: 32752 + 8 = 32760 bytes
JUST_OVER = JUST_UNDER + 4          # 8192 rows: 32768 + 8 = 32776 bytes


# batch_copy's kernel has the README's signature: (loads, stores, coords, pick, smem_layout, n).
# Sources with dynamic extents make the TMA coordinate tensor a parameter too (8 bytes).
# N descriptors in each list, packed: 2 x (N + 1) x 128 (a template and the blob) + 8 (coords)
# + 8 (pick) bytes.
TMA_JUST_UNDER = (32764 - 16) // 256 - 1   # 126 per list: 32528 bytes
TMA_JUST_OVER = TMA_JUST_UNDER + 1         # 127 per list: 32784 bytes


def tma_args(n: int):
    make = cute.runtime.make_fake_tensor
    srcs = [make(cutlass.Float32, (cute.sym_int(), cute.sym_int()), (cute.sym_int(width=64), 1), assumed_align=16)
            for _ in range(n)]
    return srcs, srcs, cute.runtime.make_fake_compact_tensor(cutlass.Int32, (n,), assumed_align=4)
