"""Choose where CUDA kernels run: a real NVIDIA GPU, or Numba's CUDA simulator on the CPU.

Numba decides once, when ``numba.cuda`` is first imported, by reading ``NUMBA_ENABLE_CUDASIM``.
``import mlsys_lib`` calls :func:`select_backend` before anything imports ``numba.cuda``:

* ``MLSYS_DEVICE=gpu`` or ``=sim`` forces a backend (``sim`` on a GPU machine is handy to debug);
* otherwise (``auto``) the GPU is used when the NVIDIA driver is present and ``libcuda`` loads, and
  the simulator everywhere else;
* an explicit ``NUMBA_ENABLE_CUDASIM`` set by the user is respected.

If ``numba.cuda`` was imported before ``mlsys_lib``, the backend it picked stays; :func:`device_info`
says which one is in use and why.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

DEVICE_ENV = "MLSYS_DEVICE"
_CHOICES = ("auto", "gpu", "sim")
_reason = "not chosen yet"


def nvidia_driver_present() -> bool:
    """True if an NVIDIA driver is loaded and its CUDA library opens (without importing numba.cuda)."""
    if not (Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidia0").exists()
            or sys.platform == "win32"):
        return False
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def select_backend() -> str:
    """Set Numba's simulator switch from ``$MLSYS_DEVICE`` and the hardware; return "gpu" or "sim"."""
    global _reason
    choice = os.environ.get(DEVICE_ENV, "auto").strip().lower()
    if choice not in _CHOICES:
        raise ValueError(f"{DEVICE_ENV}={choice!r}: expected one of {', '.join(_CHOICES)}")
    if "numba.cuda" in sys.modules:
        _reason = "numba.cuda was imported before mlsys_lib; its choice stands"
        return current_backend()
    if choice == "auto" and "NUMBA_ENABLE_CUDASIM" in os.environ:
        _reason = "NUMBA_ENABLE_CUDASIM set by the user"
        simulate = os.environ["NUMBA_ENABLE_CUDASIM"] not in ("", "0")
    elif choice == "auto":
        simulate = not nvidia_driver_present()
        _reason = "no usable NVIDIA driver found" if simulate else "NVIDIA driver found"
    else:
        simulate = choice == "sim"
        _reason = f"{DEVICE_ENV}={choice}"
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if simulate else "0"
    if "numba.core.config" in sys.modules:  # numba already read its environment: tell it too
        sys.modules["numba.core.config"].ENABLE_CUDASIM = int(simulate)
    return "sim" if simulate else "gpu"


def current_backend() -> str:
    """The backend ``numba.cuda`` uses (or will use): "gpu" or "sim"."""
    from numba.core import config

    return "sim" if config.ENABLE_CUDASIM else "gpu"


def device_info() -> dict[str, str]:
    """Where kernels run: ``{"backend": "gpu"|"sim", "reason": ..., "device": name}``."""
    backend = current_backend()
    device = "Numba CUDA simulator (CPU)"
    if backend == "gpu":
        from numba import cuda

        device = cuda.get_current_device().name if cuda.is_available() else "no usable GPU"
        if isinstance(device, bytes):
            device = device.decode()
    return {"backend": backend, "reason": _reason, "device": device}


def launch_bounds(max_threads: int, min_blocks: int) -> dict[str, tuple[int, int]]:
    """``cuda.jit`` options promising blocks of at most ``max_threads`` threads, ``min_blocks`` of them per SM.

    ``@cuda.jit(**launch_bounds(256, 2))`` lets the compiler cap registers so that two 256-thread
    blocks fit an SM (``__launch_bounds__(256, 2)`` in CUDA C++). The simulator has no such option
    (nor registers): there it is empty.
    """
    return {} if current_backend() == "sim" else {"launch_bounds": (max_threads, min_blocks)}
