"""Schedules found by search against numpy, measured in the same run (Lab 9, ML compilation).

    python benchmarks/compiler.py [--quick] [--log tune.jsonl] [--max-seconds 0.1]

For float32 matmul n × n × n (n = 1024; 256 with --quick):

* model-guided search (AutoTVM's loop) over a pool of random configs of ``matmul_space``, 200
  measured trials (24 with --quick): the wall time it spent (code generation, Numba compilation,
  measurement) and the best config;
* GFLOP/s of numpy's ``A @ B`` (OpenBLAS), Lab 1's hand-written kernels (``mlsys_lib.tensor.matmul``),
  the lecture's steps written as schedules (naive i, j, k → reordered i, k, j → tiled: 4 × 64 tiles
  of C in a local buffer → vectorized → parallel) and the best config found, each with its ratio to
  numpy (targets: the best found at least 0.5× numpy, and faster than Lab 1's best);
* model-guided against random search, trials to reach 90% of the best speed, median over 5 seeds
  (target: model-guided in at most half the trials). Compiling costs about a second per config, so
  this comparison is a *replay*: a fixed random subset of the space is measured once into a table,
  and both searches run over that table for every seed (a trial is a table lookup);

and for conv2d (batch 8, 64 → 64 channels, 56 × 56 output, 3 × 3 kernel, input padded to 58 × 58;
smaller with --quick) the best config model-guided search finds in 24 trials (8 with --quick)
against numpy's im2col + GEMM (target: within 2×, a ratio of at least 0.5).

A time is the median of 5 runs after a warm-up (one run for a schedule whose first run takes longer
than --max-seconds: it is out of the race). The contenders of a comparison are measured in turn,
three rounds, the best round kept, so that a load on the machine that comes and goes hits them
alike. Every tuned kernel is checked against numpy first. With ``--log`` measurements are appended
to a tuning log and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import numpy as np

from mlsys_lib.compiler import build, create_schedule, ops, te
from mlsys_lib.compiler.features import features
from mlsys_lib.compiler.measure import TuningLog, config_key, make_arrays, measure
from mlsys_lib.compiler.space import Space, conv2d_space, matmul_space
from mlsys_lib.compiler.tuner import cost_model, model_guided_search, random_search, tune
from mlsys_lib.tensor.matmul import matmul_parallel, matmul_tiled

SEEDS = range(5)
BATCH = 4  # candidates measured between refits of the cost model (the first batch is random)


def conv2d_im2col(data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Valid conv2d, NCHW, as numpy's im2col + GEMM (Caffe's layout): the (c·kh·kw, oh·ow) matrix of
    every image's windows is copied out, then one batched ``weight (f, c·kh·kw) @ cols``."""
    n, c, h, w = data.shape
    f, _, kh, kw = weight.shape
    oh, ow = h - kh + 1, w - kw + 1
    windows = np.lib.stride_tricks.sliding_window_view(data, (kh, kw), axis=(2, 3))  # (n, c, oh, ow, kh, kw)
    cols = windows.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, oh * ow)  # the copy
    return np.matmul(weight.reshape(f, c * kh * kw), cols).reshape(n, f, oh, ow)


def lecture_steps(n: int) -> dict[str, Callable]:
    """The lecture's matmul schedules, each built on the previous one: name -> schedule."""
    def schedule(step: int):
        A, B = te.placeholder((n, n), "A"), te.placeholder((n, n), "B")
        C = ops.matmul(A, B)
        s = create_schedule(C)
        S = s[C]
        (i, j), (k,) = S.axis, S.reduce_axis
        if step == 1:
            S.reorder(i, k, j)
        if step >= 2:
            io, jo, ii, ji = S.tile(i, j, 4, 64)
            S.reorder(io, jo, k, ii, ji)
            S.cache_write(jo)
        if step >= 3:
            S.vectorize(ji)
        if step >= 4:
            S.parallel(io)
        return s
    return {name: (lambda step=step: schedule(step))
            for step, name in enumerate(["naive", "reordered", "tiled", "vectorized", "parallel"])}


def gflops(flops: int, seconds: float) -> float:
    return flops / seconds / 1e9


def trials_to_reach(history: list, seconds: float) -> int:
    """1 + the index of the first trial at most ``seconds`` long (len + 1 when none is)."""
    return next((t + 1 for t, (_, s) in enumerate(history) if s <= seconds), len(history) + 1)


def replay(space: Space, table: dict[str, float], configs: list[dict]) -> None:
    """Model-guided against random search over the measured ``table`` (config key -> seconds)."""
    vectors = {config_key(c): features(space.apply(c)[0]) for c in configs}
    lookup = lambda c: table[config_key(c)]  # noqa: E731
    target = min(table.values()) / 0.9
    print(f"\nreplay over a table of {len(table)} random configs measured once (best "
          f"{gflops(space.flops, min(table.values())):.1f} GFLOP/s); trials to reach 90% of it:")
    found = {"model-guided": [], "random": []}
    for seed in SEEDS:
        order = [configs[i] for i in np.random.default_rng(seed).permutation(len(configs))]
        guided = model_guided_search(order, lambda c: vectors[config_key(c)], lookup, cost_model(seed), len(order), BATCH)
        found["model-guided"].append(trials_to_reach(guided, target))
        found["random"].append(trials_to_reach(random_search(order, lookup, len(order)), target))
    for name, trials in found.items():
        print(f"{name:>14}: {' '.join(f'{t:4d}' for t in trials)}   median {np.median(trials):5.1f}")
    shuffles = np.random.default_rng(99)
    expected = np.mean([trials_to_reach(random_search([configs[i] for i in shuffles.permutation(len(configs))],
                                                      lookup, len(configs)), target) for _ in range(1000)])
    print(f"{'random':>14}: expected over 1000 shuffles {expected:.1f}")
    print(f"median trials model-guided / random: {np.median(found['model-guided']) / np.median(found['random']):.2f}"
          f"  (target: at most 0.5)")


def tune_best(space: Space, trials: int, pool: int, log: TuningLog | None, max_seconds: float) -> dict:
    """The fastest config model-guided search measures in ``trials``."""
    start = time.perf_counter()
    history = tune(space, "model", trials, seed=0, log=log, batch_size=BATCH, pool_size=pool, max_seconds=max_seconds)
    config, seconds = min(history, key=lambda h: h[1])
    print(f"model-guided search, {len(history)} trials from a pool of {pool}: {time.perf_counter() - start:.0f} s; "
          f"best {gflops(space.flops, seconds):.1f} GFLOP/s:\n    {json.dumps(config)}")
    return config


def check(space: Space, config: dict, reference: Callable) -> Callable:
    """The kernel of ``config``, compiled, once checked against ``reference`` on other inputs."""
    schedule, _ = space.apply(config)
    kernel = build(schedule).compile()
    arrays = make_arrays(schedule, seed=7)
    np.testing.assert_allclose(kernel(*arrays[:-1]), reference(*arrays[:-1]), rtol=1e-3, atol=1e-3)
    return kernel


def compare(contenders: dict[str, Callable[[], object]], flops: int, max_seconds: float, rounds: int = 3) -> dict:
    """GFLOP/s of each contender, measured in turn ``rounds`` times, the best round kept (each round
    a median of 5 runs): a load that comes and goes during the run slows some rounds of every
    contender rather than all the runs of the one measured at that moment."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            times[name].append(measure(run, [], max_seconds=max_seconds))
    return {name: gflops(flops, min(t)) for name, t in times.items()}


def matmul_section(n: int, trials: int, table_size: int, pool: int, log: TuningLog | None, max_seconds: float) -> None:
    space = matmul_space(n, n, n)
    A, B, C = make_arrays(space)
    print(f"float32 matmul n = {n}")
    config = tune_best(space, trials, pool, log, max_seconds)
    tuned = check(space, config, np.matmul)
    contenders = {"numpy (OpenBLAS)": lambda: np.matmul(A, B, out=C)}
    for name, fn in (("tiled", matmul_tiled), ("parallel", matmul_parallel)):
        check_lab1 = make_arrays(space, seed=7)[:2]
        np.testing.assert_allclose(fn(*check_lab1), np.matmul(*check_lab1), rtol=1e-3, atol=1e-3)
        contenders[f"Lab 1 {name}"] = lambda fn=fn: fn(A, B)
    for name, make in lecture_steps(n).items():
        contenders[f"step: {name}"] = lambda kernel=build(make()).compile(): kernel.run(A, B, C)
    contenders["tuned (best found)"] = lambda: tuned.run(A, B, C)
    rates = compare(contenders, space.flops, max_seconds)
    numpy, lab1 = rates["numpy (OpenBLAS)"], max(rates["Lab 1 tiled"], rates["Lab 1 parallel"])
    print(f"\n{'':>22}  GFLOP/s  x numpy  (measured in turn, best of 3 rounds)")
    for name, rate in rates.items():
        print(f"{name:>22}: {rate:7.1f}  {rate / numpy:7.2f}")
    best = rates["tuned (best found)"]
    print(f"tuned / numpy: {best / numpy:.2f} (target >= 0.5)   tuned / Lab 1's best: {best / lab1:.2f} (target > 1)")

    start = time.perf_counter()
    history = tune(space, "random", table_size, seed=1, log=log, pool_size=table_size, max_seconds=max_seconds)
    table = {config_key(c): seconds for c, seconds in history}
    print(f"\nmeasuring the table (random search, {table_size} trials): {time.perf_counter() - start:.0f} s")
    replay(space, table, [c for c, _ in history])


def conv2d_section(shape: tuple[int, ...], trials: int, pool: int, log: TuningLog | None, max_seconds: float) -> None:
    batch, channels, out_channels, size = shape
    space = conv2d_space(batch, channels, out_channels, size + 2, size + 2, 3)
    data, weight, out = make_arrays(space)
    print(f"\nconv2d: batch {batch}, {channels} -> {out_channels} channels, {size}x{size} output, 3x3 kernel")
    config = tune_best(space, trials, pool, log, max_seconds)
    tuned = check(space, config, conv2d_im2col)
    rates = compare({"numpy im2col + GEMM": lambda: conv2d_im2col(data, weight),
                     "tuned (best found)": lambda: tuned.run(data, weight, out)}, space.flops, max_seconds)
    for name, rate in rates.items():
        print(f"{name:>22}: {rate:7.1f} GFLOP/s")
    print(f"tuned / im2col + GEMM: {rates['tuned (best found)'] / rates['numpy im2col + GEMM']:.2f} (target >= 0.5)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few trials (a smoke run, ~1 min)")
    parser.add_argument("--log", help="tuning log (JSON lines) to append to and reuse")
    parser.add_argument("--max-seconds", type=float, default=0.1,
                        help="a first run slower than this is the schedule's time (no repeats)")
    args = parser.parse_args(argv)
    log = TuningLog(args.log) if args.log else None
    start, load = time.perf_counter(), os.getloadavg()[0]
    if args.quick:
        matmul_section(256, trials=24, table_size=24, pool=200, log=log, max_seconds=args.max_seconds)
        conv2d_section((1, 16, 16, 16), trials=8, pool=100, log=log, max_seconds=args.max_seconds)
    else:
        matmul_section(1024, trials=200, table_size=100, pool=2000, log=log, max_seconds=args.max_seconds)
        conv2d_section((8, 64, 64, 56), trials=24, pool=1000, log=log, max_seconds=args.max_seconds)
    print(f"\ntotal {time.perf_counter() - start:.0f} s; load average (1 min) at the start {load:.2f}, at the end "
          f"{os.getloadavg()[0]:.2f} (this run's own load is about 1-2 on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
