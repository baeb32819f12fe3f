"""Choosing the CUDA backend (GPU or simulator) works whatever the import order."""

import os
import subprocess
import sys

import pytest

from mlsys_lib.kernels.gpu.device import nvidia_driver_present

EXPECTED = "gpu" if nvidia_driver_present() else "sim"

KERNEL = """
import numpy as np
from numba import cuda

@cuda.jit
def add_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1

a = np.zeros(37)
add_one[3, 16](a)
assert (a == 1).all(), a
"""


def run(code, **env):
    environ = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "MLSYS_DEVICE")}
    environ.update(env)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=120)
    return result


@pytest.mark.parametrize("first", ["import mlsys_lib\nimport numba", "import numba\nimport mlsys_lib"])
def test_backend_chosen_before_numba_cuda_whatever_imported_first(first):
    result = run(first + "\nfrom mlsys_lib.kernels import device_info\n"
                 "print(device_info()['backend'])\n" + KERNEL)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == EXPECTED


def test_simulator_forced_by_environment():
    result = run("import mlsys_lib\nfrom mlsys_lib.kernels import device_info\nprint(device_info())\n" + KERNEL,
                 MLSYS_DEVICE="sim")
    assert result.returncode == 0, result.stderr
    assert "'backend': 'sim'" in result.stdout and "MLSYS_DEVICE=sim" in result.stdout


def test_numba_cuda_imported_first_is_reported():
    result = run("from numba import cuda\nimport mlsys_lib\nfrom mlsys_lib.kernels import device_info\n"
                 "print(device_info()['reason'])", NUMBA_ENABLE_CUDASIM="1")
    assert result.returncode == 0, result.stderr
    assert "imported before mlsys_lib" in result.stdout


def test_unknown_device_name_is_a_clear_error():
    result = run("import mlsys_lib", MLSYS_DEVICE="tpu")
    assert result.returncode != 0
    assert "MLSYS_DEVICE='tpu'" in result.stderr and "auto, gpu, sim" in result.stderr
