"""Instrumented simulation: count every thread's memory traffic, find shared-memory races and bad indices.

    with instrument() as report:
        matmul_tiled(A, B, tile=4)            # or any student's @cuda.jit kernel, launched as usual
    report.global_reads                       # 2 N^3 / 4 for N x N inputs, N a multiple of 4
    report.launches[0].counts["shared_reads"] # int64 (n_blocks, threads_per_block)
    report.global_load_sectors, report.bank_conflicts   # per warp request, as Nsight Compute counts them
    assert report.ok, report.summary()        # no races, no out-of-bounds accesses

While the block is active, four pieces of Numba's CUDA simulator are wrapped (and restored after):

* a kernel launch passes its array arguments as :class:`~mlsys_lib.kernels.sim.traced.TracedArray`
  (global memory) and records the launch;
* ``cuda.shared.array`` returns a traced array, fresh for each block (floats start as NaN, so a
  read of a slot nobody filled shows in the result);
* ``cuda.syncthreads`` (and its ``_count``/``_and``/``_or`` forms) advances the calling thread's
  epoch, which is what makes two accesses ordered or not for race detection;
* ``cuda.atomic.*`` on a traced array counts one read and one write and is never a race.

The simulator starts one Python thread per thread of a block; during an instrumented launch they get
1 MiB stacks (:data:`THREAD_STACK_BYTES`), so that full 32 x 32 blocks fit a 4 GiB address space.

On the GPU backend none of this runs in the caller's process: each launch inside the block is replayed,
with these patches, in a simulator worker process (:mod:`mlsys_lib.kernels.sim.replay`), and its record
and results come back; launches outside the block run on the GPU. Only element accesses of arrays
are counted: local arrays (``cuda.local.array``) are registers and not counted.
"""

from __future__ import annotations

import inspect
import sys
import threading
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator
from unittest import mock

import numpy as np

from ..gpu.device import current_backend
from . import blocks
from .report import Report
from .traced import Recorder, TracedArray, declared_name

_recorder: Recorder | None = None  # the launch being recorded (the simulator runs one launch at a time)
_active = False
#: Stack size of the simulator's threads during an instrumented launch [bytes]: a 1024-thread block then
#: reserves 1 GiB of address space instead of 8 GiB at Linux's default 8 MiB (the grader allows 4 GiB).
THREAD_STACK_BYTES = 1 << 20


@contextmanager
def instrument(limit: int = 100) -> Iterator[Report]:
    """Record every simulated launch inside the ``with`` block into the :class:`Report` it yields.

    ``limit`` caps the races and out-of-bounds accesses kept per launch (all are counted).
    On the GPU backend the launches are replayed on the simulator in a worker process
    (:mod:`mlsys_lib.kernels.sim.replay`), with the same report. RuntimeError if a block is already active.
    """
    global _active
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, got {type(limit).__name__}")
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if _active:
        raise RuntimeError("instrument() is already active; instrumented blocks do not nest")
    report = Report()
    if current_backend() == "sim":
        recording = _simulator_patches(report, limit)
    else:
        from .replay import replay_launches

        recording = replay_launches(report, limit)
    with recording:
        _active = True
        try:
            yield report
        finally:
            _active = False


def _simulator_patches(report: Report, limit: int) -> ExitStack:
    """Wrap the simulator's launch, shared arrays, syncthreads and atomics until the returned stack closes."""
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi

    blocks.install()  # a student's kernel may be the first launched: its blocks wait on a barrier too
    with ExitStack() as patches:  # closed here only if a patch fails
        launch = sim_kernel.FakeCUDAKernel.__call__
        patches.enter_context(mock.patch.object(sim_kernel.FakeCUDAKernel, "__call__",
                                                _traced_launch(launch, report, limit)))
        patches.enter_context(mock.patch.object(kernelapi.FakeCUDAShared, "array",
                                                _traced_shared(kernelapi.FakeCUDAShared.array)))
        patches.enter_context(mock.patch.object(sim_kernel.BlockThread, "syncthreads",
                                                _counted_sync(sim_kernel.BlockThread.syncthreads)))
        for name, operation in vars(kernelapi.FakeCUDAAtomic).items():
            if not name.startswith("_") and callable(operation):
                patches.enter_context(mock.patch.object(kernelapi.FakeCUDAAtomic, name, _traced_atomic(operation)))
        return patches.pop_all()


def _traced_launch(launch: Any, report: Report, limit: int) -> Any:
    """Wrap ``FakeCUDAKernel.__call__``: top-level launches get traced arguments and a recorder."""
    from numba.cuda.errors import normalize_kernel_dimensions
    from numba.cuda.simulator.kernel import _get_kernel_context

    def traced_launch(kernel: Any, *args: Any) -> Any:
        global _recorder
        if kernel._device or _get_kernel_context() is not None:  # a device function called from a kernel
            return launch(kernel, *args)
        grid, block = normalize_kernel_dimensions(kernel.grid_dim, kernel.block_dim)
        recorder = Recorder(kernel.__name__, grid, block, limit, kernel.py_func.__code__)
        names = list(inspect.signature(kernel.py_func).parameters)
        names += [f"arg{i}" for i in range(len(names), len(args))]
        _recorder = recorder
        stack = threading.stack_size(THREAD_STACK_BYTES)
        try:
            return launch(kernel, *(recorder.argument(name, arg) for name, arg in zip(names, args)))
        finally:
            threading.stack_size(stack)
            _recorder = None
            report.launches.append(recorder.finish())

    return traced_launch


def _traced_shared(allocate: Any) -> Any:
    """Wrap ``FakeCUDAShared.array``: one traced buffer per declaration site and block."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    def traced_shared(shared: Any, shape: Any, dtype: Any, alignment: Any = None) -> TracedArray:
        caller = sys._getframe(1)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        dtype = np.dtype(dtype)
        if shape == 0:  # dynamic shared memory: one buffer for the whole launch, as in the simulator
            return _recorder.shared_array(("dynamic", dtype), "dynamic shared",
                                          lambda: allocate(shared, 0, dtype, alignment))
        fill = np.nan if dtype.kind in "fc" else 0
        site = (caller.f_code.co_filename, caller.f_lineno)
        return _recorder.shared_array(site, declared_name(*site), lambda: np.full(shape, fill, dtype=dtype))

    return traced_shared


def _counted_sync(sync: Any) -> Any:
    """Wrap ``BlockThread.syncthreads``: each barrier starts a new epoch of the calling thread."""

    def counted_sync(thread: Any) -> None:
        probe = getattr(thread, "_mlsys_probe", None) or _recorder.register(thread)
        probe.barrier()
        sync(thread)

    return counted_sync


def _traced_atomic(operation: Any) -> Any:
    """Wrap one ``FakeCUDAAtomic`` method so that atomics on traced arrays are counted, not flagged."""

    def traced_atomic(atomics: Any, array: Any, *args: Any) -> Any:
        if not isinstance(array, TracedArray):
            return operation(atomics, array, *args)
        index = (0,) * array.ndim if operation.__name__ == "compare_and_swap" else args[0]
        return array.atomic(lambda data, *rest: operation(atomics, data, *rest), index, args)

    return traced_atomic
