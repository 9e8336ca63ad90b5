"""Hopper (sm_90a) examples: WGMMA GEMMs, grouped GEMM, FMHA, CTA norm."""
from ..catalogue import SM90, Compile, example
from ..fakes import abc, stream, tensor

K = "cute/hopper/kernel/"
SMS = 132  # an H100/H200's SM count: the persistent kernels' grid size, a compile-time constant


@example("hopper/dense_gemm", K + "dense_gemm/dense_gemm.py", SM90)
def _(m):
    import cutlass

    a, b, c = abc((1024, 1024, 512, 1), cutlass.Float16, cutlass.Float16, cutlass.Float16)
    return Compile(m.HopperWgmmaGemmKernel(cutlass.Float32, (128, 128), (1, 1)), (a, b, c, stream()))


@example("hopper/dense_gemm[m-major,cluster2x1]", K + "dense_gemm/dense_gemm.py", SM90)
def _(m):
    import cutlass

    a, b, c = abc((1024, 1024, 512, 1), cutlass.Float16, cutlass.Float16, cutlass.Float32,
                  a_major="m", b_major="n", c_major="m")
    return Compile(m.HopperWgmmaGemmKernel(cutlass.Float32, (128, 256), (2, 1)), (a, b, c, stream()))


@example("hopper/dense_gemm_persistent", K + "dense_gemm/dense_gemm_persistent.py", SM90)
def _(m):
    import cutlass

    a, b, c = abc((1024, 1024, 512, 1), cutlass.Float16, cutlass.Float16, cutlass.Float16)
    gemm = m.HopperWgmmaGemmPersistentKernel(cutlass.Float32, (128, 128), (1, 1), 1, True)
    return Compile(gemm, (a, b, c, SMS, stream()))


@example("hopper/dense_gemm_fp8_2xacc", K + "dense_gemm/dense_gemm_fp8_2xacc.py", SM90)
def _(m):
    import cutlass

    fp8 = cutlass.Float8E4M3FN
    a, b, d = abc((1024, 1024, 512, 1), fp8, fp8, cutlass.Float16)
    scale_a, scale_b = (tensor(cutlass.Float32, (1,), dynamic=True) for _ in range(2))
    gemm = m.HopperFP8WarpSpecialized2xAccGemmKernel((128, 128), (1, 2), 1, True, 4)
    return Compile(gemm, (a, b, d, scale_a, scale_b, SMS, stream()))


@example("hopper/dense_gemm_fp8_gelu_persistent", K + "dense_gemm/dense_gemm_fp8_gelu_persistent.py", SM90)
def _(m):
    import cutlass

    fp8 = cutlass.Float8E4M3FN
    a, b, c = abc((1024, 1024, 512, 1), fp8, fp8, cutlass.Float16)
    gemm = m.HopperFP8GeluPersistentGemmKernel(cutlass.Float32, (128, 128), (1, 1), 1, True)
    # A scale other than 1 takes the `apply_scale` path.
    return Compile(gemm, (a, b, c, cutlass.Float32(0.5), True, SMS, stream(), m.erf_gelu))


@example("hopper/grouped_gemm", K + "grouped_gemm/grouped_gemm.py", SM90)
def _(m):
    import cutlass

    kernel_cls = m.HopperGroupedGemmPersistentKernel
    groups = 3
    f16 = cutlass.Float16
    # The host hands the kernel one tiny tensor per operand (for the TMA atoms' types) and
    # per-group sizes, strides and addresses in global memory.
    initial = [tensor(f16, (8, 8, 1), order=(1, 0, 2), dynamic=True) for _ in range(3)]
    sizes = tensor(cutlass.Int32, (groups, 4))
    strides = tensor(cutlass.Int32, (groups, 3, 2))
    addresses = tensor(cutlass.Int64, (groups, 3))
    tensormaps = tensor(cutlass.Int64, (SMS, kernel_cls.num_tensormaps, kernel_cls.bytes_per_tensormap // 8))
    gemm = kernel_cls(cutlass.Float32, (128, 128), (1, 1), swizzle_size=1, raster_along_m=True)
    return Compile(gemm, (*initial, groups, sizes, strides, addresses, 96, tensormaps, SMS, stream()))


def _fmha_tensor(dtype, s, h_r, h_k, b, d):
    """Logical (s, d, h_r, h_k, b) over storage (b, s, h_k, h_r, d): d contiguous, as the example permutes."""
    return tensor(dtype, (s, d, h_r, h_k, b), order=(3, 0, 1, 2, 4), dynamic=True)


def _hopper_fmha(persistent: bool, causal: bool):
    def build(m):
        import cutlass

        f16, f32 = cutlass.Float16, cutlass.Float32
        b, s, h, d = 1, 128, 16, 128
        q, o = (_fmha_tensor(f16, s, 1, h, b, d) for _ in range(2))
        k, v = (_fmha_tensor(f16, s, 1, h, b, d) for _ in range(2))
        lse = _fmha_tensor(f32, s, 1, h, b, 1)
        masks = m.fmha_utils.MaskEnum
        fmha = m.HopperFusedMultiHeadAttentionForward(f32, f32, (64, 128, d), persistent,
                                                      masks.WINDOW_MASK if causal else masks.RESIDUAL_MASK)
        right = cutlass.Int32(0) if causal else None
        return Compile(fmha, (q, k, v, o, lse, 1.44, 1.0, 1.0, None, right, stream()))

    return build


example("hopper/fmha", K + "attention/fmha.py", SM90)(_hopper_fmha(False, False))
example("hopper/fmha[persistent,causal]", K + "attention/fmha.py", SM90)(_hopper_fmha(True, True))


def _cta_norm(norm_type: str):
    def build(m):
        import cutlass

        rows, n = 64, 4096
        f16 = cutlass.Float16
        y, x = (tensor(f16, (rows, n)) for _ in range(2))
        weight = tensor(f16, (n,))
        bias = tensor(f16, (n,)) if norm_type == "layer" else None
        # With line info, so that the comparison also ignores `.loc`/`.file`.
        return Compile(m.CtaNorm(n, norm_type), (y, x, weight, bias), {"options": "--generate-line-info"})

    return build


example("hopper/cta_norm[layer]", K + "cta_norm/cta_norm.py", SM90)(_cta_norm("layer"))
example("hopper/cta_norm[rms]", K + "cta_norm/cta_norm.py", SM90)(_cta_norm("rms"))
