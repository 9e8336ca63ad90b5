"""The PTX of every compile-only case, pinned: a change to the lowering that moves one
instruction shows up here, and is accepted only by rewriting the fingerprints
(`GCDSL_UPDATE_GOLDEN=1`) in the same commit, with the reason in its message."""
import hashlib
import json
import os

import pytest

from gcdsl import config
from tests.compile_cases import CASES

FINGERPRINTS = os.path.join(os.path.dirname(__file__), "golden", "ptx_fingerprints.json")
ARCH_CASES = {
    "sm_90a": tuple(sorted(CASES)),
    "sm_100a": tuple(sorted(c for c in CASES if c != "wgmma_gemm")),  # Hopper WGMMA only
}


def _fingerprint(ptx: str) -> str:
    return hashlib.sha256(ptx.encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def fingerprints(compile_cases):
    return {arch: {case: _fingerprint(compile_cases(arch, "gcdsl", cases).ptx(case)) for case in cases}
            for arch, cases in ARCH_CASES.items()}


def test_ptx_of_every_case_is_unchanged(fingerprints):
    if config.get().update_golden:
        with open(FINGERPRINTS, "w") as f:
            json.dump(fingerprints, f, indent=1, sort_keys=True)
            f.write("\n")
    with open(FINGERPRINTS) as f:
        pinned = json.load(f)
    changed = [f"{arch}/{case}" for arch in fingerprints for case in fingerprints[arch]
               if pinned.get(arch, {}).get(case) != fingerprints[arch][case]]
    assert not changed, f"PTX changed for {changed}"
