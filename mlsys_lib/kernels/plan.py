"""Kernel plans: what a host wrapper decided to launch, separated from launching it.

A host wrapper such as ``matmul_tiled(A, B, tile=16)`` does three things: check its inputs, choose
the launch (grid, block, arguments, output), and run it. The first two make a :class:`KernelPlan`;
running it is ``plan.run()``. Keeping the plan as a value lets the same launch be run, counted
under the simulator (:mod:`mlsys_lib.kernels.sim.instrumentation`), timed with CUDA events
(:mod:`mlsys_lib.kernels.gpu.timing`) and placed on a roofline (:mod:`mlsys_lib.kernels.gpu.roofline`).

Every public kernel is a :class:`HostOp`: ``op(*inputs)`` runs it and returns a numpy array,
``op.plan(*inputs)`` returns the plan without running anything.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from numba import cuda

from .sim import blocks
from .sim.replay import replaying

blocks.install()  # every kernel module imports this one: simulated blocks wait on a barrier, not a polling loop


Launch = tuple[Any, tuple[int, ...], tuple[int, ...], tuple[Any, ...]]  # (kernel, grid, block, device args)


@dataclass(frozen=True, eq=False)
class KernelStep:
    """One launch ``kernel[grid, block](*args)``; numpy arrays in ``args`` live in global memory."""

    kernel: Any
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple[Any, ...]


@dataclass(frozen=True, eq=False)
class KernelPlan:
    """The launches of one host call, and what they are worth on a roofline.

    ``steps`` run in order and communicate through the numpy arrays they share (an intermediate
    array appears in several steps); ``out`` is the array holding the result. ``flops`` is the
    useful floating-point work [FLOP]; ``modeled_bytes`` is the global-memory traffic [bytes] the
    lecture's counting predicts for these launches (the tests check it against the counts the
    instrumented simulator makes). ``shape`` reshapes the returned result (kernels that work on a
    flat view of an n-d array); None keeps ``out.shape``. ``compulsory_bytes`` is the traffic no
    kernel for this operation can avoid [bytes]: every input read once, the result written once
    (intermediates and re-reads excluded); the roofline bound uses it (:mod:`mlsys_lib.kernels.gpu.bound`).
    """

    name: str
    steps: tuple[KernelStep, ...]
    out: np.ndarray
    flops: int
    modeled_bytes: int
    shape: tuple[int, ...] | None = None
    compulsory_bytes: int | None = None

    def device_steps(self) -> tuple[list[Launch], Any]:
        """Copy every array argument to the device once; return ``(launches, device out)``.

        An array shared by several steps gets one device copy, so intermediates stay on the device.
        """
        on_device: dict[int, Any] = {}

        def to_device(arg: Any) -> Any:
            if not isinstance(arg, np.ndarray):
                return arg
            if id(arg) not in on_device:
                on_device[id(arg)] = cuda.to_device(arg)
            return on_device[id(arg)]

        launches = [(s.kernel, s.grid, s.block, tuple(to_device(a) for a in s.args)) for s in self.steps]
        return launches, to_device(self.out)

    def run(self) -> np.ndarray:
        """Launch every step and return ``out`` copied back to the host (float32, reshaped to ``shape``).

        Under ``instrument()`` on the GPU backend the launches replay on the simulator: no device copies.
        """
        host = replaying()
        launches, out = ([(s.kernel, s.grid, s.block, s.args) for s in self.steps], self.out) if host \
            else self.device_steps()
        for kernel, grid, block, args in launches:
            kernel[grid, block](*args)
        result = out if host else out.copy_to_host(self.out)
        return result if self.shape is None else result.reshape(self.shape)


class HostOp:
    """A host wrapper built from a plan builder: ``op(...)`` runs the plan, ``op.plan(...)`` returns it.

    Used as a decorator on a function that checks its inputs and returns a :class:`KernelPlan`.
    To keep an exercise from calling the reference, guard the plan builder:
    ``reference_guard(matmul_tiled.plan)`` makes both ``matmul_tiled(...)`` and ``.plan(...)`` raise.
    """

    def __init__(self, plan: Callable[..., KernelPlan]) -> None:
        self.plan = plan
        functools.update_wrapper(self, plan)

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        return self.plan(*args, **kwargs).run()

    def __repr__(self) -> str:
        return f"<kernel host wrapper {self.__name__}>"

