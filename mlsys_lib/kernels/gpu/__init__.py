"""The GPU side of the kernels: which device runs them, what it can do, and timing them on it.

Machinery, not kernels: nothing here is a kernel students read. Its modules:

* ``device``: choose the backend (a real NVIDIA GPU or Numba's CUDA simulator) before ``numba.cuda``
  is imported; ``import mlsys_lib`` calls :func:`~mlsys_lib.kernels.gpu.device.select_backend`;
* ``gpus``: the spec table ``GPUS`` (A100, H100, H200, with their SMs and peaks) and theoretical ``occupancy``;
* ``timing``: ``time_plan`` with CUDA events, ``time_cupy_matmul`` (cuBLAS) as the yardstick;
* ``targets``: compile the kernels for ``sm_80``/``sm_90`` without a GPU (registers, shared memory)
  and ``check_plan``, which refuses a launch a target cannot run;
* ``bound``: from the compiled resources and the launch, occupancy, blocks per SM and waves on a
  board of ``GPUS``, and the roofline bound with compulsory traffic (``python
  benchmarks/kernels_targets.py`` prints it for every benchmark);
* ``suite``: the benchmarks at GPU sizes, their floors (% of bound) and the "faster than" claims;
* ``roofline``: ``measure`` a plan (counted under the simulator, timed on a GPU) and
  ``roofline_points``;
* ``gpu_session``: the GPU lab session, ``device_peak`` and ``gpu_figures``
  (``mlsys course figures --gpu``), which times every kernel against the device's own peak.

Dependencies: ``device`` and ``gpus`` sit below everything (the kernels and
:mod:`mlsys_lib.kernels.sim` use them); ``timing``, ``targets`` and ``roofline`` take a kernel's
:class:`~mlsys_lib.kernels.plan.KernelPlan`, ``roofline`` counts with the simulator instrument,
and only ``suite`` and ``gpu_session`` import the kernels themselves (to time them all). The public names are
re-exported by :mod:`mlsys_lib.kernels`. This ``__init__`` imports nothing, so ``import mlsys_lib``
can import ``gpu.device`` before ``numba.cuda`` is imported.
"""
