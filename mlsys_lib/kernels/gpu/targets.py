"""Compile the kernels for a real GPU target without a GPU, and refuse launches a target cannot run.

Numba's CUDA target turns a kernel into PTX with NVVM (``numba.cuda.compile_ptx(..., cc=(9, 0))``),
and nvJitLink assembles the PTX into a cubin for one architecture (``sm_90``) and reports, in its
verbose log, the registers each thread uses. Neither needs a GPU or a driver: only the
``nvidia-nvvm``, ``nvidia-cuda-nvrtc`` and ``nvidia-nvjitlink`` wheels (or a CUDA toolkit) and Numba's real CUDA target,
which ``import mlsys_lib`` selects with ``MLSYS_DEVICE=gpu`` (under the simulator there is no
compiler). ``python benchmarks/kernels_compile.py`` prints the table for every kernel.

What a block may use on the targets here (compute capability 8.0, A100, and 9.0, H100):

* **registers**: 64K 32-bit registers per block, so ``threads x registers per thread <= 65536``;
  a kernel compiled without launch bounds may use up to 255 registers per thread, so its largest
  runnable block depends on what the compiler chose (the table says);
* **static shared memory**: 48 KiB per block declared with ``cuda.shared.array``
  (:data:`~mlsys_lib.kernels.checks.MAX_SHARED_BYTES`).

:func:`check_plan` applies both to every launch of a :class:`~mlsys_lib.kernels.plan.KernelPlan`,
with the registers from the compile table for the target or given explicitly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterable
from unittest import mock

import numba

from ..checks import MAX_REGISTERS_PER_BLOCK, MAX_THREADS_PER_BLOCK, block_registers, shared_bytes
from .device import current_backend
from ..plan import KernelPlan


@dataclass(frozen=True)
class Target:
    """A GPU architecture to compile for: ``name`` as nvJitLink spells it, compute capability ``cc``."""

    name: str
    cc: tuple[int, int]


TARGETS = {t.name: t for t in (Target("sm_80", (8, 0)), Target("sm_90", (9, 0)))}  # A100, H100

#: Shared libraries the offline compile needs (found by ``cuda.pathfinder``: wheels or a CUDA toolkit).
_LIBRARIES = {"nvvm": "nvidia-nvvm", "nvrtc": "nvidia-cuda-nvrtc", "nvJitLink": "nvidia-nvjitlink"}


@dataclass(frozen=True)
class KernelResources:
    """What one kernel needs per thread and per block once compiled for ``target``.

    ``registers`` per thread (from nvJitLink's log), ``shared_bytes`` of static shared memory per
    block (the ``.shared`` declarations of the PTX), ``stack_bytes`` of local memory per thread
    (``cuda.local.array``s the compiler could not keep in registers), ``f64_ops`` the PTX
    instructions working on float64 (slow on most GPUs: a float32 kernel should have none).
    """

    kernel: str
    target: str
    registers: int
    shared_bytes: int
    stack_bytes: int
    f64_ops: int

    def max_threads(self) -> int:
        """The largest block [threads, a multiple of the 32-thread warp] the register file holds."""
        fits = MAX_REGISTERS_PER_BLOCK // max(self.registers, 1)
        return min(MAX_THREADS_PER_BLOCK, fits - fits % 32)


@dataclass(frozen=True)
class KernelCase:
    """A kernel to compile: ``build()`` returns the ``cuda.jit`` kernel, ``argtypes`` its Numba argument types."""

    name: str
    build: Callable[[], Any]
    argtypes: tuple[Any, ...]


def compiler_missing() -> str | None:
    """Why kernels cannot be compiled for a GPU target here, or None when they can."""
    install = f"pip install {' '.join(_LIBRARIES.values())} (or install a CUDA toolkit)"
    try:
        from cuda import pathfinder
    except ImportError:
        return f"cuda-pathfinder is not installed (numba-cuda >= 0.20 brings it); then {install}"
    for lib in _LIBRARIES:
        try:
            pathfinder.load_nvidia_dynamic_lib(lib)
        except pathfinder.DynamicLibNotFoundError:
            return f"lib{lib} not found: {install}"
    return None


def target(name: str) -> Target:
    """The :class:`Target` called ``name`` ("sm_80", "sm_90"); ValueError naming the known ones otherwise."""
    if name not in TARGETS:
        raise ValueError(f"unknown GPU target {name!r}; known: {', '.join(TARGETS)}")
    return TARGETS[name]


def _ptx_shared_bytes(ptx: str) -> int:
    """Bytes of static shared memory the PTX declares (``.shared .align 4 .b8 name[1024];``)."""
    total = 0
    for bits, count in re.findall(r"^\s*(?:\.\w+\s+)*\.shared\s+(?:\.align\s+\d+\s+)?\.[bfsu](\d+)\s+[\w$]+\[(\d+)\]",
                                  ptx, flags=re.MULTILINE):
        total += int(bits) // 8 * int(count)
    return total


def _log_number(log: str, pattern: str) -> int:
    found = re.search(pattern, log)
    if found is None:
        raise RuntimeError(f"nvJitLink's log has no {pattern!r}:\n{log}")
    return int(found.group(1))


def compile_ptx(kernel: Any, argtypes: tuple[Any, ...], tgt: Target) -> str:
    """The PTX of ``kernel`` (a ``cuda.jit`` kernel) for ``argtypes`` on ``tgt``, compiled without a GPU.

    Device functions the kernel calls are compiled for the compute capability Numba asks the current
    device for; here there is none, so that look-up answers ``tgt.cc``. Numba keeps a device function
    compiled (to LLVM IR, which the kernel's NVVM run turns into PTX for ``tgt``) for the first
    target it met; for what these kernels use its lowering tells capabilities apart only below 8.0.
    """
    if current_backend() == "sim":
        raise RuntimeError("compiling for a GPU target needs Numba's CUDA target, not the simulator: "
                           "run with MLSYS_DEVICE=gpu (no GPU needed), e.g. python benchmarks/kernels_compile.py")
    from numba import cuda
    from numba.cuda import dispatcher

    device = SimpleNamespace(compute_capability=tgt.cc)
    with mock.patch.object(dispatcher, "get_current_device", lambda: device):
        ptx, _ = cuda.compile_ptx(kernel.py_func, argtypes, cc=tgt.cc,  # with the kernel's launch bounds, if any
                                  launch_bounds=getattr(kernel, "targetoptions", {}).get("launch_bounds"))
    return ptx


def link(name: str, ptx: str, tgt: Target) -> tuple[bytes, str]:
    """``(cubin, nvJitLink's verbose log)`` for the PTX linked for ``tgt``; the linker's error if it does not link."""
    from cuda.core import Linker, LinkerOptions, ObjectCode

    linker = Linker(ObjectCode.from_ptx(ptx.encode(), name=name),
                    options=LinkerOptions(arch=tgt.name, verbose=True))
    cubin = linker.link("cubin").code
    return bytes(cubin), linker.get_info_log()


def resources(name: str, kernel: Any, argtypes: tuple[Any, ...], target_name: str) -> KernelResources:
    """Compile ``kernel`` to PTX, link it to a cubin for ``target_name`` and read what it uses."""
    tgt = target(target_name)
    ptx = compile_ptx(kernel, argtypes, tgt)
    cubin, log = link(name, ptx, tgt)
    if not cubin:
        raise RuntimeError(f"{name}: nvJitLink produced an empty cubin for {tgt.name}:\n{log}")
    f64_ops = len(re.findall(r"^\s*[a-z][\w.]*\.f64\b", ptx, flags=re.MULTILINE))
    return KernelResources(name, tgt.name, registers=_log_number(log, r"[Uu]sed (\d+) registers"),
                           shared_bytes=_ptx_shared_bytes(ptx), stack_bytes=_log_number(log, r"(\d+) stack"),
                           f64_ops=f64_ops)


def resource_table(cases: Iterable[KernelCase], targets: Iterable[str] = tuple(TARGETS)) -> list[KernelResources]:
    """:func:`resources` of every case on every target, case by case."""
    targets = tuple(targets)
    return [resources(case.name, case.build(), case.argtypes, t) for case in cases for t in targets]


def format_table(rows: Iterable[KernelResources]) -> str:
    """The table as text: one line per kernel and target, with the largest block the registers allow."""
    lines = [f"{'kernel':<44} {'target':<6} {'regs':>4} {'max block':>9} {'shared B':>8} {'stack B':>7} {'f64':>4}"]
    for r in rows:
        lines.append(f"{r.kernel:<44} {r.target:<6} {r.registers:>4} {r.max_threads():>9} {r.shared_bytes:>8} "
                     f"{r.stack_bytes:>7} {r.f64_ops:>4}")
    return "\n".join(lines)


def check_plan(plan: KernelPlan, target_name: str = "sm_80", registers: int | None = None
               ) -> list[KernelResources] | None:
    """ValueError if a launch of ``plan`` cannot run on ``target_name``: too many registers or shared bytes per block.

    With ``registers`` (per thread, e.g. from a previous compile table) only the register file is
    checked, here and now, even under the simulator. Without it every kernel of the plan is compiled
    for the target (needs :func:`compiler_missing` to be None and ``MLSYS_DEVICE=gpu``) and checked
    against its measured registers and static shared memory; returns their resources.
    """
    tgt = target(target_name)
    if registers is not None:
        for step in plan.steps:
            block_registers(f"{plan.name} on {tgt.name}", math.prod(step.block), registers)
        return None
    table = []
    for i, step in enumerate(plan.steps):
        name = plan.name if len(plan.steps) == 1 else f"{plan.name} launch {i + 1}"
        res = resources(name, step.kernel, tuple(numba.typeof(a) for a in step.args), tgt.name)
        block_registers(f"{name} on {tgt.name} ({res.registers} registers per thread)", math.prod(step.block),
                        res.registers)
        shared_bytes(f"{name} on {tgt.name}", res.shared_bytes)
        table.append(res)
    return table
