"""More Blackwell examples: the FMHA backward pass (sm_100a) and the GeForce Blackwell GEMMs (sm_120a)."""
from ..catalogue import SM100, SM120, Compile, example, skipped
from ..fakes import abc, scale_factors, stream, tensor

A = "cute/blackwell/kernel/attention/"
G = "cute/blackwell_geforce/kernel/"


def _bwd_tensor(dtype, s, h_r, h_k, b, d):
    """Logical (s, d, h_r, h_k, b) over storage (b, s, h_k, h_r, d)."""
    return tensor(dtype, (s, d, h_r, h_k, b), order=(3, 0, 1, 2, 4), dynamic=True)


@example("blackwell/fmha_bwd", A + "fmha/fmha_bwd.py", SM100)
def _(m):
    import cutlass

    f16, f32 = cutlass.Float16, cutlass.Float32
    b, s, h, d = 1, 256, 4, 128
    q, dq, o, do = (_bwd_tensor(f16, s, 1, h, b, d) for _ in range(4))
    k, dk, v, dv = (_bwd_tensor(f16, s, 1, h, b, d) for _ in range(4))
    lse = tensor(f32, (s, 1, h, b), order=(0, 1, 2, 3), dynamic=True)
    cls = m.BlackwellFusedMultiHeadAttentionBackward
    workspace = tensor(cutlass.Uint8, (cls._get_workspace_size(s, s, d, h, b, f32),), dynamic=True)
    fmha = cls(f16, f32, (128, 128, d), False, m.fmha_utils.MaskEnum.RESIDUAL_MASK_BWD)
    problem = (s, s, d, ((1, h), b))
    return Compile(fmha, (problem, q, k, v, o, dq, dk, dv, do, lse, None, None, f32(0.088), None, None, workspace,
                          stream()))


@example("blackwell_geforce/dense_gemm", G + "dense_gemm/dense_gemm.py", SM120)
def _(m):
    import cutlass

    f16 = cutlass.Float16
    a, b, c = abc((1024, 1024, 512, 1), f16, f16, f16)
    return Compile(m.Sm120GemmKernel(cutlass.Float32, (128, 128, 64)), (a, b, c, 170, stream()))


def _geforce_blockscaled(m):
    import cutlass

    fp4, sf, f16 = cutlass.Float4E2M1FN, cutlass.Float8E4M3FN, cutlass.Float16
    mnkl = (1024, 1024, 1024, 1)
    a, b, c = abc(mnkl, fp4, fp4, f16)
    sfa, sfb = (scale_factors(sf, mn, mnkl[2], 1, 16) for mn in mnkl[:2])
    gemm = m.Sm120BlockScaledGemmKernel(cutlass.Float32, 16, (128, 128, 128), (128, 128))
    return Compile(gemm, (a, b, sfa, sfb, c, 170, stream()))


example("blackwell_geforce/dense_blockscaled_gemm_persistent_cooperative",
        G + "blockscaled_gemm/dense_blockscaled_gemm_persistent_cooperative.py", SM120)(_geforce_blockscaled)
example("blackwell_geforce/dense_blockscaled_gemm_persistent_pingpong",
        G + "blockscaled_gemm/dense_blockscaled_gemm_persistent_pingpong.py", SM120)(_geforce_blockscaled)

# Kernels whose arguments (paged KV caches, SSD chunk states, MoE routing, EFC epilogue trees) take
# more than a table row to build; their compile is not tried here.
NO_DRIVER = "no driver yet: arguments too involved to fake in a table row"
for _name, _path in (
        ("blackwell/mamba2_ssd", A + "mamba2_ssd/mamba2_ssd.py"),
        ("blackwell/mixed_input_fmha_decode", A + "mixed_input_fmha/mixed_input_fmha_decode.py"),
        ("blackwell/mixed_input_fmha_prefill_d256", A + "mixed_input_fmha/mixed_input_fmha_prefill_d256.py"),
        ("blackwell/mixed_input_fmha_prefill_d512", A + "mixed_input_fmha/mixed_input_fmha_prefill_d512.py"),
        ("blackwell/mla_decode_fp16", A + "mla/mla_decode_fp16.py"),
        ("blackwell/mla_decode_fp8", A + "mla/mla_decode_fp8.py"),
        ("blackwell/moe_torch_grouped_mm", "cute/blackwell/kernel/moe/torch_grouped_mm.py"),
        ("blackwell/moe_torch_scaled_grouped_mm", "cute/blackwell/kernel/moe/torch_scaled_grouped_mm.py"),
        ("blackwell/efc_dense_gemm", "cute/blackwell/efc/common_dense_gemm_efc.py")):
    skipped(_name, _path, SM100, NO_DRIVER)
skipped("blackwell/efc_common", "cute/blackwell/efc/common_efc.py", SM100,
        "does not import with DSL 4.8.1: AttributeError: 'NoneType' object has no attribute '__dict__'")
