"""The fast kernels (block-tiled matmul, FlashAttention-2-style attention) equal numpy on the simulator.

Sizes are small and divide nothing (ragged tiles everywhere); tile sizes are shrunk so that a
simulated launch stays at a few hundred threads. The oracle is numpy in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

import mlsys_lib  # noqa: F401 - chooses the backend first
from mlsys_lib.kernels import instrument
from mlsys_lib.kernels.attention_fast import attention_flash
from mlsys_lib.kernels.matmul_fast import matmul_block_tiled



def _attention_oracle(Q, K, V, causal):
    """softmax(Q K^T / sqrt(d)) V in float64 per head; causal: key j visible to query i iff j <= i (or i >= m)."""
    Q, K, V = (a.astype(np.float64) for a in (Q, K, V))
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if causal:
        n, m = s.shape[-2:]
        i, j = np.arange(n)[:, None], np.arange(m)[None, :]
        s = np.where((j <= i) | (i >= m), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ V


def test_block_tiled_matmul_equals_numpy_on_ragged_sizes():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((19, 13)).astype(np.float32)  # 3 x 3 blocks of 8 x 8, k in steps of 4: all ragged
    B = rng.standard_normal((13, 21)).astype(np.float32)
    C = matmul_block_tiled(A, B, bm=8, bn=8, bk=4, tm=2, tn=4)
    assert C.shape == (19, 21) and C.dtype == np.float32
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)


def test_block_tiled_matmul_reads_each_input_once_per_tile_row_and_column():
    rng = np.random.default_rng(4)
    M, K, P = 16, 12, 24  # 2 x 3 blocks of 8 x 8
    A, B = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, P)).astype(np.float32)
    plan = matmul_block_tiled.plan(A, B, bm=8, bn=8, bk=4, tm=2, tn=2)
    with instrument() as report:
        plan.run()
    # every block row reads its 8 rows of A for each of the 3 block columns, and B once per block row
    assert report.global_bytes == 4 * (M * K * 3 + K * P * 2 + M * P) == plan.modeled_bytes
    assert plan.compulsory_bytes == 4 * (M * K + K * P + M * P) and plan.flops == 2 * M * K * P
    assert plan.steps[0].block == (16,) and plan.steps[0].grid == (3, 2)
    assert not report.races


def test_block_tiled_matmul_refuses_tiles_that_do_not_divide():
    A = np.ones((4, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="register tile must divide the block tile"):
        matmul_block_tiled.plan(A, A, bm=8, bn=8, tm=3, tn=2)
    with pytest.raises(ValueError, match="1024"):
        matmul_block_tiled.plan(A, A, bm=128, bn=128, tm=2, tn=2)  # 4096 threads
    with pytest.raises(TypeError, match="float32"):
        matmul_block_tiled.plan(A.astype(np.float64), A)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_equals_numpy(dtype, causal):
    rng = np.random.default_rng(5)
    # batch 2 x heads 2, n = 11 queries (tiles of 4: ragged), m = 9 keys (tiles of 3), d = 8, dv = 5
    Q = rng.standard_normal((2, 2, 11, 8)).astype(dtype)
    K = rng.standard_normal((2, 2, 9, 8)).astype(dtype)
    V = rng.standard_normal((2, 2, 9, 5)).astype(dtype)
    O = attention_flash(Q, K, V, causal=causal, block_q=4, block_k=3)
    assert O.shape == (2, 2, 11, 5) and O.dtype == dtype
    np.testing.assert_allclose(O, _attention_oracle(Q, K, V, causal), rtol=2e-5, atol=2e-6)


def test_flash_attention_single_head_and_large_scores():
    rng = np.random.default_rng(6)
    Q = 30 * rng.standard_normal((7, 4)).astype(np.float32)  # scores in the hundreds: exp overflows without the max
    K, V = rng.standard_normal((13, 4)).astype(np.float32), rng.standard_normal((13, 3)).astype(np.float32)
    for causal in (False, True):
        O = attention_flash(Q, K, V, causal=causal, block_q=4, block_k=4)
        assert O.shape == (7, 3) and np.isfinite(O).all()
        np.testing.assert_allclose(O, _attention_oracle(Q, K, V, causal), rtol=1e-4, atol=1e-5)


def test_flash_attention_reads_inputs_once_per_query_tile():
    rng = np.random.default_rng(7)
    heads, n, m, d, dv = 2, 8, 6, 4, 4
    Q, K, V = (rng.standard_normal((heads, r, c)).astype(np.float32) for r, c in ((n, d), (m, d), (m, dv)))
    plan = attention_flash.plan(Q, K, V, block_q=4, block_k=4)
    with instrument() as report:
        plan.run()
    tiles = 2  # n / block_q: each tile reads all m keys of K and V
    assert report.global_bytes == 4 * heads * (n * d + tiles * m * (d + dv) + n * dv) == plan.modeled_bytes
    assert plan.compulsory_bytes == 4 * heads * (n * d + m * (d + dv) + n * dv)
    assert plan.flops == heads * 2 * (d + dv) * n * m
    assert plan.steps[0].grid == (2, heads) and not report.races


def test_flash_attention_checks_its_inputs():
    Q = np.ones((2, 4, 8), dtype=np.float32)
    with pytest.raises(TypeError, match="one dtype"):
        attention_flash.plan(Q, Q.astype(np.float64), Q)
    with pytest.raises(TypeError, match="float32 or float64"):
        attention_flash.plan(Q.astype(np.float16), Q, Q)
    with pytest.raises(ValueError, match="leading"):
        attention_flash.plan(Q, Q[:1], Q[:1])
    with pytest.raises(ValueError, match="shared memory"):
        attention_flash.plan(np.ones((4, 256), np.float32), np.ones((4, 256), np.float32),
                             np.ones((4, 256), np.float32), block_q=128, block_k=32)
