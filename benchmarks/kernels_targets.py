"""Occupancy, waves and roofline bound of every GPU benchmark on an A100, H100 and H200, without a GPU.

    python benchmarks/kernels_targets.py [--only TEXT ...] [--json]

For each benchmark of ``mlsys_lib.kernels.gpu.suite`` (its plan at the GPU session's size) the kernel
of its largest launch is compiled for the board's architecture (sm_80 for the A100, sm_90 for the
H100 and H200: NVVM and nvJitLink, no driver), and ``mlsys_lib.kernels.gpu.bound.launch_report``
gives its registers, shared memory, blocks per SM, occupancy, waves, compulsory traffic and the
roofline bound (the shortest time any kernel could take on that board). ``--only`` keeps the
benchmarks whose name contains one of the texts; ``--json`` prints the rows as JSON (what
``tests/test_kernels_bound.py`` reads). Needs the ``nvidia-nvvm``, ``nvidia-cuda-nvrtc`` and
``nvidia-nvjitlink`` wheels of the dev extra.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

os.environ["MLSYS_DEVICE"] = "gpu"  # before mlsys_lib: Numba's CUDA target, which has the compiler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numba  # noqa: E402
import numpy as np  # noqa: E402

from mlsys_lib.kernels.gpu import bound, gpus, suite, targets  # noqa: E402  (importing mlsys_lib selects the backend)

BOARDS = ("A100", "H100", "H200")


def reports(only: list[str]) -> list[bound.LaunchReport]:
    """The launch report of every chosen benchmark on every board (one compile per architecture)."""
    rows = []
    rng = np.random.default_rng(0)
    for bench in suite.BENCHMARKS:
        if only and not any(text in bench.name for text in only):
            continue
        plan = bench.build(rng)
        step = plan.steps[bound.main_step(plan)]
        argtypes = tuple(numba.typeof(a) for a in step.args)
        compiled = {}
        for board in BOARDS:
            arch = gpus.GPUS[board].sm
            if arch not in compiled:
                compiled[arch] = targets.resources(bench.name, step.kernel, argtypes, arch)
            res = compiled[arch]
            report = bound.launch_report(plan, board, res.registers, res.shared_bytes)
            rows.append(dataclasses.replace(report, kernel=bench.name))
        del plan
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="benchmarks whose name contains one of these")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    missing = targets.compiler_missing()
    if missing:
        print(f"cannot compile for a GPU target here: {missing}", file=sys.stderr)
        return 2
    rows = reports(args.only)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows]))
    else:
        print(bound.HEADER)
        print("\n".join(r.line() for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
