"""GFLOP/s of the four matmul steps against numpy's ``A @ B``, measured in the same run.

    python benchmarks/matmul.py [--sizes 256 512 1024] [--repeats 3] [--dtype float32]

Prints one row per size n (square n x n float32 matrices): GFLOP/s of each step and of numpy, then
the ratios (each step / numpy, tiled / naive). Each kernel is compiled and checked against numpy
on a small problem before anything is timed.
"""

from __future__ import annotations

import argparse
import functools

import numpy as np

from mlsys_lib.tensor.matmul import MATMUL_STEPS
from mlsys_lib.tensor.roofline import matmul_flops_bytes, time_best


def _numpy_matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A @ B


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per step and size (best is kept)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    dtype = np.dtype(args.dtype)
    contenders = {**MATMUL_STEPS, "numpy": _numpy_matmul}

    # Warm up: compile every kernel and check it on a size that is not a multiple of any tile.
    A, B = rng.random((67, 45), dtype=dtype), rng.random((45, 71), dtype=dtype)
    for name, matmul in contenders.items():
        np.testing.assert_allclose(matmul(A, B), A @ B, rtol=1e-4, err_msg=name)

    header = f"{'n':>6} " + " ".join(f"{name:>10}" for name in contenders)
    ratios = [f"{name}/numpy" for name in MATMUL_STEPS] + ["tiled/naive"]
    print(f"GFLOP/s ({dtype}, best of {args.repeats})")
    print(header)
    rows = []
    for n in args.sizes:
        A, B = rng.random((n, n), dtype=dtype), rng.random((n, n), dtype=dtype)
        flops, _ = matmul_flops_bytes(n, n, n, dtype.itemsize)
        gflops = {}
        for name, matmul in contenders.items():
            gflops[name] = flops / time_best(functools.partial(matmul, A, B), args.repeats) / 1e9
        rows.append((n, gflops))
        print(f"{n:>6} " + " ".join(f"{gflops[name]:>10.2f}" for name in contenders), flush=True)

    print("\nratios")
    print(f"{'n':>6} " + " ".join(f"{name:>16}" for name in ratios))
    for n, gflops in rows:
        values = [gflops[name] / gflops["numpy"] for name in MATMUL_STEPS] + [gflops["tiled"] / gflops["naive"]]
        print(f"{n:>6} " + " ".join(f"{v:>16.3f}" for v in values))


if __name__ == "__main__":
    main()
