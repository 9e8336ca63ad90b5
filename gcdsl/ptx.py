"""Reading what a compiled kernel became: parameter space and TMA instructions in PTX.

Used by the tutorials to summarise a compile and by the tests to assert on the
lowering. Plain text processing: no `cutlass` import.

    compiled = cute.compile(host, *args, options="--keep-ptx")   # no dump folder needed
    print(gcdsl.ptx.summary(gcdsl.ptx.of(compiled)))
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .abi import DESCRIPTOR_BYTES

# (a pointer parameter reads `.param .u64 .ptr .global .align 4 name`: the pointee's space and alignment)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+(?:\.ptr(?:\s+\.\w+)*(?:\s+\d+)?\s+)?(\w+)(?:\[(\d+)\])?")
_TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2,
               "b32": 4, "u32": 4, "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8}
_INSTR = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)(?:\s+([^;]*))?;", re.M)



@dataclass(frozen=True)
class Param:
    name: str
    align: int
    size: int
    offset: int  # byte offset in the kernel's parameter buffer (the CUDA ABI's layout)

    @property
    def descriptors(self) -> int:
        """128-byte descriptors this parameter holds: 1 for a TMA atom (`.align 64 .b8 [128]`),
        N for a packed list or a descriptor table (`.align 128 .b8 [N * 128]`), else 0."""
        if self.align >= 64 and self.size == DESCRIPTOR_BYTES:
            return 1
        if self.align >= DESCRIPTOR_BYTES and self.size % DESCRIPTOR_BYTES == 0:
            return self.size // DESCRIPTOR_BYTES
        return 0


@dataclass(frozen=True)
class Entry:
    name: str
    params: List[Param]
    body: str

    @property
    def param_bytes(self) -> int:
        return self.params[-1].offset + self.params[-1].size if self.params else 0

    def descriptor_runs(self) -> List[List[Param]]:
        """Maximal runs of descriptor-holding parameters that are adjacent in the buffer."""
        runs: List[List[Param]] = []
        for p in self.params:
            if not p.descriptors:
                continue
            if runs and runs[-1][-1].offset + runs[-1][-1].size == p.offset:
                runs[-1].append(p)
            else:
                runs.append([p])
        return runs

    def count(self, opcode_prefix: str) -> int:
        return sum(1 for m in _INSTR.finditer(self.body) if m.group(1).startswith(opcode_prefix))

    def instructions(self, opcode_prefix: str) -> List[str]:
        return [m.group(0).strip() for m in _INSTR.finditer(self.body) if m.group(1).startswith(opcode_prefix)]

    def uses_local_memory(self) -> bool:
        return bool(re.search(r"\.local\b|\b(?:ld|st)\.local\b|__local_depot", self.body))

    def local_bytes(self) -> int:
        """Size of the kernel's local-memory frame (`__local_depot`), 0 without one."""
        return sum(int(n) for n in re.findall(r"\.local\s+(?:\.align\s+\d+\s+)?\.b8\s+__local_depot\d+\[(\d+)\]",
                                              self.body))

    def printf_calls(self) -> int:
        """Device `printf` calls (`call ... vprintf`)."""
        return sum(1 for m in _INSTR.finditer(self.body)
                   if m.group(1).startswith("call") and re.search(r"\bvprintf\b", m.group(2) or ""))

    def traps(self) -> int:
        """`trap` instructions: with gcdsl's bounds checks on, one per checked index."""
        return self.count("trap")

    def local_memory_is_printf_only(self) -> bool:
        """Local memory is only written (never read back) and `vprintf` is called.

        That is the argument buffer `vprintf` takes: the kernel stores the
        message's values there and the printf machinery reads them. A spill or a
        local array would also be read back with `ld.local`.
        """
        return (self.uses_local_memory() and self.printf_calls() > 0
                and self.count("ld.local") == 0)

    def definition(self, register: str) -> Optional[str]:
        """The instruction that writes `register` (PTX from NVVM is in SSA form)."""
        for m in _INSTR.finditer(self.body):
            operands = (m.group(2) or "").split(",")
            if operands and operands[0].strip() == register:
                return m.group(0).strip()
        return None


def of(compiled: object) -> str:
    """The PTX of a function compiled with `cute.compile(..., options="--keep-ptx")`
    (or with CUTE_DSL_KEEP=ptx in the environment before `import cutlass`)."""
    text = getattr(compiled, "__ptx__", None)
    if not text:
        raise ValueError(f"{type(compiled).__name__} kept no PTX: compile it with "
                         "cute.compile(fn, *args, options=\"--keep-ptx\"), or set CUTE_DSL_KEEP=ptx before "
                         "`import cutlass`")
    return text


def entries(ptx: str) -> Dict[str, Entry]:
    """Every `.entry` (kernel) in `ptx`, with its parameters laid out as the ABI does."""
    found: Dict[str, Entry] = {}
    for m in re.finditer(r"\.entry\s+(\w+)\s*\((.*?)\)\s*(.*?)\n\{", ptx, re.S):
        name, params_text, body = m.group(1), m.group(2), _body(ptx, m.end())
        params: List[Param] = []
        offset = 0
        for pm in _PARAM.finditer(params_text):
            elem = _TYPE_BYTES.get(pm.group(2), 1)
            size = elem * int(pm.group(4) or 1)
            align = int(pm.group(1) or elem)
            offset = (offset + align - 1) // align * align
            params.append(Param(pm.group(3), align, size, offset))
            offset += size
        found[name] = Entry(name, params, body)
    return found


def _body(ptx: str, start: int) -> str:
    """The kernel body from `start` (just past its opening brace) to its closing brace.

    Braces are counted: inline-asm blocks (`{ .reg .pred p; ... }`) and vector
    operands (`{%r1, %r2}`) nest inside the body.
    """
    depth = 1
    for i in range(start, len(ptx)):
        if ptx[i] == "{":
            depth += 1
        elif ptx[i] == "}":
            depth -= 1
            if depth == 0:
                return ptx[start:i]
    return ptx[start:]


def format_strings(ptx: str) -> List[str]:
    """The module's printf formats (its global byte arrays), decoded, without the final NUL."""
    found = re.findall(r"\.global \.align \d+ \.b8 \w+\[\d+\] = \{([\d, ]+)\}", ptx)
    return [bytes(int(b) for b in f.split(",")).rstrip(b"\0").decode(errors="replace") for f in found]


def single_entry(ptx: str) -> Entry:
    kernels = entries(ptx)
    if len(kernels) != 1:
        raise ValueError(f"expected one kernel in the PTX, found {len(kernels)}")
    return next(iter(kernels.values()))


def summary(ptx: str, spans: Optional[Sequence[Tuple[str, int, int]]] = None) -> str:
    """A few lines a person can read: parameter space, TMA and WGMMA instructions per kernel.

    `spans`, a kernel's `parameter_spans` ((argument, first byte, end) of its last
    launch), names the argument each descriptor array and table belongs to.
    """
    lines = []
    for entry in entries(ptx).values():
        runs = entry.descriptor_runs()
        lines.append(f"kernel {entry.name[:60]}{'...' if len(entry.name) > 60 else ''}")
        lines.append(
            f"  parameter space: {entry.param_bytes} bytes in {len(entry.params)} parameters; "
            f"descriptor arrays: {', '.join(_describe_run(r, spans) for r in runs) or 'none'}"
        )
        tables = [p for p in entry.params if p.size > 8 and not p.descriptors]
        if tables:
            lines.append("  tables: " + ", ".join(f"{_named(p.offset, spans)}{p.size} B at +{p.offset} (align {p.align})"
                                                  for p in tables))
        lines.append(
            f"  TMA: {entry.count('cp.async.bulk.tensor')} cp.async.bulk.tensor, "
            f"{entry.count('cvta.param')} cvta.param, "
            f"WGMMA: {entry.count('wgmma.mma_async')} wgmma.mma_async, "
            f"local memory: {_local_memory(entry)}"
        )
        if entry.traps():
            lines.append(f"  bounds checks: {entry.traps()} (trap sites), each printing its message with vprintf first")
    return "\n".join(lines)


def _describe_run(run: List[Param], spans: Optional[Sequence[Tuple[str, int, int]]] = None) -> str:
    text = f"{sum(p.descriptors for p in run)} x 128 B at +{run[0].offset}"
    if len(run) > 1:
        text += f" in {len(run)} parameters"
    names = [n for n in dict.fromkeys(_owner(p.offset, spans) for p in run) if n]
    if len(names) == 1:
        return f"`{names[0]}`: {text}"
    # adjacent descriptors of several arguments form one run of the buffer: name them in turn
    return f"{text} ({', '.join(f'`{n}`' for n in names)})" if names else text


def _owner(offset: int, spans: Optional[Sequence[Tuple[str, int, int]]]) -> Optional[str]:
    return next((name for name, first, end in spans or () if first <= offset < end), None)


def _named(offset: int, spans: Optional[Sequence[Tuple[str, int, int]]]) -> str:
    owner = _owner(offset, spans)
    return f"`{owner}`: " if owner else ""


def _local_memory(entry: Entry) -> str:
    if not entry.uses_local_memory():
        return "none"
    size = f"yes, {entry.local_bytes()} B"
    if not entry.local_memory_is_printf_only():
        return size
    why = "the bounds-check messages" if entry.traps() else "device printf"
    return f"{size}: only the argument buffer of vprintf ({why})"
