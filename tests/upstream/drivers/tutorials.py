"""The DSL tutorials (`dsl_tutorials/`, `cute/tvm_ffi/`) that have kernels, compiled for sm_90a
(the fp16 IKET GEMM for sm_100a). Where a tutorial launches its kernel only from its
`__main__` block, the driver's own `@cute.jit` host does the launch."""
from ..catalogue import SM90, SM100, Compile, example, skipped
from ..fakes import pointer, stream, tensor

D = "dsl_tutorials/"


@example("dsl_tutorials/call_bypass_dlpack", D + "call_bypass_dlpack.py", SM90)
def _(m):
    import cutlass

    f16 = cutlass.Float16
    sizes = tuple(cutlass.Int32(v) for v in (256, 256, 512, 1))
    return Compile(m.tensor_op_gemm_wrapper, (pointer(f16), pointer(f16), pointer(f16), *sizes, stream()))


@example("dsl_tutorials/cooperative_launch", D + "cooperative_launch.py", SM90)
def _(m):
    import cutlass

    return Compile(m.run_cooperative_kernel, (pointer(cutlass.Uint32, 4),))


@example("dsl_tutorials/dataclass_immutable", D + "dataclass_immutable.py", SM90)
def _(m):
    import cutlass

    src, dst = (tensor(cutlass.Float32, ("?",), align=4) for _ in range(2))
    return Compile(m.memcpy_jit, (src, dst), {"num_threads": 128})


def _dynamic_smem(static: bool):
    def build(m):
        import cutlass.cute as cute

        kernel = m.kernel_static if static else m.kernel_no_smem

        @cute.jit
        def launch():
            kernel().launch(grid=(1, 1, 1), block=(1, 1, 1))

        return Compile(launch)

    return build


example("dsl_tutorials/dynamic_smem_size[static]", D + "dynamic_smem_size.py", SM90)(_dynamic_smem(True))
example("dsl_tutorials/dynamic_smem_size[no_smem]", D + "dynamic_smem_size.py", SM90)(_dynamic_smem(False))


def _export(host: str):
    def build(m):
        import cutlass

        a, b = (tensor(cutlass.Float32, ("?", "?")) for _ in range(2))
        args = (a,) if host == "print_tensor" else (a, b)
        return Compile(getattr(m, host), args, {"stream": stream()})

    return build


example("dsl_tutorials/export_to_c[print_tensor]", D + "export/export_to_c.py", SM90)(_export("print_tensor"))
example("dsl_tutorials/export_to_c[add_one]", D + "export/export_to_c.py", SM90)(_export("add_one"))


def _vote(use_inline_ptx: bool):
    def build(m):
        import cutlass

        ballot = tensor(cutlass.Int32, (32,), dynamic=True, align=4)
        flags = [tensor(cutlass.Boolean, (32,), dynamic=True, align=1) for _ in range(3)]
        return Compile(m.vote, (ballot, *flags, use_inline_ptx))

    return build


example("dsl_tutorials/inline_ptx[ptx]", D + "inline_ptx.py", SM90)(_vote(True))
example("dsl_tutorials/inline_ptx[nvvm]", D + "inline_ptx.py", SM90)(_vote(False))


@example("dsl_tutorials/smem_allocator", D + "smem_allocator.py", SM90)
def _(m):
    import cutlass

    f32 = cutlass.Float32
    return Compile(m.host, (0.5, tensor(f32, (8, 4)), 1.0, tensor(f32, (8, 2)), 2.0, tensor(f32, (16, 2))))


def _event_launch(programmatic: bool):
    def build(m):
        import cutlass
        from cuda.bindings import runtime as cuda_runtime

        out = tensor(cutlass.Int32, (128, 4), order=(0, 1))
        host = m.launch_with_programmatic_event if programmatic else m.launch_with_launch_completion_event
        return Compile(host, (out, cutlass.Int32(7), cuda_runtime.cudaStream_t(0), cuda_runtime.cudaEvent_t(0)))

    return build


example("dsl_tutorials/launch_completion_event", D + "launch_completion_and_programmatic_events.py", SM90)(
    _event_launch(False))
example("dsl_tutorials/programmatic_event", D + "launch_completion_and_programmatic_events.py", SM90)(
    _event_launch(True))


def _pdl(first: bool):
    def build(m):
        import cutlass

        a, b, c = (tensor(cutlass.Float32, (1024, 1024), dynamic=True) for _ in range(3))
        return Compile(m.elementwise_add, (a, b, c, stream(), True), {"is_first_kernel": first})

    return build


example("dsl_tutorials/programmatic_dependent_launch[first]", D + "programmatic_dependent_launch.py", SM90)(_pdl(True))
example("dsl_tutorials/programmatic_dependent_launch[second]", D + "programmatic_dependent_launch.py", SM90)(
    _pdl(False))


@example("dsl_tutorials/fp16_gemm_4_iket", D + "fp16_gemm_4_iket.py", SM100)
def _(m):
    io = m.io_dtype
    a, b, c = (tensor(io, shape, dynamic=True) for shape in ((1024, 512), (512, 512), (1024, 512)))
    return Compile(m.host_function, (a, b, c, 148 // 8, 148 // 2))


# JAX's examples: the kernels and their `@cute.jit` launchers need no JAX (only `cutlass_call` does).
J = D + "jax/cute_dsl_jax_kernels.py"


def _called_from_jit(launcher, kwargs):
    """`launcher(stream, *tensors, **kwargs)` inside a `@cute.jit`, its keywords compile-time values,
    as `cutlass_call` runs it."""
    import cutlass.cute as cute

    @cute.jit
    def host(stream_, *tensors):
        launcher(stream_, *tensors, **kwargs)

    return host


def _jax(launcher: str):
    def build(m):
        import cutlass

        f32 = cutlass.Float32
        blocked = lambda: tensor(f32, (4, 128, 8))  # noqa: E731  (vector, thread, block)
        flat = lambda n: tensor(f32, (n,))  # noqa: E731
        args, kwargs = {
            "launch_vector_add": ((blocked(), blocked(), blocked()), {}),
            "launch_saxpy": ((blocked(), blocked(), blocked()), {"alpha": 2.0}),
            "launch_relu": ((flat(4096), flat(4096)), {"N": 4096}),
            "launch_fused_bias_relu": ((flat(4096), flat(64), flat(4096)), {"N": 4096, "width": 64}),
            "launch_gemm": ((flat(128 * 64), flat(64 * 96), flat(128 * 96)), {"M": 128, "N": 96, "K": 64}),
            "launch_elementwise_add": ((tensor(f32, (256, 256)), tensor(f32, (256, 256)), tensor(f32, (256, 256))),
                                       {}),
        }[launcher]
        return Compile(_called_from_jit(getattr(m, launcher), kwargs), (stream(), *args))

    return build


for _launcher in ("launch_vector_add", "launch_saxpy", "launch_relu", "launch_fused_bias_relu", "launch_gemm",
                  "launch_elementwise_add"):
    example(f"dsl_tutorials/jax_kernels[{_launcher.removeprefix('launch_')}]", J, SM90)(_jax(_launcher))


@example("dsl_tutorials/jax_elementwise_apply", D + "jax/elementwise_apply_example.py", SM90)
def _(m):
    import operator

    import cutlass

    inputs = [tensor(cutlass.Float32, (1024, 1024)) for _ in range(2)]
    return Compile(m.elementwise_apply, (operator.mul, inputs, tensor(cutlass.Float32, (1024, 1024), dynamic=True),
                                         stream()))


@example("dsl_tutorials/tvm_ffi_error_reporting", D + "tvm_ffi/error_reporting.py", SM90)
def _(m):
    import cutlass

    return Compile(m.add_one, (tensor(cutlass.Float32, (16,)), tensor(cutlass.Float32, (16,))))


@example("dsl_tutorials/tvm_ffi_jit_and_use_in_torch", D + "tvm_ffi/jit_and_use_in_torch.py", SM90)
def _(m):
    import cutlass

    return Compile(m.add_one, (tensor(cutlass.Float32, (16,)), tensor(cutlass.Float32, (16,))))


@example("tvm_ffi/fp4_x2_tensor", "cute/tvm_ffi/fp4_x2_tensor.py", SM90)
def _(m):
    import cutlass

    return Compile(m.print_fp4_x2_tensor_info, (tensor(cutlass.Float4E2M1FN, (64, 128), align=16),
                                                tensor(cutlass.Uint8, (64, 64), align=16)))


for _name, _path in (("dsl_tutorials/jax_cutlass_call_export", "jax/cutlass_call_export.py"),
                     ("dsl_tutorials/jax_cutlass_call_sharding", "jax/cutlass_call_sharding.py"),
                     ("dsl_tutorials/tvm_ffi_jit_and_use_in_jax", "tvm_ffi/jit_and_use_in_jax.py")):
    skipped(_name, D + _path, SM90, "imports jax at module level (not installed here)")
skipped("dsl_tutorials/tvm_ffi_aot_export", D + "tvm_ffi/aot_export.py", SM90,
        "imports tvm_ffi at module level (not installed here)")
