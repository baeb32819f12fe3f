"""Compile every CUDA kernel of mlsys_lib.kernels and of Lab 6's solution for sm_80 and sm_90, without a GPU.

    python benchmarks/kernels_compile.py [--json]

Each kernel is compiled to PTX by Numba (NVVM) and linked to a cubin by nvJitLink; the table gives
its registers per thread, the largest block those registers allow (64K registers per block), its
static shared memory per block, its local memory (stack) per thread and its float64 instructions.
Needs the ``nvidia-nvvm``, ``nvidia-cuda-nvrtc`` and ``nvidia-nvjitlink`` wheels (``pip install -e ".[dev]"`` has them);
runs on Numba's real CUDA target (``MLSYS_DEVICE=gpu``, set here), which compiles without a driver.
``--json`` prints the rows as a JSON list instead (what ``tests/test_kernels_compile.py`` reads).
Lab 6's kernels come from the solution cells of ``solutions/lab06_gpu/lab06_gpu.ipynb``, run
without their demo cells.
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

from numba import types  # noqa: E402

from mlsys_lib.kernels import targets  # noqa: E402  (importing mlsys_lib selects the backend)

LAB06 = ROOT / "solutions" / "lab06_gpu" / "lab06_gpu.ipynb"


def lab06_cases(notebook: Path = LAB06, d: int = 64, dv: int = 64) -> list[targets.KernelCase]:
    """The kernels of Lab 6's solution cells (nbgrader ``solution`` code cells, run in one namespace)."""
    cells = json.loads(notebook.read_text())["cells"]
    space: dict = {}
    exec("import math\nimport numpy as np\nfrom numba import cuda, float32", space)
    for cell in cells:
        grading = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] == "code" and grading.get("solution"):
            source = "".join(cell["source"])
            exec(compile(source, f"{notebook.name}:{grading['grade_id']}", "exec"), space)
    f32, vec, mat = types.float32, types.Array(types.float32, 1, "C"), types.Array(types.float32, 2, "C")
    return [
        targets.KernelCase("lab06 saxpy_kernel", lambda: space["saxpy_kernel"], (f32, vec, vec, vec)),
        targets.KernelCase("lab06 transpose_kernel", lambda: space["transpose_kernel"], (mat, mat)),
        targets.KernelCase("lab06 conv1d_shared(16, 3)", lambda: space["make_conv1d_shared"](16, 3), (vec, vec, vec)),
        targets.KernelCase("lab06 matmul_tiled(16)", lambda: space["make_matmul_tiled"](16), (mat, mat, mat)),
        targets.KernelCase(f"lab06 attention_fused(16, 16, {d}, {dv})",
                           lambda: space["make_attention_fused"](16, 16, d, dv), (mat, mat, mat, mat)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    missing = targets.compiler_missing()
    if missing:
        print(f"cannot compile for a GPU target here: {missing}", file=sys.stderr)
        return 2
    rows = targets.resource_table(targets.library_cases() + lab06_cases())
    print(json.dumps([dataclasses.asdict(r) for r in rows]) if args.json else targets.format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
