"""Template search spaces: an operator's schedule as a function of a few knobs (AutoTVM's templates).

A :class:`Space` has ``knobs`` (name -> list of values); a *config* picks one value per knob, as a
plain dict of JSON values (ints, strings, bools), so that it round-trips a tuning log. Every config
of a space is a legal schedule: the templates only offer choices the schedule primitives accept.

- :func:`matmul_space`: tiles of i, j and k, the loop order, cache_write, vectorize, parallel and
  unrolling of the inner i loop;
- :func:`conv2d_space`: tiles of the output channels, rows and columns, the order of the outer loops
  and of the reduction loops, and the same four annotations.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import ops
from .expr import Tensor, placeholder
from .schedule import Schedule, Stage, create_schedule

#: Loop orders of the tiled matmul (``io, ii``: rows, ``jo, ji``: columns, ``ko, ki``: reduction).
MATMUL_ORDERS = ("io jo ko ki ii ji", "io jo ko ii ki ji", "io jo ii ko ki ji", "io ko jo ki ii ji",
                 "jo io ko ki ii ji")
#: Orders of the conv2d loops outside the reduction, and of the reduction loops.
CONV2D_OUTER_ORDERS = ("b oo yo xo", "b yo oo xo", "oo b yo xo")
CONV2D_REDUCE_ORDERS = ("rc ry rx", "ry rx rc")
#: A space larger than this is not listed by :meth:`Space.configs`.
MAX_LISTED = 100_000


@dataclass(eq=False)
class Space:
    """The configs of one operator instance: ``task`` names it in a tuning log, ``flops`` is the
    floating-point operations of one run (for GFLOP/s), ``build(config)`` makes the schedule."""
    task: str
    knobs: dict[str, list]
    build: Callable[[dict], Schedule]
    flops: int

    def __len__(self) -> int:
        return math.prod(len(values) for values in self.knobs.values())

    def check(self, config: dict) -> dict:
        """``config`` itself, or ValueError naming a knob that is missing, unknown or off its list."""
        if not isinstance(config, dict):
            raise TypeError(f"{self.task}: a config is a dict of knob values, got {type(config).__name__}")
        if set(config) != set(self.knobs):
            raise ValueError(f"{self.task}: config knobs {sorted(config)} differ from the space's {sorted(self.knobs)}")
        for name, value in config.items():
            if not any(value == v and type(value) is type(v) for v in self.knobs[name]):
                raise ValueError(f"{self.task}: knob {name}={value!r} is not one of {self.knobs[name]}")
        return config

    def sample(self, rng: np.random.Generator) -> dict:
        """A config drawn uniformly."""
        return {name: values[rng.integers(len(values))] for name, values in self.knobs.items()}

    def mutate(self, config: dict, rng: np.random.Generator) -> dict:
        """A copy of ``config`` with one knob (among those with a choice) set to another value."""
        self.check(config)
        free = [name for name, values in self.knobs.items() if len(values) > 1]
        if not free:
            raise ValueError(f"{self.task}: the space has one config; there is nothing to mutate")
        name = free[rng.integers(len(free))]
        others = [v for v in self.knobs[name] if v != config[name]]
        return {**config, name: others[rng.integers(len(others))]}

    def configs(self) -> list[dict]:
        """Every config, in knob order (refused for spaces of more than MAX_LISTED)."""
        if len(self) > MAX_LISTED:
            raise ValueError(f"{self.task}: {len(self)} configs are too many to list; sample() them")
        names = list(self.knobs)
        return [dict(zip(names, values)) for values in itertools.product(*self.knobs.values())]

    def apply(self, config: dict) -> tuple[Schedule, list[Tensor]]:
        """The schedule of ``config`` and the kernel's arguments (inputs, then outputs) as tensors."""
        schedule = self.build(self.check(config))
        return schedule, schedule.inputs + schedule.outputs


def tile_sizes(extent: int, smallest: int, largest: int) -> list[int]:
    """Powers of two and divisors of ``extent`` in ``[smallest, min(largest, extent)]`` (``[extent]``
    when there are none): tiles that divide and tiles that leave a tail."""
    top = min(largest, extent)
    sizes = {p for p in (2 ** e for e in range(top.bit_length())) if smallest <= p <= top}
    sizes |= {d for d in range(smallest, top + 1) if extent % d == 0}
    return sorted(sizes) or [extent]


def _annotate(stage: Stage, config: dict, unrolled: str) -> None:
    """cache_write at the innermost loop outside every reduction loop, parallel on the outermost,
    vectorize on the innermost, unroll ``unrolled``, as ``config`` says."""
    leaves = stage.leaves
    first_reduce = next(p for p, loop in enumerate(leaves) if loop.kind == "reduce")
    if config["cache_write"]:
        stage.cache_write(leaves[first_reduce - 1])
    if config["parallel"]:
        stage.parallel(leaves[0])
    if config["vectorize"]:
        stage.vectorize(leaves[-1])
    if config["unroll"]:
        stage.unroll(stage.loop(unrolled))


_SWITCHES = {"cache_write": [False, True], "vectorize": [False, True], "parallel": [False, True],
             "unroll": [False, True]}


def _positive(what: str, **sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{what}: {name} must be a positive int, got {value!r}")


def matmul_space(n: int, m: int, k: int, dtype: str = "float32") -> Space:
    """``C (n, m) = A (n, k) @ B (k, m)``: C tiled ``tile_i × tile_j``, the reduction in chunks of
    ``tile_k``, the six loops in one of :data:`MATMUL_ORDERS` (``ji`` always innermost),
    cache_write / vectorize / parallel / unroll of ``ii`` on or off. ``tile_i`` stops at 8: unrolled
    16 times, the body took LLVM over a minute to compile, and compile time is tuning time."""
    _positive("matmul_space", n=n, m=m, k=k)
    knobs = {"tile_i": tile_sizes(n, 1, 8), "tile_j": tile_sizes(m, 4, 256), "tile_k": tile_sizes(k, 8, 1024),
             "order": list(MATMUL_ORDERS), **_SWITCHES}

    def build(config: dict) -> Schedule:
        A, B = placeholder((n, k), "A", dtype), placeholder((k, m), "B", dtype)
        C = ops.matmul(A, B)
        s = create_schedule(C)
        S = s[C]
        (i, j), (r,) = S.axis, S.reduce_axis
        S.split(i, config["tile_i"])
        S.split(j, config["tile_j"])
        S.split(r, config["tile_k"])
        S.reorder(*(S.loop(name) for name in config["order"].split()))
        _annotate(S, config, "ii")
        return s

    return Space(f"matmul_{n}x{m}x{k}_{dtype}", knobs, build, 2 * n * m * k)


def conv2d_space(batch: int, in_channels: int, out_channels: int, height: int, width: int,
                 kernel: int = 3, dtype: str = "float32") -> Space:
    """Valid conv2d, NCHW: data (batch, in_channels, height, width), weight (out_channels,
    in_channels, kernel, kernel). Output channels, rows and columns are tiled ``tile_o × tile_y ×
    tile_x`` (the tile innermost: ``oi yi xi``), outside it the loops in one of
    :data:`CONV2D_OUTER_ORDERS` then the reduction in one of :data:`CONV2D_REDUCE_ORDERS`;
    cache_write / vectorize / parallel / unroll of ``oi`` on or off. ``tile_o`` stops at 8 (as
    ``tile_i`` does in :func:`matmul_space`) and ``tile_y`` at 2: some 4-row tiles of a 56-wide
    image took LLVM 90 s to compile. Pad the input beforehand for a "same" convolution."""
    _positive("conv2d_space", batch=batch, in_channels=in_channels, out_channels=out_channels,
              height=height, width=width, kernel=kernel)
    if kernel > min(height, width):
        raise ValueError(f"conv2d_space: kernel {kernel} is larger than the image {height}×{width}")
    oh, ow = height - kernel + 1, width - kernel + 1
    knobs = {"tile_o": tile_sizes(out_channels, 1, 8), "tile_y": tile_sizes(oh, 1, 2),
             "tile_x": tile_sizes(ow, 4, 64), "outer_order": list(CONV2D_OUTER_ORDERS),
             "reduce_order": list(CONV2D_REDUCE_ORDERS), **_SWITCHES}

    def build(config: dict) -> Schedule:
        data = placeholder((batch, in_channels, height, width), "data", dtype)
        weight = placeholder((out_channels, in_channels, kernel, kernel), "weight", dtype)
        out = ops.conv2d(data, weight)
        s = create_schedule(out)
        S = s[out]
        _, o, y, x = S.axis
        S.split(o, config["tile_o"])
        S.split(y, config["tile_y"])
        S.split(x, config["tile_x"])
        order = f"{config['outer_order']} {config['reduce_order']} oi yi xi"
        S.reorder(*(S.loop(name) for name in order.split()))
        _annotate(S, config, "oi")
        return s

    flops = 2 * batch * out_channels * oh * ow * in_channels * kernel * kernel
    return Space(f"conv2d_{batch}x{in_channels}x{height}x{width}_{out_channels}x{kernel}x{kernel}_{dtype}",
                 knobs, build, flops)
