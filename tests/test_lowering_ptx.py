"""Compile-only checks of the lowering, on a machine without a GPU.

What must hold in the PTX for a runtime-indexed `List[cute.CopyAtom]`:
- two kernel parameters whatever N is: the template atom's descriptor
  (`.align 64 .b8 [128]`) and all N descriptors packed in one blob
  (`.align 128 .b8 [N * 128]`);
- the descriptor operand of every `cp.async.bulk.tensor` is `cvta.param(blob) + index * 128`;
- there is one `cp.async.bulk.tensor` per `cute.copy` call site, whatever N is;
- no descriptor goes through local memory.
And a kernel using no gcdsl feature compiles to the same PTX as under `@cute.kernel`.
"""
import re

import pytest

from gcdsl import ptx
from tests.sass import descriptor_writers, predicated_descriptor_moves, tma_instructions
from tests.test_ptx_fingerprints import ARCH_CASES

SIZES = (1, 3, 16, 64)
BATCH_CASES = tuple(f"batch_copy_n{n}" for n in SIZES)
PLAIN_CASES = ("constant_chain_n3", "wgmma_gemm")
ARCHS = ("sm_90a", "sm_100a")
COPY_SITES = 2  # batch_copy's kernel: one TMA load and one TMA store call site


@pytest.fixture(scope="module", params=ARCHS)
def compiled(request, compile_cases):
    return compile_cases(request.param, "gcdsl", BATCH_CASES)


def _trace_back(entry: ptx.Entry, register: str, depth: int = 4) -> str:
    """The definitions feeding `register`, a few levels up, joined as text."""
    text = entry.definition(register) or ""
    if depth and text:
        for reg in re.findall(r"%rd\d+|%r\d+", text.split(None, 1)[1])[1:]:
            text += "\n" + _trace_back(entry, reg, depth - 1)
    return text


@pytest.mark.parametrize("n", SIZES)
def test_each_list_is_a_template_and_one_packed_blob(compiled, n):
    entry = ptx.single_entry(compiled.ptx(f"batch_copy_n{n}"))
    params = entry.params
    for template, blob in (params[0:2], params[2:4]):  # loads, then stores
        assert (template.size, template.align) == (128, 64)
        assert (blob.size, blob.align) == (128 * n, 128), "the list's descriptors are not one packed blob"
    assert params[4].descriptors == 0  # the lists end where the next parameter begins


@pytest.mark.parametrize("n", SIZES)
def test_one_tma_instruction_per_call_site(compiled, n):
    entry = ptx.single_entry(compiled.ptx(f"batch_copy_n{n}"))
    assert entry.count("cp.async.bulk.tensor") == COPY_SITES


@pytest.mark.parametrize("n", SIZES)
def test_descriptor_address_is_param_base_plus_index_times_128(compiled, n):
    _assert_runtime_descriptors(ptx.single_entry(compiled.ptx(f"batch_copy_n{n}")), "cp.async.bulk.tensor", 2)


def test_tma_reduce_store_is_runtime_indexed_too(compile_cases):
    entry = ptx.single_entry(compile_cases("sm_90a", "gcdsl", ("batch_add_n16",)).ptx("batch_add_n16"))
    _assert_runtime_descriptors(entry, "cp.reduce.async.bulk.tensor", 1)
    _assert_runtime_descriptors(entry, "cp.async.bulk.tensor", 1)


def _assert_runtime_descriptors(entry: ptx.Entry, opcode: str, expected: int) -> None:
    instructions = entry.instructions(opcode)
    assert len(instructions) == expected, instructions
    for instr in instructions:
        # The tensor-map operand is the global-side `[%rdX, {coords}]`.
        desc_reg = re.search(r"\[(%rd\d+),\s*\{", instr).group(1)
        chain = _trace_back(entry, desc_reg)
        assert "cvta.param" in chain, f"descriptor {desc_reg} does not come from parameter space:\n{chain}"
        # A list of one still goes through the index arithmetic; ptxas folds it.
        assert re.search(r"mul\.wide\.[su]32\s+%rd\d+,\s*%r\d+,\s*128;", chain) or re.search(
            r"shl\.b64\s+%rd\d+,\s*%rd\d+,\s*7;", chain
        ), f"no index * 128 feeding the descriptor:\n{chain}"


@pytest.mark.parametrize("n", SIZES)
def test_prefetch_follows_the_runtime_index(compiled, n):
    entry = ptx.single_entry(compiled.ptx(f"batch_copy_n{n}"))
    (instr,) = entry.instructions("prefetch.tensormap")
    chain = _trace_back(entry, re.search(r"\[(%rd\d+)\]", instr).group(1))
    assert "cvta.param" in chain and re.search(r"mul\.wide\.[su]32\s+%rd\d+,\s*%r\d+,\s*128;", chain), chain


@pytest.mark.parametrize("n", SIZES)
def test_no_local_memory(compiled, n):
    assert not ptx.single_entry(compiled.ptx(f"batch_copy_n{n}")).uses_local_memory()


def test_sass_issues_tma_from_param_space_without_local_memory(compile_cases):
    sass = compile_cases("sm_90a", "gcdsl", BATCH_CASES).sass("batch_copy_n16")
    assert len(re.findall(r"\bUTMALDG\b", sass)) == 1
    assert len(re.findall(r"\bUTMASTG\b", sass)) == 1
    assert not re.search(r"\b(?:LDL|STL)\b", sass)
    # The hazard upstream's grouped GEMM hit on sm_90a (CUDA error 715): a predicated R2UR
    # moving a runtime descriptor address into a uniform register inside an elect block.
    assert not re.search(r"@!?U?P\d+\s+R2UR\b", sass)


def test_the_sass_check_finds_a_descriptor_address_moved_by_a_predicated_r2ur(compile_cases):
    """`tests.sass`'s check against the hazard itself: the batch copy's listing with the
    last write of one TMA load's descriptor register made a predicated R2UR."""
    sass = compile_cases("sm_90a", "gcdsl", BATCH_CASES).sass("batch_copy_n16")
    load, register, writer = next(w for w in descriptor_writers(sass) if w[0].opcode.startswith("UTMALDG"))
    assert writer is not None and writer.writes(register) and not predicated_descriptor_moves(sass)
    address = writer.text[:writer.text.index("*/") + 2]
    seeded = sass.replace(writer.text, f"{address} @P0 R2UR {register}, R4 ;", 1)
    assert any(load.text in found and "R2UR" in found for found in predicated_descriptor_moves(seeded))


@pytest.mark.parametrize("case", ARCH_CASES["sm_90a"])
def test_no_case_moves_a_descriptor_address_with_a_predicated_r2ur(compile_cases, case):
    """Every compile-only case for sm_90a in SASS: each TMA instruction's descriptor address
    (a runtime pick from a packed list or a descriptor table, a plain atom's) is never last
    written by a predicated R2UR."""
    text = compile_cases("sm_90a", "gcdsl", ARCH_CASES["sm_90a"]).sass(case)
    assert bool(tma_instructions(text)) == (case not in ("param_kinds", "table_gather"))  # (those copy by no TMA)
    assert not predicated_descriptor_moves(text)


@pytest.mark.parametrize("case", PLAIN_CASES)
def test_plain_kernels_compile_to_identical_ptx(compile_cases, case):
    under_cute = compile_cases("sm_90a", "cute", PLAIN_CASES).ptx(case)
    under_gcdsl = compile_cases("sm_90a", "gcdsl", PLAIN_CASES).ptx(case)
    assert "cp.async.bulk.tensor" in under_cute
    assert under_gcdsl == under_cute


def test_bounds_check_is_one_compare_and_a_trap_when_on(compile_cases):
    entry = ptx.single_entry(compile_cases("sm_90a", "gcdsl", ("bounds_checked",)).ptx("bounds_checked"))
    assert re.search(r"setp\.lt\.u32\s+%p\d+,\s*%r\d+,\s*4;", entry.body)  # index < 4 atoms, unsigned
    assert entry.count("trap") == 1 and "vprintf" in entry.body
    # its only local memory is vprintf's argument buffer, and the summary says so
    assert entry.local_memory_is_printf_only()
    assert "bounds checks: 1 (trap sites)" in ptx.summary(compile_cases("sm_90a", "gcdsl", ("bounds_checked",))
                                                           .ptx("bounds_checked"))


@pytest.mark.parametrize("n", SIZES)
def test_no_bounds_check_code_when_off(compiled, n):
    body = ptx.single_entry(compiled.ptx(f"batch_copy_n{n}")).body
    assert "trap" not in body and "vprintf" not in body


def test_multicast_load_is_runtime_indexed_too(compile_cases):
    entry = ptx.single_entry(compile_cases("sm_90a", "gcdsl", ("multicast",)).ptx("multicast"))
    (instr,) = entry.instructions("cp.async.bulk.tensor")
    assert "multicast::cluster" in instr
    _assert_runtime_descriptors(entry, "cp.async.bulk.tensor", 1)


def _descriptor_pick(entry: ptx.Entry, instr: str):
    """(list's blob parameter, stride, parameter the index was loaded from) of the
    descriptor a TMA instruction uses, read off the PTX's data flow:

        add.s64  D, OFF, BASE
        mul.wide.s32  OFF, I, STRIDE        I: ld.global of the index tensor's parameter
        cvta.param.u64  BASE, P             P: mov.b64 of the list's blob parameter

    Anything else between the index load and the instruction (an add, a xor, another
    base) does not match and fails the test.
    """
    desc = re.search(r"\[(%rd\d+),\s*\{", instr).group(1)
    add = re.fullmatch(r"add\.s64\s+%rd\d+,\s*(%rd\d+),\s*(%rd\d+);", entry.definition(desc))
    assert add, entry.definition(desc)
    defs = {reg: entry.definition(reg) for reg in add.groups()}
    (mul,) = [d for d in defs.values() if d.startswith("mul.wide")]
    (cvta,) = [d for d in defs.values() if d.startswith("cvta.param")]
    index, stride = re.fullmatch(r"mul\.wide\.[su]32\s+%rd\d+,\s*(%r\d+),\s*(\d+);", mul).groups()
    base = entry.definition(cvta.split(",")[1].strip(" ;"))
    first = int(re.fullmatch(r"mov\.b64\s+%rd\d+,\s*\w+_param_(\d+);", base).group(1))
    load = entry.definition(index)
    assert load.startswith("ld.global"), f"index {index} is computed, not loaded: {load}"
    address = re.search(r"\[(%rd\d+)\]", load).group(1)
    source = int(re.search(r"_param_(\d+)\]", _trace_back(entry, address)).group(1))
    return first, int(stride), source


@pytest.mark.parametrize("arch", ARCHS)
def test_each_tma_instruction_uses_its_own_list_entry_and_index(compile_cases, arch):
    """crossed_kernel: loads[load_k] and stores[store_k], k read from two tensors.

    Parameters: loads' template 0 and blob 1, stores' template 2 and blob 3 (static
    coordinates take none), load_pick 4, store_pick 5. A lowering that took the wrong
    list, the wrong base entry, the wrong stride or an altered index fails here."""
    entry = ptx.single_entry(compile_cases(arch, "gcdsl", ("crossed_n4",)).ptx("crossed_n4"))
    (load,) = entry.instructions("cp.async.bulk.tensor.2d.shared::cta.global")
    (store,) = entry.instructions("cp.async.bulk.tensor.2d.global.shared::cta")
    assert _descriptor_pick(entry, load) == (1, 128, 4)
    assert _descriptor_pick(entry, store) == (3, 128, 5)
