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
