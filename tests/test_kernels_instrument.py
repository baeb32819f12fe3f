"""Instrumented simulation: hand-counted traffic, the lecture's formulas, planted races and bad indices.

The small kernels here are written the way a student would write them in Lab 6, in this file, not
in the library: the instrumentation has to work on any ``@cuda.jit`` kernel.
"""

from __future__ import annotations

import mlsys_lib  # noqa: F401  (first: it picks the simulator before numba.cuda is imported)
import numpy as np
import pytest
from numba import cuda, float32, int32

from mlsys_lib.kernels import (attention_fused, attention_naive, conv1d_naive, conv1d_shared, instrument,
                               matmul_naive, matmul_register_blocked, matmul_tiled)


@cuda.jit
def copy(src, dst):
    i = cuda.grid(1)
    if i < src.shape[0]:
        dst[i] = src[i]


def test_one_block_copy_reads_and_writes_each_element_once():
    src, dst = np.arange(10, dtype=np.float32), np.zeros(10, np.float32)
    with instrument() as report:
        copy[1, 10](src, dst)
    np.testing.assert_array_equal(dst, src)
    (launch,) = report.launches
    assert (launch.kernel, launch.grid, launch.block) == ("copy", (1, 1, 1), (10, 1, 1))
    assert report.global_reads == 10 and report.global_writes == 10
    assert report.shared_reads == report.shared_writes == 0
    np.testing.assert_array_equal(launch.counts["global_reads"], np.ones((1, 10)))
    assert (launch.array("src").reads, launch.array("src").writes) == (10, 0)
    assert (launch.array("dst").reads, launch.array("dst").writes) == (0, 10)
    assert launch.global_bytes == 80 and report.ok


def test_guarded_threads_past_the_end_count_nothing():
    src, dst = np.ones(37, np.float32), np.zeros(37, np.float32)
    with instrument() as report:
        copy[3, 16](src, dst)
    counts = report.launches[0].counts["global_reads"]
    assert counts.shape == (3, 16)
    assert counts.sum() == 37 and counts[2, :5].tolist() == [1] * 5 and counts[2, 5:].sum() == 0
    assert report.launches[0].per_block("global_writes").tolist() == [16, 16, 5]


@pytest.mark.parametrize("n, block", [(8, 4), (6, 4), (5, 2)])
def test_naive_matmul_reads_exactly_2n3(n, block):
    A = np.random.default_rng(n).random((n, n), dtype=np.float32)
    with instrument() as report:
        matmul_naive(A, A, block=block)
    assert report.global_reads == 2 * n ** 3
    assert report.global_writes == n ** 2
    # each thread of an in-range entry reads a row of A and a column of B: 2N
    assert set(np.unique(report.launches[0].counts["global_reads"])) <= {0, 2 * n}


@pytest.mark.parametrize("op, params, t", [(matmul_tiled, {"tile": 4}, 4), (matmul_tiled, {"tile": 2}, 2),
                                           (matmul_register_blocked, {"v": 2, "block": 2}, 2),
                                           (matmul_register_blocked, {"v": 4, "block": 2}, 4)])
def test_tiling_divides_global_reads_by_the_tile(op, params, t):
    n = 8
    A = np.random.default_rng(0).random((n, n), dtype=np.float32)
    with instrument() as report:
        op(A, A, **params)
    assert report.global_reads == 2 * n ** 3 // t


def test_tiled_matmul_per_block_and_per_thread_counts_follow_the_lecture():
    n, L = 8, 4
    A = np.random.default_rng(1).random((n, n), dtype=np.float32)
    with instrument() as report:
        matmul_tiled(A, A, tile=L)
    launch = report.launches[0]
    assert launch.per_block("global_reads").tolist() == [2 * L * n] * (n // L) ** 2  # 2LN per block
    assert (launch.counts["shared_reads"] == 2 * n).all()  # 2N shared reads per thread (V = 1)
    assert (launch.counts["shared_writes"] == 2 * n // L).all()  # one element of each tile per step
    assert launch.array("sA").memory == "shared" and launch.array("sA").reads == n ** 3


def test_tiled_matmul_off_multiple_is_about_2n3_over_l():
    n, L = 10, 4
    A = np.random.default_rng(2).random((n, n), dtype=np.float32)
    with instrument() as report:
        matmul_tiled(A, A, tile=L)
    assert report.global_reads == 2 * n * n * -(-n // L)  # 600: every tile row reads the ragged last tile too
    assert report.global_reads == pytest.approx(2 * n ** 3 / L, rel=0.25)


def test_shared_convolution_reads_each_input_once_per_block_plus_the_halo():
    n, width, block = 70, 5, 16
    rng = np.random.default_rng(3)
    x, w = rng.random(n, dtype=np.float32), rng.random(width, dtype=np.float32)
    with instrument() as report:
        conv1d_shared(x, w, block=block)
        conv1d_naive(x, w, block=block)
    shared, naive = report.launches
    blocks = -(-(n - width + 1) // block)
    per_block = shared.per_block("global_reads") - width  # minus the weights each block loads
    assert per_block.tolist() == [block + width - 1] * (blocks - 1) + [n - (blocks - 1) * block]
    assert shared.array("x").reads == n + (blocks - 1) * (width - 1)
    assert naive.array("x").reads == width * (n - width + 1)
    assert shared.array("support").memory == "shared" and shared.ok


def test_fused_attention_reads_k_and_v_once_per_query_block():
    n, m, d, dv, bq = 20, 13, 4, 3, 8
    rng = np.random.default_rng(5)
    Q, K, V = (rng.random(s, dtype=np.float32) for s in ((n, d), (m, d), (m, dv)))
    with instrument() as report:
        attention_fused(Q, K, V, block_q=bq, block_k=4)
        attention_naive(Q, K, V, block=4)
    fused = report.launches[0]
    assert fused.array("Q").reads == n * d and fused.array("O").writes == n * dv
    assert fused.array("K").reads == -(-n // bq) * m * d and fused.array("V").reads == -(-n // bq) * m * dv
    naive_bytes = sum(launch.global_bytes for launch in report.launches[1:])
    assert [launch.kernel for launch in report.launches[1:]] == ["_scores_kernel", "_softmax_rows_kernel",
                                                                 "matmul_naive_kernel"]
    assert naive_bytes > 5 * fused.global_bytes


# ---- planted bugs ---------------------------------------------------------------------------

def reverse_kernel(sync: bool):
    @cuda.jit
    def reverse(a):
        s = cuda.shared.array(8, float32)
        t = cuda.threadIdx.x
        s[t] = a[t]
        if sync:
            cuda.syncthreads()
        a[t] = s[7 - t]
    return reverse


def test_missing_syncthreads_is_a_race_named_by_kernel_block_thread_and_index():
    a = np.arange(8, dtype=np.float32)
    with instrument() as report:
        reverse_kernel(sync=False)[1, 8](a)
    assert not report.ok and report.launches[0].race_count > 0
    race = report.races[0]
    assert race.kernel == "reverse" and race.block == (0, 0, 0) and race.array == "s"
    assert race.kind in {"read-after-write", "write-after-read"}
    assert race.thread != race.other and race.index in {(race.thread[0],), (7 - race.thread[0],)}
    text = str(race)
    assert "reverse: block (0, 0, 0) thread (" in text and "race on shared s[" in text and "syncthreads" in text
    # every pair (t, 7 - t) conflicts, whatever order the simulator ran the threads in
    assert {r.index[0] for r in report.races} == set(range(8))


def test_syncthreads_removes_the_race():
    a = np.arange(8, dtype=np.float32)
    with instrument() as report:
        reverse_kernel(sync=True)[1, 8](a)
    assert report.ok, report.summary()
    np.testing.assert_array_equal(a, np.arange(8)[::-1])
    assert report.shared_reads == report.shared_writes == 8


@cuda.jit
def tiled_without_second_sync(A, B, C):
    sA = cuda.shared.array((4, 4), float32)
    sB = cuda.shared.array((4, 4), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.blockIdx.y * 4 + ty, cuda.blockIdx.x * 4 + tx
    acc = float32(0.0)
    for k0 in range(0, A.shape[1], 4):
        sA[ty, tx] = A[row, k0 + tx]
        sB[ty, tx] = B[k0 + ty, col]
        cuda.syncthreads()
        for k in range(4):
            acc += sA[ty, k] * sB[k, tx]
        # missing: cuda.syncthreads() before the next tiles overwrite these
    C[row, col] = acc


def test_tiled_matmul_missing_its_second_syncthreads_races_in_2d_blocks():
    A = np.ones((8, 8), np.float32)
    with instrument() as report:
        tiled_without_second_sync[(1, 1), (4, 4)](A, A, np.zeros((4, 4), np.float32))
    assert report.launches[0].race_count > 0
    assert {r.array for r in report.races} <= {"sA", "sB"}
    assert all(len(r.thread) == 3 and r.thread[2] == 0 and r.other[2] == 0 for r in report.races)
    assert all(r.block == (0, 0, 0) and len(r.index) == 2 for r in report.races)


@cuda.jit
def window_sum_unguarded(x, y):
    i = cuda.grid(1)
    y[i] = x[i - 1] + x[i] + x[i + 1]


def test_out_of_bounds_reads_and_writes_are_reported_not_wrapped():
    x, y = np.ones(6, np.float32), np.zeros(6, np.float32)
    with instrument() as report:
        window_sum_unguarded[2, 4](x, y)
    launch = report.launches[0]
    found = {(o.array, o.access, o.index, o.block, o.thread) for o in report.out_of_bounds}
    assert ("x", "read", (-1,), (0, 0, 0), (0, 0, 0)) in found  # x[i - 1] at i = 0: Numba would wrap it
    assert ("x", "read", (6,), (1, 0, 0), (1, 0, 0)) in found   # x[i + 1] at i = 5
    assert ("y", "write", (7,), (1, 0, 0), (3, 0, 0)) in found  # threads past the end
    assert launch.out_of_bounds_count == 9 and not report.ok  # 1 + 1 + 2 + 3 reads, 2 writes
    text = str(next(o for o in report.out_of_bounds if o.index == (-1,)))
    assert text == ("window_sum_unguarded: block (0, 0, 0) thread (0, 0, 0): "
                    "out-of-bounds read of global x[-1], shape (6,)")
    assert np.isnan(y[[0, 5]]).all() and y[1:5].tolist() == [3.0] * 4  # a bad read gives NaN, the rest runs on
    assert launch.total("global_writes") == 6  # the two writes past the end are dropped, not counted


@cuda.jit
def histogram(values, counts):
    local = cuda.shared.array(4, int32)
    t = cuda.threadIdx.x
    if t < 4:
        local[t] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < values.shape[0]:
        cuda.atomic.add(local, values[i], 1)
    cuda.syncthreads()
    if t < 4:
        cuda.atomic.add(counts, t, local[t])


def test_atomics_count_a_read_and_a_write_and_never_race():
    values = np.random.default_rng(6).integers(0, 4, 20).astype(np.int32)
    counts = np.zeros(4, np.int32)
    with instrument() as report:
        histogram[2, 12](values, counts)
    assert report.ok, report.summary()
    np.testing.assert_array_equal(counts, np.bincount(values, minlength=4))
    local = report.launches[0].array("local")
    assert (local.reads, local.writes) == (20 + 8, 20 + 8)  # 20 atomics; 2 blocks x 4 zeroing writes / final reads


@cuda.jit
def reads_unfilled_shared(out):
    s = cuda.shared.array(4, float32)
    t = cuda.threadIdx.x
    if t < 2:
        s[t] = 1.0
    cuda.syncthreads()
    out[t] = s[t]


@cuda.jit
def dynamic_shared_copy(src, dst):
    buf = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    buf[t] = src[t]
    cuda.syncthreads()
    dst[t] = buf[t]


def test_shared_memory_starts_as_nan_and_dynamic_shared_memory_is_traced():
    out = np.zeros(4, np.float32)
    src, dst = np.arange(5, dtype=np.float32), np.zeros(5, np.float32)
    with instrument() as report:
        reads_unfilled_shared[1, 4](out)
        dynamic_shared_copy[1, 5, 0, 5 * 4](src, dst)
    assert out[:2].tolist() == [1.0, 1.0] and np.isnan(out[2:]).all()
    np.testing.assert_array_equal(dst, src)
    assert report.launches[1].array("dynamic shared").reads == 5 and report.ok


def test_instrument_restores_the_simulator_and_does_not_nest():
    src, dst = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ZeroDivisionError):
        with instrument() as report:
            with pytest.raises(RuntimeError, match="do not nest"):
                with instrument():
                    pass
            copy[1, 4](src, dst)
            1 / 0
    assert len(report.launches) == 1
    copy[1, 4](src, dst)  # after the block: plain simulator, not recorded
    assert len(report.launches) == 1
    assert "copy[grid (1, 1, 1), block (4, 1, 1)]: global reads 4" in report.summary()


def test_a_failing_kernel_is_still_recorded():
    @cuda.jit
    def bad(a):
        a[cuda.threadIdx.x] = 1.0
        raise ValueError("student bug")

    with instrument() as report, pytest.raises(ValueError, match="student bug"):
        bad[1, 2](np.ones(2, np.float32))
    assert report.launches[0].kernel == "bad"


@cuda.jit
def row_sums_through_views(A, out):
    i = cuda.grid(1)
    tile = cuda.shared.array((2, 3), float32)
    if i == 0:
        tile[:] = 0.0  # slice assignment: one shared write per element
    cuda.syncthreads()
    if i < A.shape[0]:
        total = float32(0.0)
        for v in A[i]:  # iterating a row view: one global read per element
            total += v
        out[i] = total + tile[0, 0]


def test_views_slices_and_iteration_count_element_by_element():
    A, out = np.arange(12, dtype=np.float32).reshape(4, 3), np.zeros(4, np.float32)
    with instrument() as report:
        row_sums_through_views[1, 4](A, out)
    np.testing.assert_array_equal(out, A.sum(axis=1))
    launch = report.launches[0]
    assert (launch.array("A").reads, launch.array("tile").writes, launch.array("tile").reads) == (12, 6, 4)
    assert report.ok, report.summary()
