"""``instrument()`` on a real GPU: every launch inside the block is replayed on the simulator in a worker process.

Counting accesses needs Numba's CUDA simulator, and Numba picks one backend per process. On the GPU
backend, :func:`~mlsys_lib.kernels.instrument` therefore intercepts each top-level kernel launch
(``CUDADispatcher.call``, what ``kernel[grid, block](*args)`` calls, before anything touches the
driver) and sends it to a long-lived worker, ``python -m mlsys_lib.kernels.sim.replay_worker`` with
``MLSYS_DEVICE=sim``, which runs it under its own ``instrument(limit)``:

* the kernel travels as its Python function, by value (cloudpickle), and so does any CUDA dispatcher
  it reaches through globals or closures (device functions, other kernels), which the worker jits
  again on the simulator with the same ``device`` flag; a dispatcher defined at the top of an
  importable module travels by name, and the worker takes its own (some of ``mlsys_lib``'s device
  functions depend on the backend: the simulator has no ``syncwarp``);
* array arguments travel as numpy arrays (device arrays are copied to the host first); scalars as they are;
* the source lines of every function sent go along (a notebook cell exists only in ``linecache``),
  so shared arrays get the names they have in the caller's source.

The worker answers with the :class:`~mlsys_lib.kernels.sim.report.LaunchRecord`, which joins the caller's
report, the arguments' arrays after the launch, which are written back into the caller's arrays
(numpy in place, device arrays copied to the device), and what the kernel printed (to standard
output and error). An exception
raised in the kernel is raised again in the caller (same type where it can be rebuilt, with the
simulator's message). Kernels launched outside ``instrument()`` run on the GPU as usual.

The worker starts at the first instrumented launch and serves the following ones, block after
block; it ends when this process does. If it dies, the launch it was running raises RuntimeError
naming the kernel and quoting the end of the worker's standard error, and the next launch starts a new one.
"""

from __future__ import annotations

import importlib
import io
import linecache
import marshal
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import types
from contextlib import contextmanager
from typing import Any, BinaryIO, Iterator
from unittest import mock

import cloudpickle
import numpy as np

from .report import Report

_HEADER = struct.Struct("<Q")  # the byte length of each pickled message
WORKER = "mlsys_lib.kernels.sim.replay_worker"  # the module the worker runs (``python -m``)
_report: Report | None = None  # the report of the active instrument() block on the GPU backend
_limit = 0
_worker: subprocess.Popen | None = None
_worker_errors: Any = None  # the worker's standard error (a temporary file): what it said if it dies


def replaying() -> bool:
    """True while an ``instrument()`` block is active on the GPU backend (launches go to the simulator worker)."""
    return _report is not None


@contextmanager
def replay_launches(report: Report, limit: int) -> Iterator[None]:
    """While active, kernel launches are replayed on the simulator worker and recorded into ``report``."""
    global _report, _limit
    from numba.core import config
    from numba.cuda.dispatcher import CUDADispatcher

    _report, _limit = report, limit
    try:  # the launches run on the simulator: the GPU's low-occupancy warning would be noise
        with mock.patch.object(CUDADispatcher, "call", _replayed_call), \
                mock.patch.object(config, "CUDA_LOW_OCCUPANCY_WARNINGS", 0):
            yield
    finally:
        _report = None


def _replayed_call(dispatcher: Any, args: tuple, *launch: Any) -> None:
    """Stands in for ``CUDADispatcher.call``: the launch runs instrumented on the simulator worker.

    ``launch`` is a ``_LaunchConfiguration`` (recent numba-cuda) or ``griddim, blockdim, stream, sharedmem`` (0.20).
    """
    name = dispatcher.py_func.__name__
    if len(launch) == 1:
        launch = (launch[0].griddim, launch[0].blockdim, launch[0].stream, launch[0].sharedmem)
    grid, block, _, sharedmem = launch
    request = _launch_request(dispatcher, args, grid, block, sharedmem, _limit)
    reply = _exchange(request, name)
    if reply["record"] is not None:
        _report.launches.append(reply["record"])
    for original, after in zip(args, reply["args"]):
        _write_back(original, after)
    sys.stdout.write(reply["stdout"])
    sys.stderr.write(reply["stderr"])
    if reply["error"] is not None:
        error = reply["error"]
        error.add_note(f"(kernel {name} replayed on the CUDA simulator by instrument())")
        raise error


# -- the parent's side -----------------------------------------------------------------------------
class _KernelPickler(cloudpickle.Pickler):
    """Pickles functions by value (code objects as they are, file name included), CUDA dispatchers as
    "re-jit this function", and notes the source files met."""

    def __init__(self, file: BinaryIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.filenames: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        from numba.cuda.dispatcher import CUDADispatcher

        if isinstance(obj, CUDADispatcher):
            module, name = obj.py_func.__module__, obj.py_func.__qualname__
            if module != "__main__" and getattr(sys.modules.get(module), name, None) is obj:
                return _module_attribute, (module, name)  # the worker's own, as its backend defined it
            return _rejit, (obj.py_func, bool(obj.targetoptions.get("device", False)))
        if isinstance(obj, types.CodeType):  # cloudpickle would rename its file "<dynamic-code>"
            self.filenames.update(_filenames(obj))
            return marshal.loads, (marshal.dumps(obj),)
        return super().reducer_override(obj)


def _filenames(code: types.CodeType) -> Iterator[str]:
    """The source files of a code object and of the code objects nested in it."""
    yield code.co_filename
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _filenames(constant)


def _launch_request(dispatcher: Any, args: tuple, grid: tuple, block: tuple, sharedmem: int, limit: int) -> bytes:
    """The pickled launch: kernel, host copies of the arguments, launch shape, and the kernel's source lines."""
    buffer = io.BytesIO()
    pickler = _KernelPickler(buffer)
    try:
        pickler.dump((dispatcher, tuple(_to_host(a) for a in args)))
    except Exception as error:
        raise TypeError(f"instrument() on the GPU backend: kernel {dispatcher.py_func.__name__} or one of its "
                        f"arguments cannot be sent to the simulator: {error}") from error
    lines = {f: linecache.getlines(f) for f in pickler.filenames}
    return pickle.dumps({"kernel": buffer.getvalue(), "lines": lines, "grid": grid, "block": block,
                         "sharedmem": sharedmem, "limit": limit})


def _to_host(arg: Any) -> Any:
    """An argument as the simulator takes it: device arrays copied to numpy, tuples element by element."""
    if isinstance(arg, tuple):
        return tuple(_to_host(a) for a in arg)
    if hasattr(arg, "copy_to_host"):
        return arg.copy_to_host()
    return arg


def _write_back(original: Any, after: Any) -> None:
    """Copy an array argument's contents after the launch into the caller's array (numpy or device)."""
    if isinstance(original, tuple):
        for a, b in zip(original, after):
            _write_back(a, b)
    elif isinstance(original, np.ndarray) and original.flags.writeable:  # a kernel cannot write a read-only one
        original[...] = after
    elif hasattr(original, "copy_to_device"):
        original.copy_to_device(after)


def _exchange(request: bytes, kernel: str) -> dict:
    """Send one launch to the worker and wait for its reply; a dead or interrupted worker is discarded."""
    global _worker, _worker_errors
    if _worker is None or _worker.poll() is not None:
        _worker_errors = tempfile.TemporaryFile()
        _worker = _start_worker(_worker_errors)
    worker = _worker
    try:
        try:
            _send(worker.stdin, request)
        except BrokenPipeError:
            pass  # the worker has died: its exit code below says how
        reply = _receive(worker.stdout)
    except BaseException:  # an interrupted exchange leaves the pipes out of step: never reuse this worker
        _stop(worker)
        _worker = None
        raise
    if reply is None:
        code = _stop(worker)
        _worker = None
        _worker_errors.seek(0)
        said = _worker_errors.read().decode(errors="replace")[-2000:].strip()
        raise RuntimeError(f"instrument(): the CUDA simulator worker replaying kernel {kernel} died "
                           f"(exit code {code}) before it finished the launch" + (f"; it said:\n{said}" if said else ""))
    return pickle.loads(reply)


def _start_worker(errors: Any) -> subprocess.Popen:
    """``python -m mlsys_lib.kernels.sim.replay_worker`` on the simulator, importing from this process's ``sys.path``;
    its standard error goes to the file ``errors``."""
    path = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
    env = {**os.environ, "MLSYS_DEVICE": "sim", "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": path}
    return subprocess.Popen([sys.executable, "-m", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=errors, env=env)


def _stop(worker: subprocess.Popen) -> int:
    """Kill the worker if it still runs, close its pipes; return its exit code."""
    if worker.poll() is None:
        worker.kill()
    for pipe in (worker.stdin, worker.stdout):
        try:
            pipe.close()
        except OSError:
            pass
    return worker.wait()


def _send(pipe: BinaryIO, message: bytes) -> None:
    pipe.write(_HEADER.pack(len(message)) + message)
    pipe.flush()


def _receive(pipe: BinaryIO) -> bytes | None:
    """One message from ``pipe``; None at end of file (the other side has gone)."""
    header = pipe.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    message = pipe.read(size)
    return message if len(message) == size else None


# -- what the worker calls while unpickling a launch ----------------------------------------------
def _module_attribute(module: str, name: str) -> Any:
    """A kernel or device function defined at the top of an importable module, as this process defines it."""
    return getattr(importlib.import_module(module), name)


def _rejit(py_func: Any, device: bool) -> Any:
    """A CUDA dispatcher met while unpickling a kernel: the same function jitted on the simulator."""
    from numba import cuda

    return cuda.jit(device=device)(py_func)
