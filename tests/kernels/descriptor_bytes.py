"""The DSL's own TMA descriptor of a tile atom, copied to host memory by the compiled host
function (no kernel runs): to compare with the one `gcdsl.TensorMapTable` has the driver
encode for the same tensor, box and swizzle.

The DSL encodes an atom's descriptor in the host code it generates, not through
`cuTensorMapEncodeTiled`, so the two can differ in fields that change no result but
how L2 serves the copies (its L2 promotion, say). They agree on the L2 promotion
(128 bytes, as CUTLASS asks for); four bits differ, two set by the DSL only and two
by the driver only, on an H100 with driver 580 and nvidia-cutlass-dsl 4.8.1.
"""
import ctypes

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90
from cutlass._mlir.dialects import cute as _cute_ir
from cutlass._mlir.dialects import cute_nvgpu as _cute_nvgpu_ir
from cutlass.cute.nvgpu import cpasync
from cutlass.cute.typing import AddressSpace
from cutlass.tensor_utils import LayoutEnum

BOX = (128, 64)  # rows x columns of a K-major bf16 operand tile: 128-byte rows, 128B swizzle
SWIZZLE = "128B"
# (byte, mask) of the L2 promotion, and the value of 128 bytes: the driver's encodings
# with each CUtensorMapL2promotion differ there alone, as 0, 2, 4 and 6
L2_PROMOTION, L2_PROMOTION_128B = (10, 0x06), 0x04
DSL_ONLY_BITS = {8: 0x02, 10: 0x20}  # byte: bits set in the DSL's descriptor and not the driver's
DRIVER_ONLY_BITS = {65: 0x40, 73: 0x04}  # ... and the other way round


@cute.jit
def copy_descriptor(t: cute.Tensor, out: cute.Pointer):
    smem = sm90.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (*BOX, BOX[1]), cutlass.BFloat16, 1)
    atom, _ = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), t, cute.slice_(smem, (None, None, 0)),
                                          BOX)
    slot = _cute_ir.PtrType.get(_cute_nvgpu_ir.TmaDescriptorTiledType.get(), AddressSpace.gmem, 64)
    aligned = _cute_ir.assume(_cute_ir.ConstrainedIntType.get(64, 64), out.toint().ir_value())
    _cute_nvgpu_ir.copy_tma_desc(atom._trait.value, _cute_ir.inttoptr(slot, aligned).value)


def dsl_descriptor(t) -> bytes:
    """The 128 bytes of the DSL's descriptor of torch tensor `t` (bf16, K contiguous) in BOX boxes."""
    from cutlass.cute.runtime import from_dlpack

    buffer = (ctypes.c_uint8 * 256)()
    address = (ctypes.addressof(buffer) + 127) // 128 * 128
    out = cute.runtime.make_ptr(cutlass.Int8, address, cute.AddressSpace.gmem, assumed_align=128)
    copy_descriptor(from_dlpack(t, assumed_align=16), out)
    return ctypes.string_at(address, 128)
