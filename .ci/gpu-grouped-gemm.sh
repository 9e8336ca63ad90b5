#!/usr/bin/env bash
# The grouped GEMM on a GPU machine (after `python -m pip install -e ".[test]"`, or in an environment
# where those packages are already installed):
#   tests      python3 -m pytest -v -rs tests/test_grouped_mm.py tests/test_grouped_mm_cases.py tests/test_grouped_mm_host.py
#              tests/test_tutorials.py -k "grouped or 03 or offs or cases"
#   tutorial   python3 tutorials/03_grouped_gemm.py
#   sanitizer  compute-sanitizer --tool memcheck|racecheck|synccheck python3 -m tests.kernels.grouped_mm_small
#              (device errors only: --report-api-errors no, as the DSL probes driver entry points)
#   mutations  python3 -m tests.grouped_mm_mutations   (seeded kernel bugs; each must be caught)
#   bench      python3 benchmarks/w5_grouped_gemm.py   (set GCDSL_UPSTREAM_EXAMPLES to
#              <cutlass>/examples/python/CuTeDSL for the upstream column)
#   layer      python3 benchmarks/w6_moe_layer.py      (quack-kernels installed for its column)
#   training   python3 benchmarks/w7_training.py       (likewise)
# Arguments pick some of them (default: all), e.g. `bash .ci/gpu-grouped-gemm.sh tests bench`.
# Logs and benchmarks/results/W5.*, W6.* and W7.* are packed into grouped-gemm.tgz in $OUT (or ./gpu-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
dest="${OUT:-gpu-logs}"; mkdir -p "$dest"
out="$(mktemp -d)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
failed=0
step() { local log="$1"; shift; echo "== $*" | tee -a "$out/$log"; "$@" 2>&1 | tee -a "$out/$log"; [ "${PIPESTATUS[0]}" = 0 ] || { echo "FAILED: $*"; failed=1; }; }
steps="${*:-tests tutorial sanitizer mutations bench layer training}"
for s in $steps; do
  case "$s" in
    tests) step pytest.log python3 -m pytest -v -rs tests/test_grouped_mm.py tests/test_grouped_mm_cases.py \
             tests/test_grouped_mm_host.py tests/test_tutorials.py -k "grouped or 03 or offs or cases" ;;
    tutorial) step tutorial.log python3 tutorials/03_grouped_gemm.py ;;
    sanitizer)
      command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not on PATH: skipped" | tee "$out/sanitizer.log"; continue; }
      for tool in memcheck racecheck synccheck; do
        step "sanitizer-$tool.log" compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 1 \
          python3 -m tests.kernels.grouped_mm_small
      done ;;
    mutations) step mutations.log python3 -m tests.grouped_mm_mutations --jobs 6 ;;
    bench) step bench-w5.log python3 benchmarks/w5_grouped_gemm.py ;;
    layer) step bench-w6.log python3 benchmarks/w6_moe_layer.py ;;
    training) step bench-w7.log python3 benchmarks/w7_training.py ;;
    *) echo "unknown step $s"; failed=1 ;;
  esac
done
mkdir -p "$out/results"; cp benchmarks/results/W5.* benchmarks/results/W6.* benchmarks/results/W7.* "$out/results/" 2>/dev/null || true
tar czf "$dest/grouped-gemm.tgz" -C "$out" .
echo "gpu-grouped-gemm: $([ $failed = 0 ] && echo all passed || echo FAILURES)"
exit $failed
