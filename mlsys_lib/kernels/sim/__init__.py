"""The simulator instrument: what ``instrument()`` counts when kernels run on Numba's CUDA simulator.

Machinery, not kernels: it runs the kernels of :mod:`mlsys_lib.kernels` (or a student's) and
records, per launch, every simulated thread's memory traffic, the warp requests a GPU would issue,
shared-memory races and out-of-bounds accesses. Its modules, in the order a launch meets them:

* ``instrumentation``: :func:`instrument`, the context manager that wraps the simulator's launch,
  shared arrays, ``syncthreads`` and atomics while it is active;
* ``traced``: :class:`TracedArray`, the probe each kernel argument and shared array becomes, and the
  per-launch ``Recorder`` (counts, access log, shadow memory for races);
* ``warps``: the warp-level analysis of the access log (requests, 32-byte sectors, bank conflicts,
  divergence);
* ``report``: what was found, :class:`Report` with one :class:`LaunchRecord` per launch;
* ``replay``: on the GPU backend, each launch inside ``instrument()`` is sent to a simulator worker
  process instead, ``replay_worker`` (``python -m mlsys_lib.kernels.sim.replay_worker``).

Dependencies go one way: these modules import nothing from the kernels above them; they use
:mod:`mlsys_lib.kernels.gpu` only for the backend in use (``gpu.device``) and a launch's
occupancy (``gpu.gpus``). The public names are re-exported by :mod:`mlsys_lib.kernels`
(``instrument``, ``Report``, ``LaunchRecord``...). This ``__init__`` imports nothing, so importing
the package does not import ``numba.cuda`` before the backend is chosen.
"""
