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

from mlsys_lib.kernels.gpu import targets  # noqa: E402  (importing mlsys_lib selects the backend)
from mlsys_lib.kernels import (attention, attention_fast, conv1d, elementwise, matmul, matmul_fast,  # noqa: E402
                               norms, reduce, scan, transpose)

LAB06 = ROOT / "solutions" / "lab06_gpu" / "lab06_gpu.ipynb"

_F32 = types.float32
_VEC = types.Array(_F32, 1, "C")
_MAT = types.Array(_F32, 2, "C")
_HEADS = types.Array(_F32, 3, "C")  # (heads, rows, head size)


def _square(v):
    return v * v  # float32 in, float32 out (``2 * v`` would be float64: Numba widens int64 * float32)


def library_cases(d: int = 64, dv: int = 64) -> list[targets.KernelCase]:
    """Every kernel of :mod:`mlsys_lib.kernels` at its host wrapper's defaults (and v = 8); attention head
    sizes d, dv. (Here, not in the library: a helper there that names the private kernels would keep them in
    every lab's student edition, whose reference wrappers and their kernels must be gone.)"""
    reductions = [("interleaved", False, reduce._interleaved_tree), ("strided", False, reduce._strided_tree),
                  ("sequential", False, reduce._sequential_tree), ("first_add", True, reduce._sequential_tree),
                  ("warp_unrolled", True, reduce._warp_unrolled_tree)]
    return [
        targets.KernelCase("elementwise_map(v * v)", lambda: elementwise._map_kernel(_square), (_VEC, _VEC)),
        targets.KernelCase("conv1d_naive", lambda: conv1d._conv1d_naive_kernel, (_VEC, _VEC, _VEC)),
        targets.KernelCase("conv1d_shared(block=128, width=3)", lambda: conv1d._conv1d_shared_kernel(128, 3),
                   (_VEC, _VEC, _VEC)),
        targets.KernelCase("matmul_naive", lambda: matmul.matmul_naive_kernel, (_MAT, _MAT, _MAT)),
        targets.KernelCase("matmul_tiled(tile=16)", lambda: matmul._matmul_tiled_kernel(16), (_MAT, _MAT, _MAT)),
        targets.KernelCase("matmul_register_blocked(v=4)", lambda: matmul._matmul_register_kernel(4), (_MAT, _MAT, _MAT)),
        targets.KernelCase("matmul_register_blocked(v=8)", lambda: matmul._matmul_register_kernel(8), (_MAT, _MAT, _MAT)),
        targets.KernelCase("attention_naive: scores", lambda: attention._scores_kernel,
                   (_MAT, _MAT, _MAT, _F32, types.boolean)),
        targets.KernelCase("attention_naive: softmax rows", lambda: attention._softmax_rows_kernel, (_MAT,)),
        targets.KernelCase(f"attention_fused(16, 16, d={d}, dv={dv})",
                   lambda: attention._attention_fused_kernel(16, 16, d, dv),
                   (_MAT, _MAT, _MAT, _MAT, _F32, types.boolean)),
        targets.KernelCase("matmul_block_tiled(128, 128, 8, 8, 8)",
                           lambda: matmul_fast._matmul_block_tiled_kernel(128, 128, 8, 8, 8), (_MAT, _MAT, _MAT)),
        targets.KernelCase(f"attention_flash(128, 32, d={d}, dv={dv})",
                           lambda: attention_fast._attention_flash_kernel(128, 32, d, dv),
                           (_HEADS, _HEADS, _HEADS, _HEADS, _F32, types.boolean)),
        targets.KernelCase("transpose_naive(32, 8)", lambda: transpose._transpose_naive_kernel(32, 8), (_MAT, _MAT)),
        targets.KernelCase("transpose_shared(32, 8)", lambda: transpose._transpose_tile_kernel(32, 8, 32), (_MAT, _MAT)),
        targets.KernelCase("transpose_padded(32, 8)", lambda: transpose._transpose_tile_kernel(32, 8, 33), (_MAT, _MAT)),
        *[targets.KernelCase(f"reduce_{name}(256)", lambda first_add=first_add, tree=tree: reduce._reduce_kernel(
            256, first_add, tree), (_VEC, _VEC)) for name, first_add, tree in reductions],
        targets.KernelCase("scan_hillis_steele(256)", lambda: scan._hillis_steele_kernel(256), (_VEC, _VEC, _VEC)),
        targets.KernelCase("scan_blelloch(256)", lambda: scan._blelloch_kernel(256), (_VEC, _VEC, _VEC)),
        targets.KernelCase("scan: add block offsets", lambda: scan._add_block_offsets_kernel, (_VEC, _VEC)),
        targets.KernelCase("softmax_rows(128, d=1024)", lambda: norms._softmax_kernel(128, 1024), (_MAT, _MAT)),
        targets.KernelCase("layernorm_rows(128, d=1024)", lambda: norms._layernorm_kernel(128, 1024, 1e-5), (_MAT, _MAT)),
    ]


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
    rows = targets.resource_table(library_cases() + lab06_cases())
    print(json.dumps([dataclasses.asdict(r) for r in rows]) if args.json else targets.format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
