"""The simulator's blocks on a barrier (mlsys_lib.kernels.sim.blocks): same results and errors as Numba's own runner."""

import numpy as np
import pytest

import mlsys_lib  # noqa: F401 - chooses the backend
from mlsys_lib.kernels import device_info

pytestmark = pytest.mark.skipif(device_info()["backend"] != "sim", reason="the simulator's block runner")

from numba import cuda, float32  # noqa: E402
from numba.cuda.simulator import kernel as simulator  # noqa: E402

import mlsys_lib.kernels.plan  # noqa: E402,F401 - importing a kernel module installs the runner


def test_importing_the_kernels_installs_the_barrier_runner():
    assert getattr(simulator.BlockManager.run, "mlsys_barrier", False)
    from mlsys_lib.kernels.sim import blocks
    run = simulator.BlockManager.run
    blocks.install()  # twice: nothing changes
    assert simulator.BlockManager.run is run


@cuda.jit
def _prefix_sums(x, out):
    """Hillis-Steele inclusive scan of one block's 64 elements: a barrier before and after every step."""
    buffer = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    buffer[t] = x[t]
    cuda.syncthreads()
    step = 1
    while step < 64:
        value = buffer[t - step] if t >= step else float32(0.0)
        cuda.syncthreads()
        buffer[t] += value
        cuda.syncthreads()
        step *= 2
    out[t] = buffer[t]


def test_barriers_order_every_step_of_a_scan():
    x = np.random.default_rng(0).integers(-50, 50, 64).astype(np.float32)
    out = np.zeros(64, dtype=np.float32)
    _prefix_sums[1, 64](x, out)
    assert np.array_equal(out, np.cumsum(x))  # small integers: exact in float32


@cuda.jit
def _early_exit_then_sum(x, out):
    """Threads past n return before the barrier: the live ones must still pass it."""
    buffer = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    if t >= x.shape[0]:
        return
    buffer[t] = x[t]
    cuda.syncthreads()
    if t == 0:
        total = float32(0.0)
        for i in range(x.shape[0]):
            total += buffer[i]
        out[0] = total


def test_threads_that_returned_do_not_hold_the_barrier():
    x = np.arange(1, 20, dtype=np.float32)
    out = np.zeros(1, dtype=np.float32)
    _early_exit_then_sum[1, 32](x, out)
    assert out[0] == x.sum()


@cuda.jit
def _one_thread_fails(x):
    t = cuda.threadIdx.x
    if t == 5 and cuda.blockIdx.x == 1:  # block 0 runs to the end first
        x[10 ** 6] = 1.0
    cuda.syncthreads()
    x[t] = 2.0


def test_an_error_in_one_thread_is_raised_with_its_thread_and_block_and_nothing_hangs():
    with pytest.raises(IndexError, match=r"tid=\[5, 0, 0\] ctaid=\[1, 0, 0\]"):
        _one_thread_fails[(2,), (16,)](np.zeros(16, dtype=np.float32))
    x = np.zeros(16, dtype=np.float32)
    _early_exit_then_sum[1, 32](np.ones(4, dtype=np.float32), x)  # the next launch runs normally
    assert x[0] == 4.0


@cuda.jit
def _two_dimensional_blocks(out):
    buffer = cuda.shared.array((4, 8), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    buffer[ty, tx] = ty * 8 + tx
    cuda.syncthreads()
    out[cuda.blockIdx.x, ty, tx] = buffer[3 - ty, 7 - tx]  # another thread's element: needs the barrier


def test_two_dimensional_blocks_in_a_grid():
    out = np.zeros((3, 4, 8), dtype=np.float32)
    _two_dimensional_blocks[3, (8, 4)](out)
    expected = np.arange(32, dtype=np.float32).reshape(4, 8)[::-1, ::-1]
    assert np.array_equal(out, np.broadcast_to(expected, (3, 4, 8)))
