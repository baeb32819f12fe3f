"""The warp-level lecture's kernels (transpose, reduction, scan, softmax, LayerNorm) against numpy and against
hand-computed warp counts: sectors per request, bank conflicts, divergent requests, shared traffic, bytes moved.

Every expected count is arithmetic on the kernel's access pattern, worked out in the comments (warps
of 32 consecutive threads, 32-byte sectors, 32 banks of 4-byte words), not read off the instrument.
Launches stay at a few hundred simulated threads each. On a GPU backend the values are still checked
(uninstrumented) and the counting tests skip.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlsys_lib.kernels import (instrument, layernorm_rows, reduce_first_add, reduce_interleaved,
                               reduce_interleaved_strided, reduce_sequential, reduce_warp_unrolled, scan_blelloch,
                               scan_hillis_steele, scan_work_depth, softmax_rows, transpose_naive, transpose_padded,
                               transpose_shared)
from mlsys_lib.kernels.gpu.device import current_backend

F32_EPS = float(np.finfo(np.float32).eps)
SIMULATOR = current_backend() == "sim"
counted = pytest.mark.skipif(not SIMULATOR, reason="warp counts need Numba's CUDA simulator (MLSYS_DEVICE=sim)")


def run_checked(op, *args, **kwargs):
    """Run ``op`` instrumented; assert race-free, in bounds, counted global bytes == modeled; (result, report).

    On a GPU: the result of a plain run, and no report.
    """
    plan = op.plan(*args, **kwargs)
    if not SIMULATOR:
        return plan.run(), None
    with instrument() as report:
        out = plan.run()
    assert report.ok, report.summary()
    assert report.global_bytes == plan.modeled_bytes, report.summary()
    return out, report


def f32(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- transpose --------------------------------------------------------------------------------

@pytest.mark.parametrize("op", [transpose_naive, transpose_shared, transpose_padded])
@pytest.mark.parametrize("shape, tile, rows", [((37, 45), 32, 8), ((13, 21), 8, 3), ((1, 5), 4, 4)])
def test_transpose_matches_numpy_on_ragged_sizes(op, shape, tile, rows):
    a = f32(sum(shape), *shape)
    out, _ = run_checked(op, a, tile=tile, rows=rows)
    assert out.shape == shape[::-1]
    np.testing.assert_array_equal(out, a.T)


@counted
@pytest.mark.parametrize("op, store_sectors, tile_conflicts", [
    # naive: lane tx stores out[c0 + tx, r], addresses 4 R = 128 bytes apart: one sector per lane
    (transpose_naive, 32, None),
    # shared: lane tx reads buf[tx, y], word 32 tx + y, every lane in bank y: 32 wavefronts, 31 conflicts
    (transpose_shared, 4, 31),
    # padded: word 33 tx + y is in bank (tx + y) % 32, one lane per bank
    (transpose_padded, 4, 0),
])
def test_transpose_sectors_and_bank_conflicts(op, store_sectors, tile_conflicts):
    R, C = 32, 64  # 2 blocks of 32 x 8 threads (8 warps), each thread 4 rows of its 32 x 32 tile
    requests = 2 * 8 * 4  # per array and direction: 64 warp requests of 32 lanes
    a = f32(0, R, C)
    out, report = run_checked(op, a)
    np.testing.assert_array_equal(out, a.T)
    launch = report.launches[0]
    loads, stores = launch.array("a").loads, launch.array("out").stores
    assert (loads.requests, loads.sectors) == (requests, 4 * requests)  # a row of a: 128 contiguous bytes
    assert (stores.requests, stores.sectors) == (requests, store_sectors * requests)
    assert launch.warps.divergent_requests == 0
    if tile_conflicts is None:
        assert launch.requests("shared", "loads").requests == 0
    else:
        tile = launch.array("buf")
        assert (tile.loads.requests, tile.loads.bank_conflicts) == (requests, tile_conflicts * requests)
        assert tile.stores.bank_conflicts == 0  # buf[y, tx]: a warp writes 32 consecutive words
        assert launch.shared_bytes_per_block == 4 * 32 * (32 + (tile_conflicts == 0))


# ---- reduction --------------------------------------------------------------------------------

REDUCTIONS = [reduce_interleaved, reduce_interleaved_strided, reduce_sequential, reduce_first_add,
              reduce_warp_unrolled]


def assert_sum(out: np.ndarray, x: np.ndarray) -> None:
    """``out`` is x's sum up to float32 rounding: each element passes through at most log2(n) + 2 adds."""
    assert out.shape == () and out.dtype == np.float32
    bound = F32_EPS * np.abs(x).astype(np.float64).sum() * (math.log2(x.size) + 2)
    assert abs(float(out) - x.astype(np.float64).sum()) <= bound


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("n, block", [(333, 64), (1, 64), (129, 128)])
def test_reduction_matches_numpy_on_ragged_sizes(op, n, block):
    x = f32(n, n)
    out, report = run_checked(op, x, block=block)
    assert_sum(out, x)
    assert op.plan(x, block=block).flops == n - 1


# Launch 0 of n = 512 floats in blocks of B = 64 threads (2 warps), counted per block by hand:
# every variant ends with `if tid == 0: partial[b] = buf[0]`: 2 divergent requests (a load and a store).
# * interleaved, `if tid % 2s == 0: buf[tid] += buf[tid + s]` (2 loads + 1 store = 3 requests per active warp):
#   s = 1, 2, 4, 8, 16 leave some lanes of both warps active, s = 32 only lane 0: (5 * 2 + 1) * 3 + 2 = 35;
#   a warp touches only its own 32 words: no conflicts.
# * interleaved_strided, `k = 2 s tid; if k < 64`: s = 1: warp 0 full (not divergent); s = 2 .. 32: warp 0
#   partly: 5 * 3 + 2 = 17. Conflicts: lane l touches word 2 s l + c; s = 1: 32 words on 16 banks, 2 each;
#   s = 2, 4, 8, 16: 16, 8, 4, 2 lanes on 8, 4, 2, 1 banks, 2 words each: 1 extra wavefront per request for
#   s = 1 .. 16, none at s = 32 (1 word): 5 * 3 = 15.
# * sequential, `if tid < s`: s = 32 is warp 0 whole; s = 16 .. 1 divergent: 5 * 3 + 2 = 17; contiguous words.
# * first_add: the same tree over 2B elements per block: 4 blocks instead of 8.
# * warp_unrolled: no tree step left above s = 32 for B = 64; warp 0 runs s = 32 .. 1 with all its lanes: 2.
@counted
@pytest.mark.parametrize("op, blocks, divergent_per_block, conflicts_per_block", [
    (reduce_interleaved, 8, 35, 0),
    (reduce_interleaved_strided, 8, 17, 15),
    (reduce_sequential, 8, 17, 0),
    (reduce_first_add, 4, 17, 0),
    (reduce_warp_unrolled, 4, 2, 0),
])
def test_reduction_divergence_conflicts_and_traffic(op, blocks, divergent_per_block, conflicts_per_block):
    n, block = 512, 64
    x = f32(1, n)
    out, report = run_checked(op, x, block=block)
    assert_sum(out, x)
    first, second = report.launches  # the partial sums, then one block summing them
    assert first.grid == (blocks, 1, 1) and second.grid == (1, 1, 1)
    assert first.warps.divergent_requests == blocks * divergent_per_block
    assert first.bank_conflicts == blocks * conflicts_per_block
    # n floats read once (first add: two per thread, half the threads), one partial sum written per block
    assert (first.total("global_reads"), first.total("global_writes")) == (n, blocks)
    assert first.global_bytes == 4 * (n + blocks)
    assert first.requests("global", "loads").sectors == n * 4 // 32  # coalesced either way


# ---- scan -------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", [scan_hillis_steele, scan_blelloch])
@pytest.mark.parametrize("n, block", [(150, 8), (100, 16), (5, 8), (64, 64)])
def test_scan_matches_cumsum(op, n, block):
    # 150 in blocks of 8: 19 block sums, scanned in 3 blocks, whose 3 sums take one more level
    x = f32(n + block, n)
    out, _ = run_checked(op, x, block=block)
    exact = np.cumsum(x.astype(np.float64))
    bound = F32_EPS * np.cumsum(np.abs(x).astype(np.float64)) * (2 * math.log2(n) + 4)
    assert out.shape == (n,) and out.dtype == np.float32
    assert np.all(np.abs(out - exact) <= bound)


def test_scan_work_and_depth_closed_forms():
    # Hillis-Steele on 8: steps add 7, 6, 4 (every thread with tid >= 1, 2, 4): 17 = 8 * 3 - 7 adds in 3 steps
    assert scan_work_depth(8, "hillis_steele") == (17, 3)
    # Blelloch on 8: up-sweep 4 + 2 + 1, down-sweep 1 + 2 + 4 adds, 3 levels each way
    assert scan_work_depth(8, "blelloch") == (14, 6)
    assert scan_work_depth(1, "blelloch") == (0, 0)
    with pytest.raises(ValueError, match="n must be a power of two, got 6"):
        scan_work_depth(6, "blelloch")
    with pytest.raises(ValueError, match="unknown scan algorithm 'kogge'"):
        scan_work_depth(8, "kogge")


@counted
def test_scan_shared_traffic_counts_work_and_depth():
    B = 64  # one block, 2 warps
    x = f32(2, B)
    _, report = run_checked(scan_hillis_steele, x, block=B)
    work, depth = scan_work_depth(B, "hillis_steele")
    assert (work, depth) == (64 * 6 - 63, 6)
    buf = report.launches[0].array("buf")
    # the running value lives in a register: one shared read per add; every thread writes once per step
    assert buf.reads == work and buf.writes == B * (1 + depth)
    assert buf.stores.requests == 2 * (1 + depth)  # both warps store in every step: the step count, counted
    assert buf.loads.bank_conflicts == 0

    _, report = run_checked(scan_blelloch, x, block=B)
    work, depth = scan_work_depth(B, "blelloch")
    assert (work, depth) == (2 * 63, 12)
    buf = report.launches[0].array("buf")
    # up-sweep: 2 reads, 1 write per add; down-sweep: 2 reads, 2 writes per add; the root read and cleared;
    # the shift: B - 1 reads; the load: B writes
    assert buf.reads == 2 * work + 1 + (B - 1)
    assert buf.writes == B + work // 2 + 1 + 2 * (work // 2)


# ---- softmax and LayerNorm ---------------------------------------------------------------------

def softmax_reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_softmax_rows_stable_for_large_and_minus_inf_entries():
    x = 30 * f32(3, 5, 37)  # 37: the last of a thread's two columns is taken by 5 lanes only
    x[1, [3, 20]] = -np.inf  # masked entries: probability 0
    x[2] += 1000.0  # exp(1000) overflows float32 unless the max is subtracted first
    out, _ = run_checked(softmax_rows, x, block=32)
    np.testing.assert_allclose(out, softmax_reference(x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    assert out[1, 3] == 0.0 and out[1, 20] == 0.0


def test_layernorm_rows_matches_numpy():
    x = 3 * f32(4, 3, 50) + 7
    out, _ = run_checked(layernorm_rows, x, eps=1e-3, block=32)
    x64 = x.astype(np.float64)
    expected = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@counted
@pytest.mark.parametrize("op", [softmax_rows, layernorm_rows])
def test_norms_read_and_write_each_row_once_coalesced(op):
    rows, d, block = 4, 64, 32
    out, report = run_checked(op, f32(5, rows, d), block=block)
    launch = report.launches[0]
    assert launch.global_bytes == 8 * rows * d  # modeled_bytes was checked equal to this in run_checked
    # each row: 2 warp requests of 32 consecutive floats (128 bytes, 4 sectors), read and written
    for array, op_name in (("x", "loads"), ("y", "stores")):
        requests = getattr(launch.array(array), op_name)
        assert (requests.requests, requests.sectors) == (rows * d // 32, rows * d // 32 * 4)
    assert launch.bank_conflicts == 0
    assert launch.shared_bytes_per_block == 4 * (d + block)


# ---- input checks ----------------------------------------------------------------------------

ONES = np.ones(8, np.float32)


@counted
@pytest.mark.parametrize("call, error, message", [
    (lambda: transpose_shared(np.ones((4, 4), np.float32), tile=4, rows=8), ValueError, "rows must be at most tile"),
    (lambda: transpose_padded(np.ones((4, 4), np.float32), tile=64, rows=32), ValueError, "2048 threads per block"),
    (lambda: transpose_naive(ONES), ValueError, r"a must have 2 dimension\(s\)"),
    (lambda: reduce_sequential(ONES, block=48), ValueError, "power of two from 64 to 1024"),
    (lambda: reduce_first_add(ONES, block=32), ValueError, "power of two from 64 to 1024"),
    (lambda: reduce_interleaved(ONES.astype(np.float64)), TypeError, "x must have dtype float32"),
    (lambda: scan_blelloch(ONES, block=12), ValueError, "block must be a power of two, got 12"),
    (lambda: scan_hillis_steele(ONES, block=2048), ValueError, "at most 1024"),
    (lambda: softmax_rows(np.ones((2, 4), np.float32), block=16), ValueError, "power of two from 32 to 1024"),
    (lambda: softmax_rows(np.ones((1, 20000), np.float32)), ValueError, "80512 bytes of shared memory"),
    (lambda: layernorm_rows(np.ones((2, 4), np.float32), eps=0.0), ValueError, "eps must be a positive finite"),
])
def test_bad_inputs_fail_before_any_launch(call, error, message):
    with instrument() as report, pytest.raises(error, match=message):
        call()
    assert report.launches == []
