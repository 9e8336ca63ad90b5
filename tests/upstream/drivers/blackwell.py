"""Blackwell (sm_100a) kernels: tcgen05 GEMMs (dense, persistent, grouped, block-scaled),
FMHA, RMSNorm."""
from ..catalogue import SM100, SM103, Compile, example
from ..fakes import abc, bmm_operands, pointer, scale_factors, stream, tensor

K = "cute/blackwell/kernel/"
SMS = 148  # a B200's SM count (the persistent kernels' grid size, a compile-time constant)
MNKL = (512, 256, 512, 1)


def _dense(cls: str, two_cta: bool):
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
        _dense("DenseGemmKernel", _two_cta))
    example("blackwell/dense_gemm_software_pipeline" + _suffix, K + "dense_gemm/dense_gemm_software_pipeline.py",
            SM100)(_dense("DenseGemmKernel", _two_cta))


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


def _blockscaled_operands(ab, sf, c_dtype, sf_vec_size: int = 16, mnkl=(512, 256, 256, 1)):
    m, n, k, l = mnkl
    a, b, c = abc(mnkl, ab, ab, c_dtype)
    return a, b, scale_factors(sf, m, k, l, sf_vec_size), scale_factors(sf, n, k, l, sf_vec_size), c


@example("blackwell/dense_blockscaled_gemm_persistent_amax",
         K + "blockscaled_gemm/dense_blockscaled_gemm_persistent_amax.py", SM100)
def _(m):
    import cutlass

    operands = _blockscaled_operands(cutlass.Float4E2M1FN, cutlass.Float8E8M0FNU, cutlass.Float16)
    amax = tensor(cutlass.Float32, (1, 1, 1), dynamic=True)
    gemm = m.Sm100BlockScaledPersistentDenseGemmKernel(16, (128, 128), (1, 1))
    return Compile(gemm, (*operands, amax, SMS, stream()), {"options": "--opt-level 2"})


@example("blackwell/dense_blockscaled_gemm_persistent_prefetch",
         K + "blockscaled_gemm/dense_blockscaled_gemm_persistent_prefetch.py", SM100)
def _(m):
    import cutlass

    operands = _blockscaled_operands(cutlass.Float4E2M1FN, cutlass.Float8E8M0FNU, cutlass.Float16)
    gemm = m.Sm100BlockScaledPersistentDenseGemmKernel(16, (128, 128), (1, 1), prefetch_dist=2)
    return Compile(gemm, (*operands, SMS, stream()), {"options": "--opt-level 2"})


@example("blackwell/sm103_dense_blockscaled_gemm_persistent",
         K + "blockscaled_gemm/sm103_dense_blockscaled_gemm_persistent.py", SM103)
def _(m):
    import cutlass

    operands = _blockscaled_operands(cutlass.Float4E2M1FN, cutlass.Float8E8M0FNU, cutlass.Float16,
                                     mnkl=(1024, 1024, 768, 2))
    gemm = m.Sm103BlockScaledPersistentDenseGemmKernel(16, (256, 256), (2, 4), False)
    return Compile(gemm, (*operands, SMS // 8, stream()))


def _grouped_blockscaled(cls: str):
    def build(m):
        import cutlass

        groups = 2
        fp4, sf, f16 = cutlass.Float4E2M1FN, cutlass.Float8E8M0FNU, cutlass.Float16
        # One small k-major tensor per operand stands for every group's (for the TMA atoms' types).
        initial = [tensor(dt, (side, side, 1), order=(1, 0, 2), dynamic=True)
                   for dt, side in ((fp4, 32), (fp4, 32), (f16, 8), (sf, 16), (sf, 16))]
        kernel_cls = getattr(m, cls)
        tensormaps = tensor(cutlass.Int64, (SMS, kernel_cls.num_tensormaps, kernel_cls.bytes_per_tensormap // 8))
        tables = (tensor(cutlass.Int32, (groups, 4)), tensor(cutlass.Int32, (groups, 3, 2)),
                  tensor(cutlass.Int64, (groups, 3)), tensor(cutlass.Int64, (groups, 2)))
        gemm = kernel_cls(16, (128, 128), (1, 1))
        return Compile(gemm, (*initial, groups, *tables, 2, tensormaps, SMS, stream()), {"options": "--opt-level 2"})

    return build


example("blackwell/grouped_blockscaled_gemm", K + "blockscaled_grouped_gemm/grouped_blockscaled_gemm.py", SM100)(
    _grouped_blockscaled("Sm100GroupedBlockScaledGemmKernel"))
example("blackwell/sm103_grouped_blockscaled_gemm", K + "blockscaled_grouped_gemm/sm103_grouped_blockscaled_gemm.py",
        SM103)(_grouped_blockscaled("Sm103GroupedBlockScaledGemmKernel"))


def _blockwise(cls: str, grouped: str = ""):
    """FP8 GEMMs with per-128 block scales: sfa (m, k/128, l) m-major, sfb (n/128, k/128, l) k-major."""
    def build(m):
        import cutlass

        fp8, bf16, f32 = cutlass.Float8E4M3FN, cutlass.BFloat16, cutlass.Float32
        mm, n, k, l = 256, 256, 512, (1 if grouped == "contiguous" else 2)
        a, b, c = abc((mm, n, k, l), fp8, fp8, bf16)
        if grouped == "contiguous":  # groups stacked along m; b holds one matrix per group
            b = abc((mm, n, k, 2), fp8, fp8, bf16)[1]
        sfa = tensor(f32, (mm, k // 128, l), order=(0, 1, 2), dynamic=True)
        sfb = tensor(f32, (n // 128, k // 128, b.shape[2]), order=(1, 0, 2), dynamic=True)
        extra = (tensor(cutlass.Int32, (mm if grouped == "contiguous" else l,), dynamic=True, align=4),) \
            if grouped else ()
        gemm = getattr(m, cls)(f32, False, (128, 128), (1, 1))
        return Compile(gemm, (a, b, c, sfa, sfb, *extra, SMS, stream()))

    return build


example("blackwell/blockwise_gemm", K + "blockwise_gemm/blockwise_gemm.py", SM100)(_blockwise("BlockwiseGemmKernel"))
example("blackwell/blockwise_contiguous_grouped_gemm", K + "blockwise_gemm/contiguous_grouped_gemm.py", SM100)(
    _blockwise("BlockwiseContiguousGroupedGemmKernel", "contiguous"))
example("blackwell/blockwise_masked_grouped_gemm", K + "blockwise_gemm/masked_grouped_gemm.py", SM100)(
    _blockwise("BlockwiseMaskedGroupedGemmKernel", "masked"))


def _mixed_input(cls: str, a_name: str, grouped: bool):
    """Narrow-integer A (m-major) with bf16 B: Int4 with per-(1 x 128) bf16 scales, or Int8 converted only."""
    def build(m):
        import cutlass

        bf16 = cutlass.BFloat16
        mm, n, k, l = 128, 256, 256, 2 if grouped else 1
        a_dtype = getattr(cutlass, a_name)
        a = tensor(a_dtype, (mm, k, l), order=(0, 1, 2), dynamic=True)
        scale = tensor(bf16, (mm, k // 128, l), order=(0, 1, 2), dynamic=True) if a_name == "Int4" else None
        granularity = (1, 128) if scale is not None else (0, 0)
        if grouped:  # groups side by side along n, cumsum[g] their offsets; a batch of one, dynamic
            b = tensor(bf16, (n * l, k, "?"), order=(1, 0, 2), dynamic=True)
            c = tensor(bf16, (mm, n * l, "?"), order=(1, 0, 2), dynamic=True)
            gemm = getattr(m, cls)(*granularity, cutlass.Float32, False, (128, 128, 128), (1, 1), l, False)
            cumsum = tensor(cutlass.Int32, (l + 1,), dynamic=True, align=4)
            return Compile(gemm, (a, scale, b, cumsum, c, SMS, stream()))
        b = tensor(bf16, (n, k, l), order=(1, 0, 2), dynamic=True)
        c = tensor(bf16, (mm, n, l), order=(1, 0, 2), dynamic=True)
        gemm = getattr(m, cls)(*granularity, cutlass.Float32, False, (128, 128, 128), (1, 1), True, False)
        return Compile(gemm, (a, scale, b, c, SMS, stream()))

    return build


MI = K + "mixed_input_gemm/"
example("blackwell/mixed_input_gemm[int4,scaled]", MI + "mixed_input_gemm.py", SM100)(
    _mixed_input("MixedInputGemmKernel", "Int4", False))
example("blackwell/mixed_input_gemm[int8]", MI + "mixed_input_gemm.py", SM100)(
    _mixed_input("MixedInputGemmKernel", "Int8", False))
example("blackwell/grouped_mixed_input_gemm", MI + "grouped_mixed_input_gemm.py", SM100)(
    _mixed_input("GroupedMixedInputGemmKernel", "Int4", True))
example("blackwell/grouped_mixed_input_gemm_acc_scale", MI + "grouped_mixed_input_gemm_acc_scale.py", SM100)(
    _mixed_input("GroupedMixedInputGemmAccScaleKernel", "Int4", True))
