"""GPU kernels written with ``numba.cuda.jit``, run on an NVIDIA GPU or on Numba's CUDA simulator.

Importing ``mlsys_lib`` already chose the backend (see :mod:`mlsys_lib.kernels.gpu.device`).

Layout: the modules at the top of this package are the kernels students read, one per lecture
topic (``elementwise``, ``conv1d``, ``matmul``, ``attention``, ``transpose``, ``reduce``, ``scan``,
``norms``), the device helpers they share (``tiles``) and the host side every wrapper uses
(``checks``: input checks and per-block limits; ``plan``: the launches a wrapper decided on). The
machinery that runs and measures them lives in two sub-packages:

* :mod:`mlsys_lib.kernels.sim`: the simulator instrument (``instrument()``: counting traffic, warp
  requests, races; replaying GPU launches on the simulator);
* :mod:`mlsys_lib.kernels.gpu`: the GPU side (choosing the backend, the spec table and occupancy,
  CUDA-event timing, compile targets, the roofline, the GPU lab session).

Dependencies point from the kernels to the machinery: a kernel imports ``checks``, ``plan``,
``tiles``, ``gpu.device`` and at most another kernel (``attention`` reuses ``matmul``'s, ``matmul_fast``
``matmul``'s checks and plan), and ``plan``
asks ``sim.replay`` whether launches are being replayed; nothing in ``sim`` or ``gpu`` imports a
kernel, except ``gpu.suite`` (the benchmarks at GPU sizes) and ``gpu.gpu_session``, the top of the
stack, which times them all. Everything a notebook
needs is re-exported here: ``from mlsys_lib.kernels import instrument, matmul_tiled``.

* host wrappers (numpy in, numpy out, any size, float32; ``op.plan(...)`` gives the launch plan):
  ``elementwise_map``, ``conv1d_naive``, ``conv1d_shared``, ``matmul_naive``, ``matmul_tiled``,
  ``matmul_register_blocked``, ``attention_naive``, ``attention_fused``, and the fast kernels after
  them (``matmul_fast``, ``attention_fast``): ``matmul_block_tiled``, ``attention_flash`` (float32 or
  float64 inputs, batch x heads); the warp-level lecture's
  ``transpose_naive``/``_shared``/``_padded``, ``reduce_interleaved``/``_interleaved_strided``/
  ``_sequential``/``_first_add``/``_warp_unrolled``, ``scan_hillis_steele``, ``scan_blelloch``
  (with ``scan_work_depth``), ``softmax_rows``, ``layernorm_rows``;
* device helpers for tiled kernels: ``load_tile``, ``load_span``, ``block_thread_id``;
* instrumented simulation: ``instrument()`` yields a ``Report`` (traffic per block and thread,
  warp requests: global sectors, shared bank conflicts, divergence; shared-memory races,
  out-of-bounds accesses), for these kernels and any other; on the GPU backend its launches are
  replayed on the simulator in a worker process (``replay``), with the same report;
* ``occupancy(block_threads, registers_per_thread, shared_bytes_per_block, gpu)``: theoretical
  occupancy from the spec table ``GPUS`` (A100, H100, H200);
* on a GPU: ``time_plan`` (CUDA events), ``time_cupy_matmul`` (cuBLAS);
* everywhere: ``measure`` and ``roofline_points`` place kernels on a roofline;
* the GPU lab session: ``device_peak`` (bandwidth and FP32 peak from the device's attributes),
  ``gpu_figures`` (every kernel timed against that peak; ``mlsys course figures --gpu``).

Everything but ``gpu.device`` is imported lazily, on first use: ``import mlsys_lib`` imports this
package *before* it selects the backend, and the kernel modules import ``numba.cuda``, which
must not happen until the backend is selected.
"""

import importlib
from typing import Any

from .gpu.device import DEVICE_ENV, device_info

_EXPORTS = {
    "elementwise_map": "elementwise",
    "conv1d_naive": "conv1d", "conv1d_shared": "conv1d",
    "matmul_naive": "matmul", "matmul_tiled": "matmul", "matmul_register_blocked": "matmul",
    "attention_naive": "attention", "attention_fused": "attention",
    "matmul_block_tiled": "matmul_fast", "attention_flash": "attention_fast",
    "transpose_naive": "transpose", "transpose_shared": "transpose", "transpose_padded": "transpose",
    "reduce_interleaved": "reduce", "reduce_interleaved_strided": "reduce", "reduce_sequential": "reduce",
    "reduce_first_add": "reduce", "reduce_warp_unrolled": "reduce",
    "scan_hillis_steele": "scan", "scan_blelloch": "scan", "scan_work_depth": "scan",
    "softmax_rows": "norms", "layernorm_rows": "norms",
    "load_tile": "tiles", "load_span": "tiles", "block_thread_id": "tiles",
    "instrument": "sim.instrumentation",
    "Report": "sim.report", "LaunchRecord": "sim.report", "Race": "sim.report", "OutOfBounds": "sim.report",
    "ArrayTraffic": "sim.report", "COUNT_KINDS": "sim.report", "Requests": "sim.report", "WarpStats": "sim.report",
    "occupancy": "gpu.gpus", "Occupancy": "gpu.gpus", "GpuSpec": "gpu.gpus", "GPUS": "gpu.gpus",
    "HostOp": "plan", "KernelPlan": "plan", "KernelStep": "plan",
    "gpu_available": "gpu.timing", "time_plan": "gpu.timing", "time_cupy_matmul": "gpu.timing",
    "KernelMeasurement": "gpu.roofline", "measure": "gpu.roofline", "roofline_points": "gpu.roofline",
    "DevicePeak": "gpu.gpu_session", "device_peak": "gpu.gpu_session", "gpu_figures": "gpu.gpu_session",
}

__all__ = ["DEVICE_ENV", "device_info", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
