"""`gcdsl.ptx.summary` on PTX text: parameter space, TMA, local memory and bounds checks."""
import subprocess
import sys

from tests.conftest import ROOT

# The shape of a bounds-checked kernel for sm_90a (names shortened): the check's message
# goes to vprintf through an 8-byte local buffer, then the kernel traps.
CHECKED = """
.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.global .align 1 .b8 printfFormat_0[4] = {37, 100, 10, 0};

.visible .entry checked(
	.param .align 64 .b8 checked_param_0[128],
	.param .align 64 .b8 checked_param_1[128],
	.param .align 8 .b8 checked_param_2[8]
)
.reqntid 128, 1, 1
{
	.local .align 8 .b8 	__local_depot0[8];
	.reg .b64 	%SP;
	.reg .b64 	%SPL;
	mov.b64 	%SPL, __local_depot0;
	cvta.local.u64 	%SP, %SPL;
	mov.b64 	%rd1, checked_param_0;
	setp.lt.u32 	%p2, %r3, 2;
	@%p2 bra 	$L__BB0_3;
	add.u64 	%rd6, %SP, 0;
	add.u64 	%rd7, %SPL, 0;
	st.local.b32 	[%rd7], %r3;
	{ // callseq 0, 0
	.param .b64 	param0;
	.param .b64 	param1;
	.param .b32 	retval0;
	st.param.b64 	[param1], %rd6;
	st.param.b64 	[param0], %rd9;
	call.uni (retval0), vprintf, (param0, param1);
	} // callseq 0
	// begin inline asm
	trap;
	// end inline asm
$L__BB0_3:
	mul.wide.s32 	%rd10, %r3, 128;
	cvta.param.u64 	%rd11, %rd1;
	add.s64 	%rd12, %rd10, %rd11;
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd12, {%r4, %r5}], [%r6];
	setp.lt.u32 	%p3, %r8, 2;
	@%p3 bra 	$L__BB0_5;
	st.local.b32 	[%rd7], %r8;
	call.uni (retval0), vprintf, (param0, param1);
	trap;
$L__BB0_5:
	ret;
}
"""


def test_bounds_checks_explain_local_memory_and_are_counted():
    import gcdsl

    text = gcdsl.ptx.summary(CHECKED)
    assert "parameter space: 264 bytes in 3 parameters; descriptor arrays: 2 x 128 B at +0" in text
    assert "1 cp.async.bulk.tensor, 1 cvta.param" in text
    assert "local memory: yes, 8 B: only the argument buffer of vprintf (the bounds-check messages)" in text
    assert "bounds checks: 2 (trap sites)" in text


def test_local_memory_that_is_read_back_is_not_blamed_on_printf():
    import gcdsl

    spilled = CHECKED.replace("$L__BB0_5:\n\tret;", "$L__BB0_5:\n\tld.local.b32 \t%r9, [%rd7];\n\tret;")
    text = gcdsl.ptx.summary(spilled)
    assert "local memory: yes, 8 B\n" in text
    assert "vprintf (" not in text


def test_unchecked_kernel_says_none():
    import gcdsl

    plain = "\n".join(line for line in CHECKED.splitlines()
                      if not any(w in line for w in ("local", "vprintf", "trap", "%SP")))
    text = gcdsl.ptx.summary(plain)
    assert text.endswith("local memory: none")
    assert "bounds checks" not in text


def test_ptx_is_reachable_from_the_package_without_importing_it():
    code = "import gcdsl, sys; assert 'cutlass' not in sys.modules; print(gcdsl.ptx.summary(''), 'ok')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_ptx_of_a_compiled_function_needs_no_dump_folder(tmp_path):
    """`gcdsl.ptx.of(cute.compile(..., options="--keep-ptx"))`, with no CUTE_DSL_* variable
    but the architecture; without the option it says how to keep the PTX."""
    import os

    script = tmp_path / "keep_ptx.py"
    script.write_text(
        "import cutlass, cutlass.cute as cute, gcdsl\n"
        "@gcdsl.kernel\n"
        "def fill(x: cute.Tensor):\n"
        "    tidx, _, _ = cute.arch.thread_idx()\n"
        "    x[tidx] = cutlass.Float32(1.0)\n"
        "@cute.jit\n"
        "def host(x: cute.Tensor):\n"
        "    fill(x).launch(grid=(1, 1, 1), block=(32, 1, 1))\n"
        "x = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (32,))\n"
        "print(gcdsl.ptx.summary(gcdsl.ptx.of(cute.compile(host, x, options='--keep-ptx'))))\n"
        "try:\n"
        "    gcdsl.ptx.of(cute.compile(host, x))\n"
        "except ValueError as err:\n"
        "    print('refused:', err)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTE_DSL_")}
    env.update(CUTE_DSL_ARCH="sm_90a", CUTE_DSL_NO_CACHE="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kernel " in proc.stdout and "parameter space:" in proc.stdout
    assert "refused:" in proc.stdout and "--keep-ptx" in proc.stdout


def test_summary_names_the_parameter_of_each_array_and_table():
    import gcdsl

    spans = [("loads", 0, 256), ("pick", 256, 264)]
    text = gcdsl.ptx.summary(CHECKED, spans)
    assert "descriptor arrays: 2 x 128 B at +0 in 2 parameters (`loads`)" not in text  # one owner: a prefix
    assert "descriptor arrays: `loads`: 2 x 128 B at +0 in 2 parameters" in text
    both = gcdsl.ptx.summary(CHECKED, [("loads", 0, 128), ("stores", 128, 256)])
    assert "2 x 128 B at +0 in 2 parameters (`loads`, `stores`)" in both
    assert "`" not in gcdsl.ptx.summary(CHECKED).split("descriptor arrays:")[1].splitlines()[0]


def test_format_strings_decodes_the_printf_formats():
    from gcdsl import ptx

    assert ptx.format_strings(CHECKED) == ["%d\n"]
    assert ptx.format_strings(".visible .entry k() {}") == []


def test_pointer_parameters_are_laid_out_as_eight_byte_words():
    """A raw pointer parameter (`cute.Pointer`) reads `.param .u64 .ptr .global .align 4
    name`: eight bytes at an eight-byte boundary, whatever alignment its pointee has."""
    from gcdsl import ptx

    entry = ptx.entries(""".visible .entry k(
	.param .align 64 .b8 k_param_0[128],
	.param .u32 k_param_1,
	.param .u64 .ptr .global .align 4 k_param_2
)
{
	ret;
}
""")["k"]
    assert [(p.name, p.align, p.size, p.offset) for p in entry.params] == [
        ("k_param_0", 64, 128, 0), ("k_param_1", 4, 4, 128), ("k_param_2", 8, 8, 136)]
    assert entry.param_bytes == 144
