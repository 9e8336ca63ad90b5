#!/usr/bin/env bash
# The GPU tier, run on a GPU host after `source .gpu/b/install.sh` (see ../shared/gpu-host):
# every test (GPU ones included, the GEMM under @gcdsl.kernel) and tutorial 01.
# Logs go to $OUT (or ./gpu-logs).
set -uo pipefail
out="${OUT:-gpu-logs}"; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
export GCDSL_TEST_DECORATOR=gcdsl
python3 -m pytest -v -rs tests 2>&1 | tee "$out/pytest.log"; rc=${PIPESTATUS[0]}
python3 tutorials/01_batch_copy.py --tensors 3 --rows 256 --cols 128 2>&1 | tee "$out/tutorial01.log"
python3 tutorials/01_batch_copy.py --tensors 16 2>&1 | tee -a "$out/tutorial01.log"; rc2=${PIPESTATUS[0]}
python3 tutorials/01_batch_copy.py --tensors 64 --rows 2048 2>&1 | tee -a "$out/tutorial01.log"; rc3=${PIPESTATUS[0]}
python3 tutorials/02_megakernel.py --tensors 32 2>&1 | tee "$out/tutorial02.log"; rc4=${PIPESTATUS[0]}
python3 tutorials/02_megakernel.py --tensors 48 --seed 1 2>&1 | tee -a "$out/tutorial02.log"; rc5=${PIPESTATUS[0]}
echo "pytest rc=$rc tutorial01 rc=$rc2/$rc3 tutorial02 rc=$rc4/$rc5"
exit $(( rc || rc2 || rc3 || rc4 || rc5 ))
