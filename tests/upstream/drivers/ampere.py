"""Ampere examples (compiled for sm_90a, which runs them): SIMT and tensor-op GEMMs,
elementwise kernels, FlashAttention-2 and HSTU attention."""
from ..catalogue import SM90, Compile, example
from ..fakes import stream, tensor

K = "cute/ampere/kernel/"


@example("ampere/sgemm", K + "dense_gemm/sgemm.py", SM90)
def _(m):
    import cutlass

    f32 = cutlass.Float32
    a = tensor(f32, (256, 64), order=(0, 1), dynamic=True)   # m-major
    b = tensor(f32, (256, 64), order=(1, 0), dynamic=True)   # k-major
    c = tensor(f32, (256, 256), order=(1, 0), dynamic=True)  # n-major
    return Compile(m.SGemm(), (a, b, c), {"stream": stream(), "options": "--generate-line-info"})


@example("ampere/tensorop_gemm", K + "dense_gemm/tensorop_gemm.py", SM90)
def _(m):
    import cutlass

    f16 = cutlass.Float16
    l, mm, n, k = 1, 256, 256, 512
    # bmm's convention: a (l, m, k) m-major, b (l, k, n) n-major, c (l, m, n) n-major.
    a = tensor(f16, (l, mm, k), order=(2, 0, 1), dynamic=True)
    b = tensor(f16, (l, k, n), order=(2, 1, 0), dynamic=True)
    c = tensor(f16, (l, mm, n), order=(2, 1, 0), dynamic=True)
    gemm = m.TensorOpGemm(f16, f16, cutlass.Float32, (2, 2, 1))
    return Compile(m.bmm, (gemm, a, b, c, stream()))


@example("ampere/elementwise_add", K + "elementwise/elementwise_add.py", SM90)
def _(m):
    import cutlass

    a, b, c = (tensor(cutlass.Float32, (1024, 1024), dynamic=True) for _ in range(3))
    m.elementwise_add.set_name_prefix("host_prefix")  # as the example's run() does
    return Compile(m.elementwise_add, (a, b, c), {"options": "--generate-line-info"})


def _apply(op_name: str):
    def build(m):
        import functools
        import operator

        import cutlass

        n_inputs = 1 if op_name == "leaky_relu" else 2
        op = functools.partial(m.leaky_relu, alpha=0.01) if op_name == "leaky_relu" else getattr(operator, op_name)
        inputs = [tensor(cutlass.Float32, (4096, 4096)) for _ in range(n_inputs)]
        result = tensor(cutlass.Float32, (4096, 4096), dynamic=True)
        return Compile(m.elementwise_apply, (op, inputs, result, stream()), {"options": "--generate-line-info"})

    return build


example("ampere/elementwise_apply[add]", K + "elementwise/elementwise_apply.py", SM90)(_apply("add"))
example("ampere/elementwise_apply[leaky_relu]", K + "elementwise/elementwise_apply.py", SM90)(_apply("leaky_relu"))


@example("ampere/elementwise_add_autotune", "cute/ampere/tutorial/elementwise_add_autotune.py", SM90)
def _(m):
    import cutlass

    a, b, c = (tensor(cutlass.Float32, (1024, 1024), dynamic=True) for _ in range(3))
    return Compile(m.elementwise_add_autotune, (a, b, c, 1024, 1024))


@example("ampere/elementwise_add_autotune[class]", "cute/ampere/tutorial/elementwise_add_autotune.py", SM90)
def _(m):
    import cutlass

    a, b, c = (tensor(cutlass.Float32, (1024, 1024), dynamic=True) for _ in range(3))
    return Compile(m.ElementwiseAddWrapper(64), (a, b, c, 1024, 1024))


def _bshd(dtype, b, s, h, d):
    """(batch, seqlen, heads, head_dim), head_dim contiguous."""
    return tensor(dtype, (b, s, h, d), dynamic=True)


def _flash_attention(causal: bool):
    def build(m):
        import cutlass

        bf16 = cutlass.BFloat16
        q, k, v, o = (_bshd(bf16, 4, 1024, 16, 128) for _ in range(4))
        fa2 = m.FlashAttentionForwardAmpere(128, 128, 64, 128, causal)
        return Compile(fa2, (q, k, v, o, cutlass.Float32(0.5), stream()))

    return build


example("ampere/flash_attention_v2", K + "attention/flash_attention_v2.py", SM90)(_flash_attention(False))
example("ampere/flash_attention_v2[causal]", K + "attention/flash_attention_v2.py", SM90)(_flash_attention(True))


@example("ampere/hstu_attention", K + "attention/hstu_attention.py", SM90)
def _(m):
    import cutlass

    bf16 = cutlass.BFloat16
    b, s, h, d = 4, 2048, 4, 128
    q, k, v, o = (_bshd(bf16, b, s, h, d) for _ in range(4))
    rab = tensor(bf16, (b, h, s, s), dynamic=True)
    hstu = m.HSTUAttentionForwardAmpere(bf16, b, s, s, h, d, 64, 64, 128, enable_fast_sigmoid=True,
                                        enable_block_rasterization=True, is_causal=True)
    return Compile(hstu, (q, k, v, o, rab, stream()))
