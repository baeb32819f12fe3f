"""mlsys_lib.llm.trace and .serving: traces, the roofline step cost by hand, schedules by hand, and the
simulator's promises (every token once, first come first served, memory within budget) checked from
its records by independent bookkeeping."""

import numpy as np
import pytest

from mlsys_lib.llm.paged import BlockAllocator, ContiguousAllocator
from mlsys_lib.llm.serving import StepCostModel, latency_vs_load, max_load_under, simulate
from mlsys_lib.llm.trace import (CHAT_OUTPUTS, CHAT_PROMPTS, Empirical, Lognormal, Request, backlog, bundled_trace,
                                 poisson_trace)

# 1e6 one-byte weights over 1 GB/s: 1 ms per iteration, 1 µs per KV token moved, compute negligible, 0.5 ms overhead:
# an iteration over k KV tokens (prefilled or read) lasts 1.5 ms + k µs.
SIMPLE = StepCostModel(peak_flops=1e15, mem_bandwidth=1e9, n_params=1e6, bytes_per_param=1,
                       kv_bytes_per_token=1e3, attention_flops_per_pair=0, overhead_s=0.5e-3)
# a 7B model in 16-bit on an 80 GB accelerator (312 TFLOP/s, 2 TB/s): 32 layers, 32 heads of 128
LARGE = StepCostModel(peak_flops=312e12, mem_bandwidth=2e12, n_params=6.7e9, bytes_per_param=2,
                      kv_bytes_per_token=2 * 32 * 32 * 128 * 2, attention_flops_per_pair=4 * 32 * 32 * 128,
                      overhead_s=1e-3)


def test_step_cost_is_the_roofline_of_the_batch():
    cost = StepCostModel(peak_flops=1e12, mem_bandwidth=1e11, n_params=1e8, bytes_per_param=2,
                         kv_bytes_per_token=1e4, attention_flops_per_pair=100, overhead_s=1e-3)
    # decode 3 sequences at contexts 10, 20, 30: 2e8 * 3 + 100 * 60 FLOPs; 2e8 + 1e4 * 60 bytes: memory-bound
    assert cost.flops([], [10, 20, 30]) == 6e8 + 6e3
    assert cost.bytes([], [10, 20, 30]) == 2e8 + 6e5
    assert cost.step_time([], [10, 20, 30]) == pytest.approx(1e-3 + 2.006e8 / 1e11)
    # prefill 1000 tokens: 2e11 + 100 * 1e6 FLOPs = 0.2001 s of compute; 2e8 + 1e7 bytes = 2.1 ms: compute-bound
    assert cost.step_time([1000], []) == pytest.approx(1e-3 + 2.001e11 / 1e12)
    with pytest.raises(ValueError, match="mem_bandwidth must be positive"):
        StepCostModel(1e12, 0, 1, 1, 1, 1)


def test_trace_is_deterministic_and_a_rate_only_rescales_arrivals():
    a, b = poisson_trace(50, rate=2.0, seed=3), poisson_trace(50, rate=2.0, seed=3)
    assert a == b and poisson_trace(50, rate=2.0, seed=4) != a
    fast = poisson_trace(50, rate=8.0, seed=3)
    assert [(r.prompt_len, r.output_len) for r in fast] == [(r.prompt_len, r.output_len) for r in a]
    np.testing.assert_allclose([r.arrival_time for r in fast], [r.arrival_time / 4 for r in a], rtol=1e-12)
    assert all(r.arrival_time == 0 for r in backlog(a)) and [r.prompt_len for r in backlog(a)] == [r.prompt_len for r in a]


def test_trace_statistics():
    trace = poisson_trace(20000, rate=5.0, seed=0, max_new_tokens=10**6)
    gaps = np.diff([0.0] + [r.arrival_time for r in trace])
    assert abs(gaps.mean() - 0.2) < 0.01 and abs(gaps.std() - 0.2) < 0.01, "exponential gaps of mean 1/rate"
    prompts = np.array([r.prompt_len for r in trace])
    outputs = np.array([r.output_len for r in trace])
    assert prompts.min() >= 4 and prompts.max() < 1536 and outputs.min() >= 1 and outputs.max() < 1024
    assert abs(prompts.mean() - CHAT_PROMPTS.mean) < 0.03 * CHAT_PROMPTS.mean
    assert abs(outputs.mean() - CHAT_OUTPUTS.mean) < 0.03 * CHAT_OUTPUTS.mean
    share = np.mean((prompts >= 128) & (prompts < 256))
    assert abs(share - 0.25) < 0.015, "a bin's share follows its weight"
    lengths = Lognormal(median=100, sigma=1.0, low=5, high=400).sample(20000, np.random.default_rng(0))
    assert lengths.min() == 5 and lengths.max() == 400 and abs(np.median(lengths) - 100) <= 3
    assert max(r.output_len for r in bundled_trace()) == 512, "outputs are clipped to max_new_tokens"


def test_bad_requests_and_histograms_are_rejected():
    with pytest.raises(ValueError, match="output_len <= max_new_tokens"):
        Request(0, 0.0, 5, 10, 8)
    with pytest.raises(ValueError, match="prompt_len"):
        Request(0, 0.0, 0, 1, 8)
    with pytest.raises(ValueError, match="increasing"):
        Empirical(edges=(1, 5, 5), weights=(1, 1))
    with pytest.raises(ValueError, match="rate must be positive"):
        poisson_trace(5, rate=0)


def test_static_batch_of_one_follows_the_hand_computed_schedule():
    requests = [Request(0, 0.0, 4, 3, 3), Request(1, 0.001, 2, 1, 2), Request(2, 10.0, 5, 2, 4)]
    result = simulate(requests, SIMPLE, BlockAllocator(8, 4), "static", max_batch=1)
    ms = 1e-3
    expected = [
        # request 0: prefill 4 tokens (1.504 ms), decode at contexts 5 and 6
        [1.504 * ms, (1.504 + 1.505) * ms, (1.504 + 1.505 + 1.506) * ms],
        # request 1 waits for request 0 to finish: prefill 2 tokens
        [(4.515 + 1.502) * ms],
        # request 2 arrives to an idle server: prefill 5, decode at context 6
        [10 + 1.505 * ms, 10 + (1.505 + 1.506) * ms],
    ]
    for record, times in zip(result.records, expected):
        np.testing.assert_allclose(record.token_times, times, rtol=1e-12)
    assert result.records[1].ttft == pytest.approx(6.017 * ms - 0.001)
    assert [e.kind for e in result.events] == ["admit", "finish", "admit", "finish", "admit", "finish"]


def test_continuous_batching_lets_a_new_request_join_the_next_iteration():
    requests = [Request(0, 0.0, 4, 3, 3), Request(1, 0.001, 2, 2, 2)]
    continuous = simulate(requests, SIMPLE, BlockAllocator(8, 4), "continuous")
    ms = 1e-3
    # iteration 1: prefill request 0 (4 tokens); 2: prefill request 1 (2) + decode 0 at context 5;
    # 3: decode 0 at context 6 and 1 at context 3
    t1, t2 = 1.504 * ms, (1.504 + 1.507) * ms
    t3 = t2 + 1.509 * ms
    np.testing.assert_allclose(continuous.records[0].token_times, [t1, t2, t3], rtol=1e-12)
    np.testing.assert_allclose(continuous.records[1].token_times, [t2, t3], rtol=1e-12)
    static = simulate(requests, SIMPLE, BlockAllocator(8, 4), "static")
    assert static.records[1].first_token_time > static.records[0].finish_time, "static: it waits for the batch"


def _resident_kv_tokens(result, step):
    """KV tokens held during ``step``, rebuilt from events and token times alone: a request holds memory
    from its admit/resume/swap_in to its preempt/swap_out/finish, and then prompt + tokens generated so far."""
    holding, total = {}, 0
    for event in result.events:
        if event.time > step.start:
            break
        holding[event.request_id] = event.kind in ("admit", "resume", "swap_in")
    for record in result.records:
        if holding.get(record.request.request_id):
            total += record.request.prompt_len + sum(t <= step.start for t in record.token_times)
    return total, sum(holding.values())


def _check_promises(requests, result, capacity, block_size):
    # every request finishes, each of its tokens generated once, in order, after it arrived
    records = {r.request.request_id: r for r in result.records}
    assert sorted(records) == sorted(r.request_id for r in requests)
    for req in requests:
        times = records[req.request_id].token_times
        assert len(times) == req.output_len and np.all(np.diff(times) > 0) and times[0] > req.arrival_time
    # iterations do not overlap; each one's sequences generate one token each
    for a, b in zip(result.steps, result.steps[1:]):
        assert b.start >= a.start + a.duration * (1 - 1e-12)
    produced = sum(s.prefill_seqs + s.decode_seqs for s in result.steps)
    assert produced == sum(r.output_len for r in requests)
    # first come, first served: first admissions in arrival order; no newcomer while a preempted one waits
    order = sorted(requests, key=lambda r: (r.arrival_time, r.request_id))
    assert [e.request_id for e in result.events if e.kind == "admit"] == [r.request_id for r in order]
    waiting_preempted, holding = set(), []  # holding: in order of (re)admission
    for event in result.events:
        if event.kind in ("preempt", "swap_out"):
            assert event.request_id == holding.pop(), "the victim is the most recently admitted"
            waiting_preempted.add(event.request_id)
        elif event.kind in ("resume", "swap_in"):
            waiting_preempted.remove(event.request_id)
        elif event.kind == "admit":
            assert not waiting_preempted, f"request {event.request_id} admitted before preempted {waiting_preempted}"
        if event.kind in ("admit", "resume", "swap_in"):
            holding.append(event.request_id)
        elif event.kind == "finish":
            holding.remove(event.request_id)
    # KV memory, rebuilt independently, matches the allocator's count and stays in the budget
    for step in result.steps:
        tokens, running = _resident_kv_tokens(result, step)
        assert (step.memory.used, step.running) == (tokens, running)
        assert step.memory.used + step.memory.internal <= capacity
        assert step.memory.internal <= (block_size - 1) * running


def _tight_trace(n=40, seed=1):
    return poisson_trace(n, rate=400.0, seed=seed, prompt=Lognormal(20, 0.6, 2, 60),
                         output=Lognormal(20, 0.8, 1, 60), max_new_tokens=60)


@pytest.mark.parametrize("seed, block_size", [(1, 4), (6, 1), (7, 16)])
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_continuous_batching_keeps_its_promises_under_memory_pressure(preemption, seed, block_size):
    requests = _tight_trace(seed=seed)
    alloc = BlockAllocator(num_blocks=160 // block_size, block_size=block_size)
    result = simulate(requests, SIMPLE, alloc, "continuous", preemption=preemption)
    _check_promises(requests, result, capacity=160, block_size=block_size)
    assert alloc.num_free_blocks == alloc.num_blocks and alloc.sequences == [], "every block returned"
    kinds = {e.kind for e in result.events}
    prompts = sum(r.prompt_len for r in requests)
    prefilled = sum(s.prefill_tokens for s in result.steps)
    if preemption == "swap":
        assert "swap_out" in kinds and "preempt" not in kinds
        assert prefilled == prompts, "a swapped sequence is never prefilled again"
    else:
        assert "preempt" in kinds and "swap_out" not in kinds
        # a recomputed sequence prefills its prompt again and the tokens it had generated when preempted
        records = {r.request.request_id: r for r in result.records}
        redone = sum(records[e.request_id].request.prompt_len
                     + sum(t <= e.time for t in records[e.request_id].token_times)
                     for e in result.events if e.kind == "preempt")
        assert prefilled == prompts + redone


def test_swap_falls_back_to_recompute_when_the_cpu_pool_is_full():
    requests = _tight_trace(seed=2)
    result = simulate(requests, SIMPLE, BlockAllocator(40, 4), "continuous", preemption="swap", swap_space_tokens=30)
    _check_promises(requests, result, capacity=160, block_size=4)
    assert {"swap_out", "preempt"} <= {e.kind for e in result.events}
    assert max(s.swapped_tokens for s in result.steps) <= 30


def test_swapping_costs_its_transfer_time():
    requests = _tight_trace(seed=3)
    fast, slow = (simulate(requests, SIMPLE, BlockAllocator(40, 4), "continuous", preemption="swap",
                           swap_bandwidth=bandwidth) for bandwidth in (1e15, 1e6))
    moved = sum(1 for e in slow.events if e.kind in ("swap_out", "swap_in"))
    assert moved > 0 and slow.metrics().duration > fast.metrics().duration


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_both_policies_keep_their_promises_on_a_contiguous_arena(policy):
    requests = _tight_trace(seed=4)
    arena = ContiguousAllocator(capacity_tokens=300, max_seq_len=120, reserve="max_tokens")
    result = simulate(requests, SIMPLE, arena, policy)
    _check_promises(requests, result, capacity=300, block_size=10**9)
    assert all(s.memory.internal >= 0 for s in result.steps) and arena.sequences == []
    assert result.metrics().preemptions == 0, "a reservation never runs out"


def test_static_batching_reserves_the_worst_case_and_waits_for_the_whole_batch():
    requests = _tight_trace(seed=5)
    result = simulate(requests, SIMPLE, BlockAllocator(40, 4), "static", max_batch=64)
    _check_promises(requests, result, capacity=160, block_size=4)
    by_id = {r.request.request_id: r for r in result.records}
    batches = {}
    for event in result.events:
        if event.kind == "admit":
            batches.setdefault(event.time, []).append(by_id[event.request_id])
    assert len(batches) > 1
    previous_end = 0.0
    for start, batch in sorted(batches.items()):
        worst_slots = sum(-(-(r.request.prompt_len + r.request.max_new_tokens - 1) // 4) * 4 for r in batch)
        assert worst_slots <= 160 and start >= previous_end
        previous_end = max(r.finish_time for r in batch)
    assert result.metrics().preemptions == 0


def test_continuous_batching_beats_static_on_the_bundled_trace():
    requests = bundled_trace(rate=8.0, n_requests=120)
    static, continuous = (simulate(requests, LARGE, BlockAllocator(1024, 16), policy).metrics()
                          for policy in ("static", "continuous"))
    assert continuous.throughput >= static.throughput
    assert continuous.ttft_p99 < static.ttft_p99 and continuous.mean_running > static.mean_running


def test_metrics_by_hand():
    requests = [Request(0, 0.0, 4, 3, 3), Request(1, 0.001, 2, 1, 2), Request(2, 10.0, 5, 2, 4)]
    metrics = simulate(requests, SIMPLE, BlockAllocator(8, 4), "static", max_batch=1).metrics()
    ms = 1e-3
    ttfts = [1.504 * ms, 6.017 * ms - 0.001, 1.505 * ms]
    assert metrics.output_tokens == 6 and metrics.duration == pytest.approx(10 + 3.011 * ms)
    assert metrics.throughput == pytest.approx(6 / (10 + 3.011 * ms))
    assert metrics.ttft_p50 == pytest.approx(np.percentile(ttfts, 50))
    assert metrics.ttft_p99 == pytest.approx(np.percentile(ttfts, 99))
    assert metrics.tpot_p50 == pytest.approx(np.median([3.011 * ms / 2, 1.506 * ms])), "one-token outputs have no TPOT"
    assert metrics.peak_running == 1 and metrics.mean_running == 1.0


def test_simulate_rejects_what_it_cannot_serve():
    too_long = [Request(0, 0.0, 30, 5, 5)]
    with pytest.raises(ValueError, match="may hold 34 KV tokens, more than the memory \\(32 slots\\)"):
        simulate(too_long, SIMPLE, BlockAllocator(8, 4))
    alloc = BlockAllocator(8, 4)
    alloc.allocate("x", 1)
    with pytest.raises(ValueError, match="must be empty"):
        simulate([Request(0, 0.0, 1, 1, 1)], SIMPLE, alloc)
    with pytest.raises(ValueError, match="policy must be"):
        simulate([Request(0, 0.0, 1, 1, 1)], SIMPLE, BlockAllocator(8, 4), "dynamic")


def test_latency_vs_load_and_the_highest_load_under_a_bound():
    rates = [1.0, 4.0, 16.0]
    curves = latency_vs_load(rates, SIMPLE, lambda: BlockAllocator(40, 4),
                             {"static": {"policy": "static", "max_batch": 2}, "continuous": {}},
                             make_trace=lambda rate: poisson_trace(30, rate, seed=0, prompt=Lognormal(10, 0.5, 2, 30),
                                                                   output=Lognormal(10, 0.5, 1, 30), max_new_tokens=30))
    assert set(curves) == {"static", "continuous"}
    for curve in curves.values():
        assert curve["rate"].tolist() == rates and curve["ttft_p99"].shape == (3,)
        assert np.all(curve["output_tokens"] == curve["output_tokens"][0])
    curve = {"rate": np.array([1.0, 2.0, 3.0, 4.0]), "latency_p99": np.array([1.0, 2.0, 5.0, 1.5])}
    assert max_load_under(curve, "latency_p99", 2.0) == 1, "the prefix up to the first miss"
    assert max_load_under(curve, "latency_p99", 9.0) == 3
    assert max_load_under(curve, "latency_p99", 0.5) is None


def test_paged_memory_runs_more_sequences_than_contiguous_reservations():
    """The replay of the benchmark on 100 requests of the bundled trace, all waiting at t = 0, 16,384 slots."""
    requests = backlog(bundled_trace(n_requests=100))
    runs = {name: simulate(requests, LARGE, make()) for name, make in
            (("paged", lambda: BlockAllocator(1024, 16)),
             ("max_seq_len", lambda: ContiguousAllocator(16384, 2048)),
             ("per request", lambda: ContiguousAllocator(16384, 2048, reserve="max_tokens")))}
    running = {name: result.metrics().mean_running for name, result in runs.items()}
    assert running["paged"] >= 2 * running["max_seq_len"] and running["paged"] >= 2 * running["per request"]
    assert all(s.memory.external == 0 for s in runs["paged"].steps + runs["max_seq_len"].steps), \
        "equal reservations (or blocks) leave no unusable gaps"
    assert max(s.memory.external for s in runs["per request"].steps) > 0
