"""Rounding 10^7 float32 values into FP16, BF16, FP8 E4M3 and FP8 E5M2 with ``round_to`` against the
native casts measured in the same run: numpy's float16, ml_dtypes' bfloat16 / float8_e4m3fn / float8_e5m2.

    python benchmarks/precision.py [--size 10000000] [--repeats 5]

``round_to`` returns float32 values of the format, so the like-for-like reference is the cast there and
back (``x.astype(dtype).astype(float32)``); the one-way cast is printed too. Two inputs: N(0, 1) values
(typical activations) and "wide" ones (magnitudes 2^-40..2^40: subnormals, underflow and overflow on
every call). Results are checked equal to the reference before anything is timed. Target: FP16 within
3x of numpy's cast.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np

from mlsys_lib.precision import BF16, FP8_E4M3, FP8_E5M2, FP16, round_to
from mlsys_lib.tensor.roofline import time_best

NATIVE = {FP16: np.float16, BF16: ml_dtypes.bfloat16,
          FP8_E4M3: ml_dtypes.float8_e4m3fn, FP8_E5M2: ml_dtypes.float8_e5m2}


def inputs(size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    normal = rng.standard_normal(size).astype(np.float32)
    wide = (normal * np.exp2(rng.uniform(-40, 40, size))).astype(np.float32)
    return {"N(0,1)": normal, "wide": wide}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of each (the best is kept)")
    args = parser.parse_args(argv)
    print(f"round_to vs native casts, {args.size:.0e} float32 values, best of {args.repeats}; ms")
    print(f"{'input':8} {'format':9} {'round_to':>9} {'cast':>8} {'cast+back':>10} {'/cast':>7} {'/cast+back':>11}")
    for name, x in inputs(args.size).items():
        for fmt, dtype in NATIVE.items():
            with np.errstate(over="ignore"):
                reference = x.astype(dtype).astype(np.float32)
            assert np.array_equal(round_to(x, fmt), reference, equal_nan=True), fmt.name
            with np.errstate(over="ignore"):
                ours = time_best(lambda: round_to(x, fmt), args.repeats)
                cast = time_best(lambda: x.astype(dtype), args.repeats)
                both = time_best(lambda: x.astype(dtype).astype(np.float32), args.repeats)
            print(f"{name:8} {fmt.name:9} {ours * 1e3:9.1f} {cast * 1e3:8.1f} {both * 1e3:10.1f} "
                  f"{ours / cast:6.2f}x {ours / both:10.2f}x")
    print("target: fp16 round_to within 3x of numpy's float16 cast")


if __name__ == "__main__":
    main()
