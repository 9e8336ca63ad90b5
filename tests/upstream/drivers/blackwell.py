"""Blackwell (sm_100a) kernels: tcgen05 GEMMs (dense, persistent, grouped, block-scaled),
FMHA, RMSNorm."""
from ..catalogue import SM100, Compile, example
from ..fakes import abc, bmm_operands, pointer, stream, tensor

K = "cute/blackwell/kernel/"
SMS = 148  # a B200's SM count (the persistent kernels' grid size, a compile-time constant)
MNKL = (512, 256, 512, 1)


def _dense(path: str, cls: str, two_cta: bool):
    """The non-persistent dense GEMMs: (a, b, c, stream), operands (m,k,l)/(n,k,l)/(m,n,l)."""
    def build(m):
        import cutlass

        f16, f32 = cutlass.Float16, cutlass.Float32
        if two_cta:
            a, b, c = abc(MNKL, f16, f16, f16)
            gemm = getattr(m, cls)(f32, True, (256, 128), (2, 1), True)
        else:  # the example's defaults: tf32 in, f32 out, one CTA, no TMA store
            a, b, c = abc(MNKL, cutlass.TFloat32, cutlass.TFloat32, f32)
            gemm = getattr(m, cls)(f32, False, (128, 128), (1, 1), False)
        return Compile(gemm, (a, b, c, stream()))

    return build


for _two_cta, _suffix in ((False, ""), (True, "[f16,2cta,tma_store]")):
    example("blackwell/dense_gemm" + _suffix, K + "dense_gemm/dense_gemm.py", SM100)(
        _dense(K + "dense_gemm/dense_gemm.py", "DenseGemmKernel", _two_cta))
    example("blackwell/dense_gemm_software_pipeline" + _suffix, K + "dense_gemm/dense_gemm_software_pipeline.py",
            SM100)(_dense(K + "dense_gemm/dense_gemm_software_pipeline.py", "DenseGemmKernel", _two_cta))


@example("blackwell/dense_gemm_persistent", K + "dense_gemm/dense_gemm_persistent.py", SM100)
def _(m):
    import cutlass

    f16 = cutlass.Float16
    gemm = m.PersistentDenseGemmKernel(cutlass.Float32, True, (256, 128), (2, 1), True)
    return Compile(m.bmm, (gemm, *bmm_operands(MNKL, f16, f16), SMS // 2, stream()))


@example("blackwell/dense_gemm_persistent_dynamic", K + "dense_gemm/dense_gemm_persistent_dynamic.py", SM100)
def _(m):
    import cutlass

    f16 = cutlass.Float16
    gemm = m.PersistentDenseGemmKernel(cutlass.Float32, True, (256, 128), (2, 1), True, swizzle_size=2,
                                       raster_along="n")
    return Compile(m.bmm, (gemm, *bmm_operands(MNKL, f16, f16), stream()))


@example("blackwell/dense_gemm_persistent_prefetch", K + "dense_gemm/dense_gemm_persistent_prefetch.py", SM100)
def _(m):
    import cutlass

    f16 = cutlass.Float16
    gemm = m.PersistentDenseGemmKernel(cutlass.Float32, False, (128, 128), (1, 1), True, prefetch_dist=2)
    return Compile(m.bmm, (gemm, *bmm_operands(MNKL, f16, f16), SMS, stream()))


@example("blackwell/dense_gemm_alpha_beta_persistent", K + "dense_gemm/dense_gemm_alpha_beta_persistent.py", SM100)
def _(m):
    import cutlass

    f16, f32 = cutlass.Float16, cutlass.Float32
    a, b, c = abc(MNKL, f16, f16, f16)
    d = abc(MNKL, f16, f16, f16)[2]
    gemm = m.SM100PersistentDenseGemmAlphaBetaKernel(f32, f32, False, (128, 128), (1, 1))
    return Compile(gemm, (a, b, c, d, f32(1.5), f32(0.5), SMS, stream()))


@example("blackwell/grouped_gemm", K + "grouped_gemm/grouped_gemm.py", SM100)
def _(m):
    import cutlass

    groups = 3
    f16 = cutlass.Float16
    initial = [tensor(f16, (8, 8, 1), order=(1, 0, 2), dynamic=True) for _ in range(3)]
    sizes = tensor(cutlass.Int32, (groups, 4))
    strides = tensor(cutlass.Int32, (groups, 3, 2))
    addresses = tensor(cutlass.Int64, (groups, 3))
    cls = m.GroupedGemmKernel
    tensormaps = tensor(cutlass.Int64, (SMS, cls.num_tensormaps, cls.bytes_per_tensormap // 8))
    gemm = cls(cutlass.Float32, False, (128, 128), (1, 1))
    return Compile(gemm, (*initial, groups, sizes, strides, addresses, 8, tensormaps, SMS, stream()))


def _rmsnorm(has_weight: bool):
    def build(m):
        import cutlass

        bf16 = cutlass.BFloat16
        weight = pointer(bf16) if has_weight else None
        norm = m.RMSNormKernel(bf16, 4096, has_weight)
        return Compile(norm, (pointer(bf16), weight, pointer(bf16), cutlass.Int32(1), cutlass.Float32(1e-6),
                              stream()))

    return build


example("blackwell/rmsnorm", K + "rmsnorm/rmsnorm.py", SM100)(_rmsnorm(True))
example("blackwell/rmsnorm[no_weight]", K + "rmsnorm/rmsnorm.py", SM100)(_rmsnorm(False))


def _blackwell_fmha(persistent: bool, causal: bool, lse: bool):
    def build(m):
        import cutlass

        f16, f32 = cutlass.Float16, cutlass.Float32
        b, s, h, d = 1, 256, 8, 128
        # (b, s, h_k, h_r, d), row-major, as the example allocates them.
        q, k, v, o = (tensor(f16, (b, s, h, 1, d), dynamic=True) for _ in range(4))
        lse_tensor = tensor(f32, (b, s, h, 1), dynamic=True) if lse else None
        masks = m.fmha_utils.MaskEnum
        fmha = m.BlackwellFusedMultiHeadAttentionForward(f32, f32, (128, 128), d, persistent, masks.WINDOW_MASK,
                                                         False, False)
        problem = (b, s, s, s, h, h, d, d)
        right = cutlass.Int32(0) if causal else None
        return Compile(fmha, (q, k, v, o, problem, None, None, lse_tensor, None, f32(0.127), f32(0.088), f32(1.0),
                              None, None, right, None, None, stream(), False), {"options": "--opt-level=2"})

    return build


example("blackwell/fmha", K + "attention/fmha/fmha.py", SM100)(_blackwell_fmha(False, False, False))
example("blackwell/fmha[persistent,causal,lse]", K + "attention/fmha/fmha.py", SM100)(
    _blackwell_fmha(True, True, True))


@example("blackwell/dense_blockscaled_gemm_persistent", K + "blockscaled_gemm/dense_blockscaled_gemm_persistent.py",
         SM100)
def _(m):
    import cutlass
    import cutlass.utils as utils

    fp4, sf, f16 = cutlass.Float4E2M1FN, cutlass.Float8E4M3FN, cutlass.Float16
    major = m.OperandMajorMode
    gemm = m.Sm100BlockScaledPersistentDenseGemmKernel(16, (128, 128), (1, 1))
    layouts = (major.K, major.K, utils.LayoutEnum.ROW_MAJOR)
    problem = tuple(cutlass.Int32(0) for _ in range(4))
    return Compile(gemm, (pointer(fp4), pointer(fp4), pointer(sf, 32), pointer(sf, 32), pointer(f16), layouts,
                          problem, SMS, stream()))
