#!/usr/bin/env bash
# The GPU tier, on a machine with an NVIDIA Hopper GPU after `python -m pip install -e ".[test]"`
# (or in any environment where those packages are already installed): every test (GPU
# ones included, the GEMM under @gcdsl.kernel), the tutorials, compute-sanitizer on the
# grouped GEMM's small cases, and the benchmarks named in GCDSL_BENCH (default:
# grid_constant; e.g. "w7_training w8_fused_moe"). Logs and benchmarks/results are packed into
# gpu-run.tgz in $OUT (or ./gpu-logs).
#
# Results record the commit measured: from git in a checkout; in a copy of the tree
# without .git, set GCDSL_GIT_COMMIT to the commit that was copied.
set -uo pipefail
cd "$(dirname "$0")/.."
dest="${OUT:-gpu-logs}"; mkdir -p "$dest"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
export GCDSL_TEST_DECORATOR=gcdsl
if [ -z "${GCDSL_GIT_COMMIT:-}" ] && ! git rev-parse HEAD >/dev/null 2>&1; then
  echo "gpu-host: no .git and GCDSL_GIT_COMMIT unset: results will say the commit is unknown"
fi
failed=0
step() { local log="$1"; shift; echo "== $*" | tee -a "$out/$log"; "$@" 2>&1 | tee -a "$out/$log"; [ "${PIPESTATUS[0]}" = 0 ] || { echo "FAILED: $*"; failed=1; }; }
step pytest.log python3 -m pytest -v -rs tests
step tutorials.log python3 tutorials/01_batch_copy.py --tensors 16
step tutorials.log python3 tutorials/01_batch_copy.py --tensors 64 --rows 2048
step tutorials.log python3 tutorials/02_megakernel.py --tensors 32
step tutorials.log python3 tutorials/02_megakernel.py --tensors 48 --seed 1
step tutorials.log python3 tutorials/01_batch_copy.py --sweep 1,4,16,64 --plot "$out/batch_copy_bandwidth.png"
step tutorials.log python3 tutorials/03_grouped_gemm.py
step tutorials.log python3 tutorials/04_fused_moe.py
for tool in memcheck racecheck synccheck; do  # the grouped GEMM's small cases (every schedule, SwiGLU, the expert layer in one kernel)
  step sanitizers.log compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 1 \
    python3 -m tests.kernels.grouped_mm_small
done
for bench in ${GCDSL_BENCH:-grid_constant}; do
  step "bench-$bench.log" python3 "benchmarks/$bench.py"
done
cp -r benchmarks/results "$out/" 2>/dev/null || true
tar czf "$dest/gpu-run.tgz" -C "$out" .
echo "gpu-host: $([ $failed = 0 ] && echo all passed || echo FAILURES)"
exit $failed
