"""Roofline bound with compulsory traffic, occupancy and waves of the benchmarks on A100 / H100 / H200.

The arithmetic is checked against closed forms; the new attention's waves at its benchmark size
(n = 4096, d = 64, batch x heads = 32) are proved twice: for the worst register count any compile
could give (255), here, and for the registers of the real cubin (compiled for sm_80 and sm_90 in a
subprocess on Numba's CUDA target; skips without the dev extra's NVVM / nvJitLink wheels).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mlsys_lib  # noqa: F401 - chooses the backend first
from mlsys_lib.kernels.gpu import bound, suite, targets
from mlsys_lib.kernels.gpu.gpus import GPUS

ROOT = Path(__file__).resolve().parents[1]
BOARDS = ("A100", "H100", "H200")
FLASH = "attention flash n=4096 x32"
GEMM = "matmul block-tiled 128x128 4096^3"


def _bench(name):
    return next(b for b in suite.BENCHMARKS if b.name == name)


def test_bound_is_the_slower_of_compute_and_compulsory_traffic():
    # 1 GFLOP on 1 TFLOP/s is 1 ms; 1 GB at 1 TB/s is 1 ms: the larger one is the bound
    assert bound.roofline_seconds(1e9, 0.5e9, 1e12, 1e12) == pytest.approx(1e-3)
    assert bound.roofline_seconds(0, 2e9, 1e12, 1e12) == pytest.approx(2e-3)
    assert bound.percent_of_bound(4e-3, 1e-3) == pytest.approx(25.0)
    with pytest.raises(ValueError, match="positive"):
        bound.percent_of_bound(0.0, 1e-3)
    with pytest.raises(ValueError, match="compulsory_bytes > 0"):
        bound.roofline_seconds(1, 0, 1e12, 1e12)


def test_flash_benchmark_work_and_waves_at_the_worst_register_count():
    plan = _bench(FLASH).build(np.random.default_rng(0))
    n, d, heads = 4096, 64, 32
    assert plan.flops == heads * 4 * n * n * d  # QK^T and PV, 2 FLOPs a multiply-add
    assert plan.compulsory_bytes == heads * 4 * 4 * n * d  # Q, K, V read and O written once
    for board in BOARDS:
        # 255 registers: 128-thread blocks take 4 x 8192 of an SM's 65536: 2 blocks (8 warps) per SM
        report = bound.launch_report(plan, board, registers=255, shared_bytes=4 * 32 * (64 + 64 + 128))
        assert report.blocks == (n // 128) * heads and report.block_threads == 128
        assert report.blocks_per_sm == 2 and report.occupancy == pytest.approx(8 / 64)
        assert report.waves == pytest.approx(1024 / (2 * GPUS[board].sms)) and report.full_waves >= 2
        assert report.compute_bound  # at the FP32 peak: ~ 128 FLOP per compulsory byte, past every ridge
        assert report.bound_seconds == pytest.approx(plan.flops / GPUS[board].fp32_flops)


def test_bandwidth_kernels_are_bounded_by_their_compulsory_bytes():
    from mlsys_lib.kernels import reduce_warp_unrolled, transpose_padded

    plan = transpose_padded.plan(np.zeros((512, 768), dtype=np.float32))
    report = bound.launch_report(plan, "H200", registers=16, shared_bytes=4 * 32 * 33)
    assert report.compulsory_bytes == 2 * 4 * 512 * 768 and not report.compute_bound
    assert report.bound_seconds == pytest.approx(2 * 4 * 512 * 768 / 4.8e12)
    assert report.blocks == 16 * 24 and report.waves == pytest.approx(16 * 24 / (132 * report.blocks_per_sm))
    # the reduction launches three times (2^20 -> 2^11 -> 4 -> 1 sums of 512): the report is its largest launch
    plan = reduce_warp_unrolled.plan(np.zeros(2 ** 20, dtype=np.float32))
    report = bound.launch_report(plan, "A100", registers=16, shared_bytes=4 * 256)
    assert len(plan.steps) == 3 and report.blocks == 2 ** 20 // (2 * 256)
    assert report.compulsory_bytes == 4 * (2 ** 20 + 1)


def test_compiled_cubins_give_at_least_two_full_waves_on_every_board():
    if targets.compiler_missing():
        pytest.skip(f"cannot compile for a GPU target: {targets.compiler_missing()}")
    env = {**os.environ, "MLSYS_DEVICE": "gpu"}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run([sys.executable, "benchmarks/kernels_targets.py", "--only", FLASH, GEMM, "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {(r["kernel"], r["gpu"]): r for r in json.loads(done.stdout)}
    assert set(rows) == {(k, b) for k in (FLASH, GEMM) for b in BOARDS}
    for (kernel, board), r in rows.items():
        assert r["shared_bytes"] == (4 * 32 * (64 + 64 + 128) if kernel == FLASH else 4 * 8 * (128 + 128))
        assert 0 < r["registers"] <= 255 and r["blocks_per_sm"] >= 1
        assert r["waves"] == pytest.approx(r["blocks"] / (r["blocks_per_sm"] * GPUS[board].sms))
        assert r["waves"] >= 2, f"{kernel} on {board}: {r['waves']:.2f} waves"
    # each block-tiled matmul block is 256 threads; launch bounds (256, 2) keep two of them per SM
    assert all(rows[(GEMM, b)]["blocks_per_sm"] == 2 for b in BOARDS)
