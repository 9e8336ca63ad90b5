#!/usr/bin/env bash
# The grouped GEMM on a GPU host (after `source .gpu/b/install.sh`, see ../shared/gpu-host):
#   tests      python3 -m pytest -v -rs tests/test_grouped_mm.py tests/test_tutorials.py -k "grouped or 03"
#   tutorial   python3 tutorials/03_grouped_gemm.py
#   sanitizer  compute-sanitizer --tool memcheck|racecheck|synccheck python3 -m tests.kernels.grouped_mm_small
#   bench      python3 benchmarks/w5_grouped_gemm.py   (set GCDSL_UPSTREAM_EXAMPLES to
#              <cutlass>/examples/python/CuTeDSL for the upstream column)
# Arguments pick some of them (default: all four), e.g. `bash .ci/gpu-grouped-gemm.sh tests bench`.
# Logs and benchmarks/results/W5.* are packed into grouped-gemm.tgz in $OUT (or ./gpu-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
dest="${OUT:-gpu-logs}"; mkdir -p "$dest"
out="$(mktemp -d)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
failed=0
step() { local log="$1"; shift; echo "== $*" | tee -a "$out/$log"; "$@" 2>&1 | tee -a "$out/$log"; [ "${PIPESTATUS[0]}" = 0 ] || { echo "FAILED: $*"; failed=1; }; }
steps="${*:-tests tutorial sanitizer bench}"
for s in $steps; do
  case "$s" in
    tests) step pytest.log python3 -m pytest -v -rs tests/test_grouped_mm.py tests/test_tutorials.py -k "grouped or 03" ;;
    tutorial) step tutorial.log python3 tutorials/03_grouped_gemm.py ;;
    sanitizer)
      command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not on PATH: skipped" | tee "$out/sanitizer.log"; continue; }
      for tool in memcheck racecheck synccheck; do
        step "sanitizer-$tool.log" compute-sanitizer --tool "$tool" --error-exitcode 1 python3 -m tests.kernels.grouped_mm_small
      done ;;
    bench) step bench-w5.log python3 benchmarks/w5_grouped_gemm.py ;;
    *) echo "unknown step $s"; failed=1 ;;
  esac
done
mkdir -p "$out/results"; cp benchmarks/results/W5.* "$out/results/" 2>/dev/null || true
tar czf "$dest/grouped-gemm.tgz" -C "$out" .
echo "gpu-grouped-gemm: $([ $failed = 0 ] && echo all passed || echo FAILURES)"
exit $failed
