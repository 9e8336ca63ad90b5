"""`import gcdsl` needs no torch: torch is for the tutorials and GPU tests, not the package."""
import os
import subprocess
import sys
import textwrap

from tests.conftest import ROOT

BLOCK_TORCH = textwrap.dedent("""
    import sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"torch is blocked in this test: {name}")

    sys.meta_path.insert(0, NoTorch())
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("the import hook let torch through")
""")


def run_without_torch(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUTE_DSL_", "GCDSL_"))}
    env.update(CUTE_DSL_ARCH="sm_90a", PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + textwrap.dedent(code)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_import_gcdsl_without_torch():
    proc = run_without_torch("""
        import numpy as np
        import gcdsl

        # dir() lists the lazy names (what completion offers) without importing them
        assert set(gcdsl.__all__) | {"ops"} <= set(dir(gcdsl))
        assert "cutlass" not in sys.modules
        # the parts that pull in the DSL, too: decorating, tables, descriptor tables
        gcdsl.kernel, gcdsl.TensorMapTable, gcdsl.tma_desc_ptr
        table = gcdsl.grid_constant(np.arange(8, dtype=np.int32))
        assert table.shape == (8,) and (table.numpy() == np.arange(8)).all()
        assert not [m for m in sys.modules if m == "torch" or m.startswith("torch.")]
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr[-3000:]
