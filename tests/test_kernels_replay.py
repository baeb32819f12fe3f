"""``instrument()`` on the GPU backend replays each launch on the simulator in a worker: the same report as the simulator.

No GPU is needed: Numba's real CUDA target imports without a driver and the replay takes the launch
before anything calls the driver. This file, run as a script, makes the same launches on each backend
(``MLSYS_DEVICE=gpu`` and ``=sim``, two subprocesses); the tests compare the reports and results
exactly. On a GPU machine, device arrays and the launches outside ``instrument()`` are real.
"""

from __future__ import annotations

import dataclasses
import json
import linecache
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import mlsys_lib  # noqa: F401  (first: it picks the backend before numba.cuda is imported)
import numpy as np
import pytest

from mlsys_lib.kernels import (conv1d_shared, instrument, matmul_tiled, reduce_warp_unrolled,
                               transpose_padded)
from mlsys_lib.kernels.gpu.device import current_backend

# A notebook cell as ipykernel compiles it: its file exists only in linecache. A factory closure, a device
# function, named shared arrays, a race on `spot` (every thread writes spot[0]) and out-of-bounds reads of x
# (the grid covers more threads than x has elements).
NOTEBOOK_FILE = "/tmp/ipykernel_4242/2718281828.py"
NOTEBOOK_CELL = '''
import warnings

from numba import cuda, float32


@cuda.jit(device=True)
def twice(v):
    return 2 * v


def make_shift(block, shift):
    @cuda.jit
    def shift_kernel(x, out):
        tile = cuda.shared.array(block, float32)
        spot = cuda.shared.array(1, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * block + tid
        tile[tid] = x[i]
        spot[0] = tile[tid]
        cuda.syncthreads()
        if i < out.shape[0]:
            out[i] = twice(tile[(tid + shift) % block])
    return shift_kernel


@cuda.jit
def failing_kernel(x):
    if cuda.threadIdx.x == 1:
        print("thread 1 gives up")
        warnings.warn("x is suspicious")
        raise ValueError("x is not what I wanted")
    x[cuda.threadIdx.x] = 1
'''


def notebook_namespace() -> dict:
    """Run NOTEBOOK_CELL as a notebook would: compiled from a file name that only linecache knows."""
    lines = NOTEBOOK_CELL.splitlines(keepends=True)
    linecache.cache[NOTEBOOK_FILE] = (len(NOTEBOOK_CELL), None, lines, NOTEBOOK_FILE)
    namespace = {"__name__": "__main__"}
    exec(compile(NOTEBOOK_CELL, NOTEBOOK_FILE, "exec"), namespace)
    return namespace


class HostBackedArray:
    """Stands for a GPU device array (``copy_to_host`` / ``copy_to_device``): no GPU here to allocate one."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    def copy_to_host(self) -> np.ndarray:
        return self.data.copy()

    def copy_to_device(self, values: np.ndarray) -> None:
        self.data[...] = values


def device_array(data: np.ndarray):
    """A device array of the backend in use (a stand-in on the GPU backend without a GPU)."""
    from numba import cuda

    return cuda.to_device(data) if current_backend() == "sim" or cuda.is_available() else HostBackedArray(data)


def scenarios() -> dict[str, tuple[list, list[np.ndarray]]]:
    """Every instrumented launch of this file: name -> (the report's launches, the inputs and results)."""
    rng = np.random.default_rng(20)
    A, B = rng.random((8, 8), dtype=np.float32), rng.random((8, 8), dtype=np.float32)
    x, w = rng.random(40, dtype=np.float32), rng.random(5, dtype=np.float32)
    y, z = rng.random(100, dtype=np.float32), rng.random((8, 12), dtype=np.float32)
    cell = notebook_namespace()

    def notebook():
        out = np.zeros(13, np.float32)
        cell["make_shift"](8, 3)[2, 8](x[:13], out)
        return [x[:13], out]

    def on_device():
        out = device_array(np.zeros(13, np.float32))
        cell["make_shift"](8, 1)[2, 8](x[:13], out)
        return [out.copy_to_host()]

    runs = {
        "matmul_tiled": lambda: [matmul_tiled(A, B, tile=4)],
        "conv1d_shared": lambda: [conv1d_shared(x, w, block=16)],
        "reduce_warp_unrolled": lambda: [np.asarray(reduce_warp_unrolled(y, block=64))],
        "transpose_padded": lambda: [transpose_padded(z, tile=8, rows=2)],
        "notebook": notebook,
        "device array": on_device,
    }
    results = {}
    for name, run in runs.items():
        with instrument(limit=1000) as report:
            outputs = run()
        results[name] = (report.launches, outputs)
    results["lab06 first example"] = lab06_first_example()
    return results


def lab06_first_example() -> tuple[list, list[np.ndarray]]:
    """Lab 6's import cell and its first ``instrument()`` cell, run as notebook cells: (launches, [out])."""
    notebook = json.loads((Path(__file__).parent.parent / "solutions/lab06_gpu/lab06_gpu.ipynb").read_text())
    code = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    cells = [code[0], next(c for c in code if "with instrument() as report" in c)]
    namespace = {"__name__": "__main__"}
    for number, cell in enumerate(cells):
        cell = "".join(line for line in cell.splitlines(keepends=True) if not line.startswith("%"))
        filename = f"/tmp/ipykernel_4242/lab06_{number}.py"
        linecache.cache[filename] = (len(cell), None, cell.splitlines(keepends=True), filename)
        exec(compile(cell, filename, "exec"), namespace)
    return namespace["report"].launches, [namespace["out"]]


def interrupt(*_) -> None:
    raise KeyboardInterrupt


def failures() -> dict[str, str]:
    """What the caller sees when a kernel raises, and when the simulator worker dies in a launch."""
    cell = notebook_namespace()
    seen = {}
    with instrument() as report:
        try:
            cell["failing_kernel"][1, 4](np.zeros(4, np.float32))
        except ValueError as error:
            seen["raised"] = str(error)
    seen["launches after raising"] = str(len(report.launches))
    if current_backend() == "gpu":
        namespace = {"__name__": "__main__"}
        exec("import os, signal\nfrom numba import cuda\n@cuda.jit\ndef doomed(x):\n"
             "    os.write(2, b'about to be killed')\n    os.kill(os.getpid(), signal.SIGKILL)\n", namespace)
        with instrument():
            try:
                namespace["doomed"][1, 1](np.zeros(1))
            except RuntimeError as error:
                seen["killed"] = str(error)
        with instrument() as again:  # a new worker
            cell["make_shift"](8, 1)[1, 8](np.ones(8, np.float32), np.zeros(8, np.float32))
        seen["launches after the kill"] = str(len(again.launches))
        exec("import time\n@cuda.jit\ndef sleepy(x):\n    time.sleep(60)\n", namespace)
        signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, 0.5)  # Ctrl-C in the middle of a long launch
        with instrument():
            try:
                namespace["sleepy"][1, 1](np.zeros(1))
            except KeyboardInterrupt:
                seen["interrupted"] = "yes"
        with instrument() as again:  # a new worker, not the one still sleeping with a reply to come
            cell["make_shift"](8, 1)[1, 8](np.ones(8, np.float32), np.zeros(8, np.float32))
        seen["launches after the interrupt"] = " ".join(launch.kernel for launch in again.launches)
        out = np.zeros(8, np.float32)
        with instrument() as older:  # numba-cuda 0.20 calls call(args, griddim, blockdim, stream, sharedmem)
            cell["make_shift"](8, 1).call((np.ones(8, np.float32), out), (1, 1, 1), (8, 1, 1), 0, 0)
        seen["0.20 call"] = f"{len(older.launches)} {out.tolist()}"
        out = np.zeros(8, np.float32)
        try:  # outside instrument(): the GPU, or the driver's absence on a machine without one
            cell["make_shift"](8, 1)[1, 8](np.ones(8, np.float32), out)
            seen["outside"] = str(out.tolist())
        except Exception as error:
            seen["outside"] = type(error).__name__
    return seen


@dataclasses.dataclass
class Side:
    """What this file, run as a script on one backend, saw."""

    scenarios: dict[str, tuple[list, list[np.ndarray]]]
    failures: dict[str, str]
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def sides(tmp_path_factory) -> dict[str, Side]:
    """Run this file as a script on each backend, both at once: {"gpu": ..., "sim": ...}.

    Both are subprocesses, so that the comparison holds on a GPU machine too, where pytest itself runs on the GPU.
    """
    folder = tmp_path_factory.mktemp("replay")
    root = str(Path(__file__).parent.parent)  # this checkout's mlsys_lib, whichever one is installed
    runs = {}
    for backend in ("gpu", "sim"):
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"} | {"MLSYS_DEVICE": backend,
                                                                                    "PYTHONPATH": root}
        runs[backend] = subprocess.Popen([sys.executable, __file__, backend, str(folder / backend)], cwd=root,
                                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result = {}
    for backend, run in runs.items():
        stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stdout + stderr
        result[backend] = Side(*pickle.loads((folder / backend).read_bytes()), stdout, stderr)
    return result


def assert_same_launch(got, want) -> None:
    """Two LaunchRecords agree on everything but the order in which simulated threads met races and bad indices."""
    assert (got.kernel, got.grid, got.block) == (want.kernel, want.grid, want.block)
    assert got.counts.keys() == want.counts.keys()
    for kind in want.counts:
        np.testing.assert_array_equal(got.counts[kind], want.counts[kind], err_msg=kind)
    assert got.arrays == want.arrays and got.warps == want.warps
    assert got.shared_bytes_per_block == want.shared_bytes_per_block
    assert (got.race_count, got.out_of_bounds_count) == (want.race_count, want.out_of_bounds_count)

    def races(record):  # which thread of a racing pair comes first depends on scheduling
        return sorted((r.kernel, r.block, r.array, r.index, r.kind) for r in record.races)

    assert races(got) == races(want)
    assert sorted(map(dataclasses.astuple, got.out_of_bounds)) == sorted(map(dataclasses.astuple, want.out_of_bounds))


@pytest.mark.parametrize("name", ["matmul_tiled", "conv1d_shared", "reduce_warp_unrolled", "transpose_padded",
                                  "notebook", "device array", "lab06 first example"])
def test_gpu_backend_replay_gives_the_simulators_report_and_results(name, sides):
    (got_launches, got_outputs), (want_launches, want_outputs) = sides["gpu"].scenarios[name], sides["sim"].scenarios[name]
    assert len(got_launches) == len(want_launches) > 0
    for got, want in zip(got_launches, want_launches):
        assert_same_launch(got, want)
    for got, want in zip(got_outputs, want_outputs, strict=True):
        np.testing.assert_array_equal(got, want)


def test_notebook_kernel_keeps_its_names_race_and_bad_reads(sides):
    (launch,), (x, out) = sides["gpu"].scenarios["notebook"]
    assert launch.kernel == "shift_kernel" and [a.name for a in launch.arrays] == ["x", "out", "tile", "spot"]
    assert launch.race_count == 2 * 7 and {r.array for r in launch.races} == {"spot"}  # 7 per block of 8
    assert launch.out_of_bounds_count == 3 and {o.index for o in launch.out_of_bounds} == {(13,), (14,), (15,)}
    source = [i - i % 8 + (i % 8 + 3) % 8 for i in range(13)]  # the tile slot each output reads
    want = np.array([2 * x[j] if j < 13 else np.nan for j in source], np.float32)  # a bad read gives NaN
    np.testing.assert_array_equal(out, want)


def test_lab06_first_example_runs_instrumented_on_the_gpu_backend(sides):
    (launch,), (out,) = sides["gpu"].scenarios["lab06 first example"]
    assert "MLSYS_DEVICE=gpu" in sides["gpu"].stdout  # the import cell printed the backend's reason
    np.testing.assert_array_equal(out, 2 * np.arange(10))
    assert (launch.kernel, launch.grid, launch.block) == ("scale_kernel", (3, 1, 1), (4, 1, 1))
    assert launch.total("global_reads") == launch.total("global_writes") == 10 and launch.ok


def test_a_kernel_raising_a_dying_worker_and_an_interrupt_are_handled(sides):
    seen, stdout, stderr = sides["gpu"].failures, sides["gpu"].stdout, sides["gpu"].stderr
    assert "x is not what I wanted" in seen["raised"] and seen["launches after raising"] == "1"
    assert "thread 1 gives up" in stdout and "UserWarning: x is suspicious" in stderr
    assert "doomed" in seen["killed"] and "died (exit code -9)" in seen["killed"]
    assert seen["killed"].endswith("it said:\nabout to be killed")
    assert seen["interrupted"] == "yes" and seen["launches after the interrupt"] == "shift_kernel"
    assert seen["launches after the kill"] == "1" and seen["0.20 call"] == f"1 {[2.0] * 8}"
    assert seen["outside"] in ("CudaSupportError", str([2.0] * 8)), seen["outside"]  # not replayed


def test_raising_kernel_raises_the_same_on_the_simulator(sides):
    got, want = sides["gpu"].failures, sides["sim"].failures
    assert got["raised"] == want["raised"] and want["launches after raising"] == "1"
    assert "thread 1 gives up" in sides["sim"].stdout and "UserWarning: x is suspicious" in sides["sim"].stderr


if __name__ == "__main__":  # one side of the comparison, run by the `sides` fixture: BACKEND OUTPUT_FILE
    assert current_backend() == sys.argv[1], current_backend()
    Path(sys.argv[2]).write_bytes(pickle.dumps((scenarios(), failures())))
