"""Every CUDA kernel compiles and links for sm_80 and sm_90 without a GPU; launches a target cannot run are refused.

The compile runs in a subprocess on Numba's real CUDA target (``MLSYS_DEVICE=gpu``; this process
may be on the simulator) and needs the ``nvidia-nvvm``, ``nvidia-cuda-nvrtc`` and ``nvidia-nvjitlink`` wheels of the dev
extra: without them those tests skip, naming what is missing. The limits themselves are checked
here with explicit register counts, on any machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlsys_lib.kernels import attention, attention_fused, checks
from mlsys_lib.kernels.gpu import targets

ROOT = Path(__file__).resolve().parents[1]
_TARGETS = ("sm_80", "sm_90")


def _qkv(n, m, d, dv):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((m, d)).astype(np.float32),
            rng.standard_normal((m, dv)).astype(np.float32))


def _run_on_cuda_target(args: list[str]) -> subprocess.CompletedProcess:
    missing = targets.compiler_missing()
    if missing:
        pytest.skip(f"cannot compile for a GPU target: {missing}")
    env = {**os.environ, "MLSYS_DEVICE": "gpu"}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_register_file_limit():
    checks.block_registers("k", 1024, 64)  # exactly 64K registers: fits
    checks.block_registers("k", 1, 255)
    with pytest.raises(ValueError, match=r"1024 threads x 65 registers = 66560 .* at most 1008 threads"):
        checks.block_registers("k", 1024, 65)
    with pytest.raises(ValueError, match="registers_per_thread must be at least 1"):
        checks.block_registers("k", 32, 0)


def test_largest_block_the_registers_allow():
    def largest(registers):
        return targets.KernelResources("k", "sm_80", registers, 0, 0, 0).max_threads()

    assert largest(32) == 1024 and largest(64) == 1024
    assert largest(96) == 672    # 65536 // 96 = 682 threads, rounded down to whole warps
    assert largest(255) == 256   # 65536 // 255 = 257


def test_fused_attention_factory_refuses_96_kib_of_shared_memory():
    # 4 bytes * (64 * 128 + 64 * (128 + 128)) = 98304 bytes: twice what a block may declare
    with pytest.raises(ValueError, match="98304 bytes of shared memory per block; at most 49152"):
        attention._attention_fused_kernel(64, 64, 128, 128)
    with pytest.raises(ValueError, match="98304 bytes"):
        attention_fused.plan(*_qkv(8, 8, 128, 128), block_q=64, block_k=64)
    attention._attention_fused_kernel(32, 32, 128, 128)  # 48 KiB exactly: allowed


def test_check_plan_with_explicit_registers():
    big = attention_fused.plan(*_qkv(8, 8, 8, 8), block_q=1024)  # 33 KiB of shared memory: allowed
    with pytest.raises(ValueError, match=r"attention_fused on sm_90: 1024 threads x 96 registers .* at most 682"):
        targets.check_plan(big, "sm_90", registers=96)
    assert targets.check_plan(attention_fused.plan(*_qkv(8, 8, 8, 8), block_q=672), "sm_90", registers=96) is None
    with pytest.raises(ValueError, match="unknown GPU target 'sm_70'; known: sm_80, sm_90"):
        targets.check_plan(big, "sm_70", registers=96)


def test_compile_needs_the_cuda_target():
    if targets.current_backend() != "sim":
        pytest.skip("this process runs on Numba's CUDA target")
    with pytest.raises(RuntimeError, match="MLSYS_DEVICE=gpu"):
        targets.compile_ptx(attention._softmax_rows_kernel, (), targets.target("sm_80"))


#: Every kernel of mlsys_lib.kernels, as benchmarks/kernels_compile.py names them (listed here by hand: a kernel
#: added to the library and not to the benchmark is missing from the table, and this list says so).
LIBRARY_KERNELS = [
    "elementwise_map(v * v)", "conv1d_naive", "conv1d_shared(block=128, width=3)", "matmul_naive",
    "matmul_tiled(tile=16)", "matmul_register_blocked(v=4)", "matmul_register_blocked(v=8)",
    "attention_naive: scores", "attention_naive: softmax rows", "attention_fused(16, 16, d=64, dv=64)",
    "matmul_block_tiled(128, 128, 8, 8, 8)", "attention_flash(128, 32, d=64, dv=64)",
    "transpose_naive(32, 8)", "transpose_shared(32, 8)", "transpose_padded(32, 8)",
    *[f"reduce_{name}(256)" for name in ("interleaved", "strided", "sequential", "first_add", "warp_unrolled")],
    "scan_hillis_steele(256)", "scan_blelloch(256)", "scan: add block offsets",
    "softmax_rows(128, d=1024)", "layernorm_rows(128, d=1024)",
]


@pytest.mark.slow  # about 15 s: 60 kernel x target compiles
def test_every_kernel_links_for_sm80_and_sm90():
    done = _run_on_cuda_target(["benchmarks/kernels_compile.py", "--json"])
    assert done.returncode == 0, done.stderr
    rows = [targets.KernelResources(**r) for r in json.loads(done.stdout)]
    print("\n" + targets.format_table(rows))
    library = set(LIBRARY_KERNELS)
    lab = {r.kernel for r in rows} - library
    assert len(lab) == 5 and all(name.startswith("lab06 ") for name in lab), lab
    assert sorted((r.kernel, r.target) for r in rows) == sorted((k, t) for k in library | lab for t in _TARGETS)
    shared = {  # the kernels' cuda.shared.array sizes, 4 bytes a float
        "conv1d_shared(block=128, width=3)": 4 * (128 + 2 * 3 - 1),
        "matmul_tiled(tile=16)": 4 * 2 * 16 * 16,
        "attention_fused(16, 16, d=64, dv=64)": 4 * (16 * 64 + 16 * (64 + 64)),
        "matmul_block_tiled(128, 128, 8, 8, 8)": 4 * 8 * (128 + 128),
        "attention_flash(128, 32, d=64, dv=64)": 4 * 32 * (64 + 64 + 128),  # K and V tiles, the scores
        "transpose_shared(32, 8)": 4 * 32 * 32,
        "transpose_padded(32, 8)": 4 * 32 * 33,
        **{f"reduce_{name}(256)": 4 * 256 for name in ("interleaved", "strided", "sequential", "first_add",
                                                        "warp_unrolled")},
        "scan_hillis_steele(256)": 4 * 2 * 256,  # double-buffered
        "scan_blelloch(256)": 4 * 256,
        "softmax_rows(128, d=1024)": 4 * (1024 + 128),  # the row, and the block's partial results
        "layernorm_rows(128, d=1024)": 4 * (1024 + 128),
        "lab06 conv1d_shared(16, 3)": 4 * (16 + 2 * 3 - 1),
        "lab06 matmul_tiled(16)": 4 * 2 * 16 * 16,
        "lab06 attention_fused(16, 16, 64, 64)": 4 * (16 * 64 + 16 * (64 + 64)),
    }
    for r in rows:
        assert 0 < r.registers <= 255, r
        assert r.shared_bytes == shared.get(r.kernel, 0), r
        assert r.f64_ops == 0, f"{r.kernel} computes in float64 on {r.target}: {r.f64_ops} PTX instructions"


def test_check_plan_with_the_compile_table():
    # each thread of the register-blocked matmul keeps a v x v block of C: v = 8 needs over 64 registers
    code = """
import numpy as np
import mlsys_lib
from mlsys_lib.kernels import matmul_register_blocked
from mlsys_lib.kernels.gpu import targets
A = np.ones((40, 24), dtype=np.float32)
ok = targets.check_plan(matmul_register_blocked.plan(A, A.T.copy(), v=8, block=16), "sm_80")
print(ok[0].registers, ok[0].shared_bytes)
try:
    targets.check_plan(matmul_register_blocked.plan(A, A.T.copy(), v=8, block=32), "sm_80")
except ValueError as e:
    print(e)
"""
    done = _run_on_cuda_target(["-c", code])
    assert done.returncode == 0, done.stderr
    first, refusal = done.stdout.splitlines()
    registers, shared = map(int, first.split())
    assert shared == 0 and 65536 // 1024 < registers <= 65536 // 256
    assert refusal.startswith(f"matmul_register_blocked on sm_80 ({registers} registers per thread): "
                              f"1024 threads x {registers} registers = {1024 * registers} registers per block"), refusal
