"""Run a simulated thread block with a barrier instead of Numba's polling loop.

Numba's CUDA simulator runs each thread of a block as a Python thread. Its ``BlockManager.run``
then *polls*: in a loop that never sleeps it asks every live thread whether it is blocked in
``cuda.syncthreads()`` or has died, and releases the barrier once all live threads are blocked.
That loop competes for the interpreter lock with the very threads it waits for, so blocks of 256
threads spend much of their time polling. With this module ``benchmarks/simulator.py`` (the course's
sequential reduction, 256-thread blocks) runs about twice as fast, and Lab 12's wrong-answer fixtures, whose
tests launch such blocks, about three times.

:func:`install` replaces three methods of the simulator (only under the simulator backend):

* ``BlockThread.syncthreads``: arrive at the block's barrier; the last live thread to arrive opens
  it for all (a *generation* counter, so that a thread that runs ahead to the next barrier waits
  there);
* ``BlockThread.run``: a thread that ends (returns or raises) leaves the block, which opens the
  barrier if every thread still live waits at it, as in the simulator (and on a GPU, where exited
  threads no longer count at ``__syncthreads``);
* ``BlockManager.run``: start the threads and *wait* for them to end or for one to raise; a raised
  exception aborts the others (those at a barrier raise "abort flag set") and is re-raised, as by
  the simulator, with the thread's ``tid=[x, y, z] ctaid=[...]`` prefix.

What a kernel computes, the order in which threads may interleave between barriers and what
``instrument()`` records are unchanged: it wraps ``syncthreads`` on top of this one.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..gpu.device import current_backend


class _Barrier:
    """The threads of one block: how many are live, how many wait at the barrier, which one raised."""

    def __init__(self, threads: int):
        self.condition = threading.Condition()
        self.live = threads
        self.waiting = 0
        self.generation = 0  # barriers opened so far
        self.failed: Any = None  # the first thread that raised

    def open_if_all_wait(self) -> None:
        """(Holding the condition.) Open the barrier when every live thread waits at it."""
        if self.waiting and self.waiting == self.live:
            self.waiting = 0
            self.generation += 1
            self.condition.notify_all()


def _syncthreads(thread: Any) -> None:
    if thread.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    barrier = thread._manager.mlsys_barrier
    with barrier.condition:
        generation = barrier.generation
        barrier.waiting += 1
        barrier.open_if_all_wait()
        while barrier.generation == generation and not thread.abort:
            barrier.condition.wait()
    if thread.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


def _thread_run(run: Any) -> Any:
    def run_then_leave(thread: Any) -> None:
        try:
            run(thread)  # the simulator's: keeps what the kernel raised in thread.exception
        finally:
            barrier = thread._manager.mlsys_barrier
            with barrier.condition:
                barrier.live -= 1
                if thread.exception and barrier.failed is None:
                    barrier.failed = thread
                barrier.open_if_all_wait()
                barrier.condition.notify_all()  # the manager waits for the last thread or the first error

    return run_then_leave


def _manager_run(block_thread: type) -> Any:
    def run(manager: Any, grid_point: tuple, *args: Any) -> None:
        points = list(np.ndindex(*manager._block_dim))
        barrier = manager.mlsys_barrier = _Barrier(len(points))
        threads = [block_thread(lambda: manager._f(*args), manager, grid_point, point, manager._debug)
                   for point in points]
        for thread in threads:
            thread.start()
        with barrier.condition:
            while barrier.live and barrier.failed is None:
                barrier.condition.wait()
            failed = barrier.failed
            if failed is not None:
                for thread in threads:
                    thread.abort = True
                barrier.condition.notify_all()
        if failed is not None:
            error, traceback = failed.exception
            raise error.with_traceback(traceback)

    return run


def install() -> None:
    """Make the simulator run blocks with :class:`_Barrier` (once; nothing on the GPU backend)."""
    if current_backend() != "sim":
        return
    from numba.cuda.simulator import kernel

    if getattr(kernel.BlockManager.run, "mlsys_barrier", False):
        return
    kernel.BlockThread.syncthreads = _syncthreads
    kernel.BlockThread.run = _thread_run(kernel.BlockThread.run)
    kernel.BlockManager.run = _manager_run(kernel.BlockThread)
    kernel.BlockManager.run.mlsys_barrier = True
