"""Blackwell tutorials (sm_100a): the fp16 GEMM series, the NVFP4 GEMMs and the TMA copy/transpose series."""
from ..catalogue import SM100, Compile, example
from ..fakes import pointer, stream, tensor

G = "cute/blackwell/tutorial/tutorial_gemm/"
T = "cute/blackwell/tutorial/tutorial_tma/"
SMS = 148


def _k_major(dtype, mn: int, k: int):
    """(mn, k) row-major, every extent dynamic, as the tutorials mark them."""
    return tensor(dtype, (mn, k), dynamic=True)


def _abc(m, dtype=None):
    io = dtype or m.io_dtype
    return _k_major(io, 1024, 512), _k_major(io, 512, 512), _k_major(io, 1024, 512)


for _name in ("fp16_gemm_0", "fp16_gemm_1", "fp16_gemm_2"):
    example(f"blackwell_tutorial/{_name}", G + _name + ".py", SM100)(
        lambda m: Compile(m.host_function, _abc(m)))

for _name in ("fp16_gemm_3", "fp16_gemm_3_1", "fp16_gemm_5"):
    example(f"blackwell_tutorial/{_name}", G + _name + ".py", SM100)(
        lambda m: Compile(m.host_function, (*_abc(m), SMS // 2)))


@example("blackwell_tutorial/fp16_gemm_4", G + "fp16_gemm_4.py", SM100)
def _(m):
    return Compile(m.host_function, (*_abc(m), SMS // 8, SMS // 2))  # preferred 2x4 clusters, fallback 2x1


@example("blackwell_tutorial/fp16_gemm_6", G + "fp16_gemm_6.py", SM100)
def _(m):
    import cutlass

    a, _, c = _abc(m)
    b_quantized = _k_major(m.quant_dtype, 512, 512)
    b_dequantized = _k_major(m.io_dtype, 512, 512)
    return Compile(m.host_function, (a, b_quantized, b_dequantized, c, cutlass.Float32(2.33), SMS // 2, stream()))


def _nvfp4(m):
    gemm = m.Sm100BlockScaledDenseGemmKernel()
    ptrs = (pointer(m.ab_dtype), pointer(m.ab_dtype), pointer(m.sf_dtype, 32), pointer(m.sf_dtype, 32),
            pointer(m.c_dtype, 32))
    return Compile(gemm, (*ptrs, (512, 256, 512, 1), stream()))


example("blackwell_tutorial/nvfp4_gemm_0", G + "nvfp4_gemm_0.py", SM100)(_nvfp4)
example("blackwell_tutorial/nvfp4_gemm_1", G + "nvfp4_gemm_1.py", SM100)(_nvfp4)


def _row_major(rows: int, cols: int):
    import cutlass

    return tensor(cutlass.Float16, (rows, cols), dynamic=True)


@example("blackwell_tutorial/tma_v0", T + "tma_v0.py", SM100)
def _(m):
    return Compile(m.Sm100SimpleCopyKernel(), (_row_major(1024, 2048), _row_major(1024, 2048)))


@example("blackwell_tutorial/tma_v1", T + "tma_v1.py", SM100)
def _(m):
    return Compile(m.Sm100MatrixTransposeKernelV1(), (_row_major(1024, 2048), _row_major(2048, 1024)),
                   {"options": "--generate-line-info"})


@example("blackwell_tutorial/tma_v2", T + "tma_v2.py", SM100)
def _(m):
    return Compile(m.Sm100MatrixTransposeKernelV2(), (_row_major(1024, 2048), _row_major(2048, 1024), SMS),
                   {"options": "--generate-line-info"})
