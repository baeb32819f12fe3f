"""Paged against contiguous KV memory, continuous against static batching, on the bundled trace (Lab 10).

    python benchmarks/llm_serving.py [--quick]

Everything is simulated (``mlsys_lib.llm.serving``): a 7B-parameter decoder (32 layers, 32 heads of 128,
16-bit weights and KV: 0.5 MiB of KV per token) on one 80 GB accelerator of 312 TFLOP/s and 2 TB/s, an
iteration timed by its roofline plus 1 ms of overhead, and 8 GiB of KV memory (16,384 token slots).
The trace is ``bundled_trace()``: 400 requests with chat-shaped prompt and output lengths (at most 512
new tokens, max_seq_len 2048).

1. **Concurrent sequences at equal memory** (target: paged >= 2x contiguous). The 400 requests all wait
   at time 0 (a backlog: memory, not load, limits how many run) and are served by continuous batching
   on 1,024 blocks of 16 slots, then on a 16,384-slot contiguous arena reserving max_seq_len per
   sequence, then reserving prompt + max_new_tokens per sequence. Reported: sequences holding memory
   (time-average and peak), throughput, preemptions, and the time-average share of memory wasted inside
   reservations (internal) and in free runs too short for the next request (external).
2. **Throughput at equal p99 latency** (target: continuous >= 2x static). Each policy serves the trace
   at arrival rates 0.5, 1, 1.5, ... requests/s (0.5 apart to 6, 1 apart to 20, 2 apart to 30); the
   rate it *sustains* is the highest one before the first rate whose p99 end-to-end latency (arrival
   to last token) exceeds 10 s; the throughput it achieves there (output tokens/s) is compared. Static batching gets its best batch size of 4, 8, 16 and unlimited (memory then bounds
   the batch: the worst cases of its requests must fit together). The p99 time to first token is
   printed too: static batching misses any bound of a few seconds at every load (a request arriving
   during a batch waits for all of it), so it is no basis for a ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mlsys_lib.llm.paged import BlockAllocator, ContiguousAllocator
from mlsys_lib.llm.serving import StepCostModel, latency_vs_load, max_load_under, simulate
from mlsys_lib.llm.trace import backlog, bundled_trace

N_LAYERS, N_HEADS, HEAD_DIM, BYTES = 32, 32, 128, 2
COST = StepCostModel(peak_flops=312e12, mem_bandwidth=2.0e12, n_params=6.7e9, bytes_per_param=BYTES,
                     kv_bytes_per_token=2 * N_LAYERS * N_HEADS * HEAD_DIM * BYTES,
                     attention_flops_per_pair=4 * N_LAYERS * N_HEADS * HEAD_DIM, overhead_s=1e-3)
SLOTS, BLOCK_SIZE, MAX_SEQ_LEN = 16384, 16, 2048
LATENCY_BOUND_S = 10.0


def paged() -> BlockAllocator:
    return BlockAllocator(SLOTS // BLOCK_SIZE, BLOCK_SIZE)


def concurrency_section(n_requests: int) -> None:
    requests = backlog(bundled_trace(n_requests=n_requests))
    print(f"1. concurrent sequences, {n_requests} requests waiting at t = 0, continuous batching, "
          f"{SLOTS} KV slots ({SLOTS * COST.kv_bytes_per_token / 2**30:.0f} GiB)")
    allocators = {f"paged ({BLOCK_SIZE}-token blocks)": paged,
                  "contiguous, reserve max_seq_len": lambda: ContiguousAllocator(SLOTS, MAX_SEQ_LEN),
                  "contiguous, reserve prompt+max_new": lambda: ContiguousAllocator(SLOTS, MAX_SEQ_LEN, "max_tokens")}
    print(f"{'':>36} {'mean seqs':>9} {'peak':>5} {'tokens/s':>9} {'preempt':>8} {'internal':>9} {'external':>9}")
    mean = {}
    for name, make in allocators.items():
        result = simulate(requests, COST, make())
        m = result.metrics()
        weights = np.array([s.duration for s in result.steps])
        internal, external = (weights @ np.array([getattr(s.memory, part) / s.memory.capacity for s in result.steps])
                              / weights.sum() for part in ("internal", "external"))
        per_sequence = np.array([s.memory.internal / s.running for s in result.steps])
        note = (f"  (empty slots per sequence: mean {weights @ per_sequence / weights.sum():.1f}, at most "
                f"{per_sequence.max():.1f}; bound {BLOCK_SIZE - 1})" if name.startswith("paged") else "")
        print(f"{name:>36} {m.mean_running:9.1f} {m.peak_running:5d} {m.throughput:9.0f} {m.preemptions:8d} "
              f"{internal:9.1%} {external:9.1%}{note}")
        mean[name] = m.mean_running, m.peak_running
    names = list(allocators)
    for contiguous in names[1:]:
        print(f"paged / {contiguous}: {mean[names[0]][0] / mean[contiguous][0]:.2f}x mean, "
              f"{mean[names[0]][1] / mean[contiguous][1]:.2f}x peak (target >= 2)")


def load_section(n_requests: int, rates: list[float]) -> None:
    print(f"\n2. throughput at equal p99 latency: {n_requests} Poisson requests at rates "
          f"{rates[0]:g}..{rates[-1]:g} requests/s, {SLOTS} KV slots in {BLOCK_SIZE}-token blocks")
    policies = {f"static B={b}": {"policy": "static", "max_batch": b} for b in (4, 8, 16)}
    policies["static B=any"] = {"policy": "static"}
    policies["cont. recompute"] = {"policy": "continuous", "preemption": "recompute"}
    policies["cont. swap"] = {"policy": "continuous", "preemption": "swap"}
    curves = latency_vs_load(rates, COST, paged, policies, lambda rate: bundled_trace(rate, n_requests))
    for metric, label, style in (("latency_p99", "p99 latency [s]", "{:>15.1f}"),
                                 ("throughput", "tokens/s", "{:>15.0f}")):
        print(f"\n{label} by arrival rate [requests/s]\n{'rate':>5} " + " ".join(f"{name:>15}" for name in curves))
        for i, rate in enumerate(rates):
            print(f"{rate:>5g} " + " ".join(style.format(curve[metric][i]) for curve in curves.values()))
    print(f"\np99 latency <= {LATENCY_BOUND_S:g} s: the highest rate sustained and the throughput there")
    best = {}
    for name, curve in curves.items():
        at = max_load_under(curve, "latency_p99", LATENCY_BOUND_S)
        if at is None:
            print(f"{name:>15}: misses the bound at every rate")
            continue
        best[name] = curve["rate"][at], curve["throughput"][at]
        print(f"{name:>15}: {best[name][0]:5g} requests/s {best[name][1]:7.0f} tokens/s, p99 TTFT "
              f"{curve['ttft_p99'][at]:.1f} s, p99 TPOT {1e3 * curve['tpot_p99'][at]:.1f} ms")
    static = max((throughput for name, (_, throughput) in best.items() if name.startswith("static")), default=0.0)
    for name in ("cont. recompute", "cont. swap"):
        if not static or name not in best:
            print(f"{name} / best static: no ratio (a policy misses the bound at every rate)")
            continue
        edge = " (at the sweep's highest rate: a lower bound)" if best[name][0] == rates[-1] else ""
        print(f"{name} / best static: {best[name][1] / static:.2f}x{edge} (target >= 2)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests and rates (a smoke run)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.quick:
        concurrency_section(100)
        load_section(100, [1.0, 2.0, 4.0, 8.0, 16.0])
    else:
        concurrency_section(400)
        rates = [r / 2 for r in range(1, 13)] + [float(r) for r in range(7, 21)] + [float(r) for r in range(22, 31, 2)]
        load_section(400, rates)
    print(f"\ntotal {time.perf_counter() - start:.0f} s of wall time (the figures are simulated: they do not depend on "
          "this machine)")


if __name__ == "__main__":
    main()
