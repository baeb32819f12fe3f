#!/usr/bin/env bash
# The GPU lab session on a machine with an NVIDIA GPU, in one go, for the README's table.
#
#     bash benchmarks/gpu_session.sh            # from the repository root or anywhere
#
# 1. `make plots-gpu`: every benchmark of mlsys_lib.kernels.gpu.suite timed with CUDA events, a table row
#    per kernel (time, bandwidth on compulsory bytes, FLOP/s, % of the roofline bound of this device),
#    every claim ("claim holds: ..." / "claim does not hold: ..."), the three *_gpu.png figures;
# 2. the GPU tests (those that skip without a GPU, and the kernels' tests on the real device);
# 3. the occupancy / waves report compiled for sm_80 and sm_90 (benchmarks/kernels_targets.py);
# 4. the table again, with the device, the date and the versions, ready to paste into docs/gpu.md.
# Everything is also written to benchmarks/results/gpu_session_<UTC time>.txt. Without a GPU it stops
# at once and says so (exit 1): nothing here can be measured on the simulator.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "no NVIDIA GPU here (nvidia-smi finds none): this script times kernels on one" >&2
    exit 1
fi
mkdir -p benchmarks/results
stamp=$(date -u +%Y-%m-%dT%H%MZ)
log="benchmarks/results/gpu_session_${stamp}.txt"
status=0
{
    echo "## GPU session, $(date -u '+%Y-%m-%d %H:%M UTC')"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    make plots-gpu || status=1
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu_session.py tests/test_kernels_roofline.py \
        tests/test_kernels_ops.py tests/test_kernels_fast.py tests/test_kernels_bound.py || status=1
    .venv/bin/python benchmarks/kernels_targets.py || status=1
} 2>&1 | tee "$log"
echo
echo "---- for docs/gpu.md (measured on this device; numbers from $log) ----"
.venv/bin/python - "$log" <<'PY'
import sys
import numba
lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, line in enumerate(lines) if "TFLOP/s FP32" in line)  # the table's header: device and peaks
print(lines[0].removeprefix("## ") + f", numba {numba.__version__}")
print("\n".join(line for line in lines[start:] if "% of bound" in line or " ms " in line or "TFLOP/s FP32" in line
                or line.startswith("claim ")))
PY
exit $status
