"""SASS as nvdisasm lists it, read for what the tests hold the kernels to.

The hazard these checks guard: upstream's grouped GEMM failed on sm_90a (CUDA error
715) where ptxas moved a runtime descriptor address into a uniform register with a
predicated R2UR inside an elect block. A TMA instruction takes its descriptor's 64-bit
address from a pair of uniform registers; `descriptor_writers` finds, for each such
register, the instruction that wrote it last before the TMA instruction in the listing
(the listing's order, not the control flow: in these kernels the address is set up in
the block that uses it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

_INSTRUCTION = re.compile(r"/\*(?P<address>[0-9a-f]+)\*/\s+(?P<predicate>@!?U?P[T\d]+\s+)?"
                          r"(?P<opcode>[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\s*(?P<operands>[^;]*);")
_TMA = ("UTMALDG", "UTMASTG", "UTMAREDG", "UTMACCTL")  # loads, stores, reductions, prefetches
_UNIFORM = re.compile(r"UR(\d+)")


@dataclass(frozen=True)
class Instruction:
    address: int
    predicated: bool
    opcode: str
    operands: Tuple[str, ...]
    text: str

    @property
    def destination(self) -> str:
        return self.operands[0].replace(".reuse", "") if self.operands else ""

    def writes(self, register: str) -> bool:
        """Whether it writes uniform register `register` (a wide, 64-bit or 128-bit write
        covers the registers after its first)."""
        if self.destination == register:
            return True
        first, target = _UNIFORM.fullmatch(self.destination), _UNIFORM.fullmatch(register)
        suffixes = self.opcode.split(".")[1:]
        width = 4 if "128" in suffixes else 2 if "64" in suffixes or "WIDE" in suffixes else 1
        return bool(first and target) and 0 < int(target[1]) - int(first[1]) < width


def instructions(sass: str) -> List[Instruction]:
    return [Instruction(int(m["address"], 16), m["predicate"] is not None, m["opcode"],
                        tuple(o.strip() for o in m["operands"].split(",")) if m["operands"].strip() else (),
                        m.group(0).strip())
            for m in _INSTRUCTION.finditer(sass)]


def spills(sass: str) -> List[str]:
    """The local loads and stores (ptxas's spills and refills)."""
    return [i.text for i in instructions(sass) if i.opcode.split(".")[0] in ("LDL", "STL")]


def tma_instructions(sass: str) -> List[Instruction]:
    return [i for i in instructions(sass) if i.opcode.startswith(_TMA)]


def descriptor_writers(sass: str) -> List[Tuple[Instruction, str, Optional[Instruction]]]:
    """(TMA instruction, a register of its descriptor's address, the instruction that last
    wrote that register before it, or None) for both registers of every TMA instruction."""
    listing = instructions(sass)
    found = []
    for at, tma in enumerate(listing):
        if not tma.opcode.startswith(_TMA):
            continue
        addresses = re.findall(r"\[(UR\d+)\]", " ".join(tma.operands))
        # a prefetch names only the descriptor; the others name shared memory first
        first = int(addresses[0 if tma.opcode.startswith("UTMACCTL") else 1][2:])
        for register in (f"UR{first}", f"UR{first + 1}"):
            writer = next((i for i in reversed(listing[:at]) if i.writes(register)), None)
            found.append((tma, register, writer))
    return found


def predicated_descriptor_moves(sass: str) -> List[str]:
    """The hazard: descriptor address registers last written by a predicated R2UR; also
    any whose writer was not found, which these checks cannot vouch for."""
    return [f"{tma.text}: {register} from {writer.text if writer else 'no instruction before it'}"
            for tma, register, writer in descriptor_writers(sass)
            if writer is None or (writer.predicated and writer.opcode.startswith("R2UR"))]
