"""The GPU session's benchmarks at GPU sizes, and the claims their timings must bear out.

Each :class:`Benchmark` builds one kernel's plan at a size that fills an A100/H100/H200 (``build``
allocates its inputs only when called, so the session holds one benchmark's arrays at a time).
Those with a ``floor`` are the course's fast kernels: their time must come within ``floor`` percent
of the roofline bound with compulsory traffic (:mod:`~mlsys_lib.kernels.gpu.bound`). :data:`SPEEDUPS`
are the lectures' "faster than" claims. :func:`check_claims` turns timings into
:class:`~mlsys_lib.viz.claims.Claim` lines ("claim holds: ..." / "claim does not hold: ..."), the
same lines the CPU lectures print.

Sizes (float32): matmul 4096^3; attention n = m = 4096, d = dv = 64, batch x heads = 32 (the naive
and teaching kernels are single-head, so they run one head and their time counts 32 times);
conv1d, reductions and scans 2^26 elements (256 MiB); transposes 8192^2; softmax and LayerNorm
65536 rows of 1024.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ...viz.claims import Claim, claim
from ..plan import KernelPlan
from .bound import percent_of_bound, roofline_seconds

N_MATMUL = 4096
N_ATTENTION, D_HEAD, HEADS = 4096, 64, 32
N_VECTOR = 1 << 26
N_TRANSPOSE = 8192
ROWS, ROW = 65536, 1024


@dataclass(frozen=True)
class Benchmark:
    """A kernel at its benchmark size: ``build(rng)`` makes the plan; ``copies`` runs of it make the
    stated work (32 for a single-head attention kernel); ``floor``: the % of the roofline bound it must
    reach (None: a baseline or a teaching step); ``figure``: "lec06" (roofline) or "lec12" (warp-level)."""

    name: str
    build: Callable[[np.random.Generator], KernelPlan]
    figure: str
    floor: float | None = None
    copies: int = 1


@dataclass(frozen=True)
class Timing:
    """A benchmark's measured time for its stated work [s], its FLOPs and compulsory bytes (all copies)."""

    name: str
    seconds: float
    flops: int
    compulsory_bytes: int


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


def _op(path: str) -> Any:
    """The host wrapper ``module.name`` of :mod:`mlsys_lib.kernels`, imported on first use."""
    from .. import attention, attention_fast, conv1d, matmul, matmul_fast, norms, reduce, scan, transpose

    modules = {m.__name__.rpartition(".")[2]: m for m in (attention, attention_fast, conv1d, matmul, matmul_fast,
                                                          norms, reduce, scan, transpose)}
    module, name = path.split(".")
    return getattr(modules[module], name)


def _plan(path: str, *shapes: tuple[int, ...], weights: int = 0, **kw: Any) -> Callable[[np.random.Generator],
                                                                                       KernelPlan]:
    """A builder of ``path``'s plan on random float32 inputs of ``shapes`` (and ``weights`` averaging weights)."""
    def build(rng: np.random.Generator) -> KernelPlan:
        inputs = [_f32(rng, *shape) for shape in shapes]
        if weights:
            inputs.append(np.full(weights, 1 / weights, dtype=np.float32))
        return _op(path).plan(*inputs, **kw)
    return build


_MM = ((N_MATMUL, N_MATMUL),) * 2
_ONE_HEAD = ((N_ATTENTION, D_HEAD),) * 3
_HEADS = ((HEADS, N_ATTENTION, D_HEAD),) * 3
_SQUARE = (N_TRANSPOSE, N_TRANSPOSE)


BENCHMARKS = (
    Benchmark("conv1d naive 2^26", _plan("conv1d.conv1d_naive", (N_VECTOR,), weights=3), "lec06"),
    Benchmark("conv1d shared 2^26", _plan("conv1d.conv1d_shared", (N_VECTOR,), weights=3), "lec06", floor=70),
    Benchmark("matmul naive 4096^3", _plan("matmul.matmul_naive", *_MM), "lec06"),
    Benchmark("matmul tiled L=16 4096^3", _plan("matmul.matmul_tiled", *_MM, tile=16), "lec06"),
    Benchmark("matmul tiled L=32 4096^3", _plan("matmul.matmul_tiled", *_MM, tile=32), "lec06"),
    Benchmark("matmul register-blocked V=4 4096^3", _plan("matmul.matmul_register_blocked", *_MM, v=4, block=8),
              "lec06"),
    Benchmark("matmul block-tiled 128x128 4096^3", _plan("matmul_fast.matmul_block_tiled", *_MM), "lec06", floor=40),
    Benchmark("attention naive n=4096 x32", _plan("attention.attention_naive", *_ONE_HEAD), "lec06", copies=HEADS),
    Benchmark("attention fused (lab) n=4096 x32", _plan("attention.attention_fused", *_ONE_HEAD), "lec06",
              copies=HEADS),
    Benchmark("attention flash n=4096 x32", _plan("attention_fast.attention_flash", *_HEADS), "lec06", floor=25),
    Benchmark("transpose naive 8192^2", _plan("transpose.transpose_naive", _SQUARE), "lec12"),
    Benchmark("transpose shared 8192^2", _plan("transpose.transpose_shared", _SQUARE), "lec12"),
    Benchmark("transpose padded 8192^2", _plan("transpose.transpose_padded", _SQUARE), "lec12", floor=70),
    *[Benchmark(f"sum {label} 2^26", _plan(f"reduce.reduce_{op}", (N_VECTOR,)), "lec12",
                floor=70 if op == "warp_unrolled" else None)
      for label, op in (("interleaved", "interleaved"), ("strided index", "interleaved_strided"),
                        ("sequential", "sequential"), ("first add", "first_add"), ("warp-unrolled", "warp_unrolled"))],
    Benchmark("scan Hillis-Steele 2^26", _plan("scan.scan_hillis_steele", (N_VECTOR,)), "lec12"),
    Benchmark("scan Blelloch 2^26", _plan("scan.scan_blelloch", (N_VECTOR,)), "lec12", floor=70),
    Benchmark("softmax 65536x1024", _plan("norms.softmax_rows", (ROWS, ROW)), "lec12", floor=70),
    Benchmark("LayerNorm 65536x1024", _plan("norms.layernorm_rows", (ROWS, ROW)), "lec12", floor=70),
)

#: (slower, faster): the lectures' claims that the second kernel takes less time for the same work.
SPEEDUPS = (
    ("attention naive n=4096 x32", "attention flash n=4096 x32"),
    ("attention fused (lab) n=4096 x32", "attention flash n=4096 x32"),
    ("matmul naive 4096^3", "matmul tiled L=16 4096^3"),
    ("matmul tiled L=32 4096^3", "matmul block-tiled 128x128 4096^3"),
    ("transpose naive 8192^2", "transpose padded 8192^2"),
    ("transpose shared 8192^2", "transpose padded 8192^2"),
    ("sum interleaved 2^26", "sum sequential 2^26"),
)


def check_claims(timings: Mapping[str, Timing], peak_flops: float, bandwidth: float,
                 benchmarks: tuple[Benchmark, ...] = BENCHMARKS,
                 speedups: tuple[tuple[str, str], ...] = SPEEDUPS) -> list[Claim]:
    """Print and return every claim the ``timings`` (by benchmark name) allow, against the device's peaks.

    ``peak_flops`` [FLOP/s] and ``bandwidth`` [byte/s] of the device that ran them. A speed-up claim
    holds when the slower kernel's time over the faster one's is at least 1; a floor claim when the
    kernel's percentage of its roofline bound is at least the floor. Claims about a benchmark that was
    not timed are skipped.
    """
    found = []
    for slower, faster in speedups:
        if slower in timings and faster in timings:
            found.append(claim(f"{faster} is faster than {slower}",
                               timings[slower].seconds / timings[faster].seconds))
    for bench in benchmarks:
        if bench.floor is None or bench.name not in timings:
            continue
        t = timings[bench.name]
        bound = roofline_seconds(t.flops, t.compulsory_bytes, peak_flops, bandwidth)
        roof = "FP32 peak" if t.flops / peak_flops >= t.compulsory_bytes / bandwidth else "peak bandwidth"
        found.append(claim(f"{bench.name} reaches its roofline bound ({roof}) within its floor",
                           percent_of_bound(t.seconds, bound), at_least=bench.floor, unit="% of bound"))
    return found
