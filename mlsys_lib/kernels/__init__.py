"""GPU kernels written with ``numba.cuda.jit``, run on an NVIDIA GPU or on Numba's CUDA simulator.

Importing ``mlsys_lib`` already chose the backend (see :mod:`mlsys_lib.kernels.device`).
"""

from .device import DEVICE_ENV, device_info

__all__ = ["DEVICE_ENV", "device_info"]
