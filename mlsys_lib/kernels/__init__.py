"""GPU kernels written with ``numba.cuda.jit``, run on an NVIDIA GPU or on Numba's CUDA simulator.

Importing ``mlsys_lib`` already chose the backend (see :mod:`mlsys_lib.kernels.device`).

* host wrappers (numpy in, numpy out, any size, float32; ``op.plan(...)`` gives the launch plan):
  ``elementwise_map``, ``conv1d_naive``, ``conv1d_shared``, ``matmul_naive``, ``matmul_tiled``,
  ``matmul_register_blocked``, ``attention_naive``, ``attention_fused``; the warp-level lecture's
  ``transpose_naive``/``_shared``/``_padded``, ``reduce_interleaved``/``_interleaved_strided``/
  ``_sequential``/``_first_add``/``_warp_unrolled``, ``scan_hillis_steele``, ``scan_blelloch``
  (with ``scan_work_depth``), ``softmax_rows``, ``layernorm_rows``;
* device helpers for tiled kernels: ``load_tile``, ``load_span``, ``block_thread_id``;
* instrumented simulation: ``instrument()`` yields a ``Report`` (traffic per block and thread,
  warp requests: global sectors, shared bank conflicts, divergence; shared-memory races,
  out-of-bounds accesses), for these kernels and any other; on the GPU backend its launches are
  replayed on the simulator in a worker process (``replay``), with the same report;
* ``occupancy(block_threads, registers_per_thread, shared_bytes_per_block, gpu)``: theoretical
  occupancy from the spec table ``GPUS`` (A100, H100);
* on a GPU: ``time_plan`` (CUDA events), ``time_cupy_matmul`` (cuBLAS);
* everywhere: ``measure`` and ``roofline_points`` place kernels on a roofline;
* the GPU lab session: ``device_peak`` (bandwidth and FP32 peak from the device's attributes),
  ``gpu_figures`` (every kernel timed against that peak; ``mlsys course figures --gpu``).

Everything but ``device`` is imported lazily, on first use: ``import mlsys_lib`` imports this
package *before* it selects the backend, and the kernel modules import ``numba.cuda``, which
must not happen until the backend is selected.
"""

import importlib
from typing import Any

from .device import DEVICE_ENV, device_info

_EXPORTS = {
    "elementwise_map": "elementwise",
    "conv1d_naive": "conv1d", "conv1d_shared": "conv1d",
    "matmul_naive": "matmul", "matmul_tiled": "matmul", "matmul_register_blocked": "matmul",
    "attention_naive": "attention", "attention_fused": "attention",
    "transpose_naive": "transpose", "transpose_shared": "transpose", "transpose_padded": "transpose",
    "reduce_interleaved": "reduce", "reduce_interleaved_strided": "reduce", "reduce_sequential": "reduce",
    "reduce_first_add": "reduce", "reduce_warp_unrolled": "reduce",
    "scan_hillis_steele": "scan", "scan_blelloch": "scan", "scan_work_depth": "scan",
    "softmax_rows": "norms", "layernorm_rows": "norms",
    "load_tile": "tiles", "load_span": "tiles", "block_thread_id": "tiles",
    "instrument": "instrumentation",
    "Report": "report", "LaunchRecord": "report", "Race": "report", "OutOfBounds": "report",
    "ArrayTraffic": "report", "COUNT_KINDS": "report", "Requests": "report", "WarpStats": "report",
    "occupancy": "gpus", "Occupancy": "gpus", "GpuSpec": "gpus", "GPUS": "gpus",
    "HostOp": "plan", "KernelPlan": "plan", "KernelStep": "plan",
    "gpu_available": "timing", "time_plan": "timing", "time_cupy_matmul": "timing",
    "KernelMeasurement": "roofline", "measure": "roofline", "roofline_points": "roofline",
    "DevicePeak": "gpu_session", "device_peak": "gpu_session", "gpu_figures": "gpu_session",
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
