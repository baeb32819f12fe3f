"""A discrete-event LLM serving simulator: static against continuous (iteration-level) batching.

Time advances one *iteration* (one forward pass of the model over a batch) at a time. An iteration
prefills some sequences (all of their known tokens: the prompt, and after a preemption by recompute the
tokens generated so far) and decodes others (one token each); each sequence in it produces one new
token at the end of the iteration. Its duration comes from :class:`StepCostModel`, the roofline of that
batch: ``max(FLOPs / peak, bytes / bandwidth) + overhead``.

KV memory. A sequence that has generated g of its tokens holds the K and V of ``prompt_len + g - 1``
tokens after an iteration (the newest token's K and V are written when it is processed, in the next
iteration): a decode takes one more slot first. Memory comes from a :class:`~.paged.BlockAllocator` (or
a :class:`~.paged.ContiguousAllocator`, which reserves a request's most tokens up front); it is never
exceeded.

Policies (the scheduler of vLLM, Orca's iteration-level batching):

* ``"static"``: when nothing runs, take up to ``max_batch`` waiting requests (first come, first served)
  whose *worst case* (``prompt_len + max_new_tokens - 1`` tokens each; the server does not know
  ``output_len``) fits in memory together, prefill them in one iteration and decode them until every
  one has finished; requests arriving meanwhile wait.
* ``"continuous"``: every iteration, first give each running sequence its slot for the next token,
  oldest first; when memory runs out, *preempt* the most recently admitted running sequence: with
  ``"recompute"`` its blocks are freed and it is prefilled again later, with ``"swap"`` its KV tokens
  move to a CPU pool of ``swap_space_tokens`` at ``swap_bandwidth`` bytes/s (recompute when the pool is
  full) and move back later. Then admit from the queue in arrival order (a preempted request goes back
  to its front) while the head fits in memory and fewer than ``max_batch`` run: the head never waits
  for a later request (no starvation). A sequence preempted in this iteration cannot fit again in it
  (it was preempted because memory ran out), so it does not thrash.

:func:`simulate` returns per-request records (arrival, first token, finish, every token's time), per-
iteration records (memory, batch) and events; :meth:`SimulationResult.metrics` the throughput and the
TTFT / TPOT / latency percentiles; :func:`latency_vs_load` the curves against arrival rate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .paged import BlockAllocator, ContiguousAllocator, Fragmentation, fragmentation
from .trace import Request, bundled_trace

__all__ = ["StepCostModel", "RequestRecord", "StepRecord", "Event", "ServingMetrics", "SimulationResult",
           "simulate", "latency_vs_load", "max_load_under"]

Allocator = BlockAllocator | ContiguousAllocator


@dataclass(frozen=True)
class StepCostModel:
    """The time of one iteration from the roofline of a decoder-only transformer on one accelerator.

    ``peak_flops`` [FLOP/s], ``mem_bandwidth`` [byte/s]; ``n_params`` weights in the matmuls (2 FLOPs per
    weight per token; all ``n_params * bytes_per_param`` bytes are read once per iteration);
    ``kv_bytes_per_token`` [byte], K and V of one token over all layers (2 · n_layers · n_kv_heads ·
    head_dim · bytes per value); ``attention_flops_per_pair`` [FLOP], the score and P·V matmuls of one
    query against one key over all layers (4 · n_layers · n_heads · head_dim, counted dense);
    ``overhead_s`` [s], a fixed cost per iteration (launches, scheduling).
    """

    peak_flops: float
    mem_bandwidth: float
    n_params: float
    bytes_per_param: float
    kv_bytes_per_token: float
    attention_flops_per_pair: float
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("peak_flops", "mem_bandwidth", "n_params", "bytes_per_param"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("kv_bytes_per_token", "attention_flops_per_pair", "overhead_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}")

    def flops(self, prefill_lens: Sequence[int], decode_contexts: Sequence[int]) -> float:
        """FLOPs of an iteration prefilling sequences of ``prefill_lens`` tokens (each attending to itself,
        L² pairs) and decoding one token for each of ``decode_contexts`` (attending to c tokens)."""
        tokens = sum(prefill_lens) + len(decode_contexts)
        pairs = sum(n * n for n in prefill_lens) + sum(decode_contexts)
        return 2 * self.n_params * tokens + self.attention_flops_per_pair * pairs

    def bytes(self, prefill_lens: Sequence[int], decode_contexts: Sequence[int]) -> float:
        """Bytes an iteration moves: the weights once, the K and V a prefill writes, those a decode reads."""
        kv_tokens = sum(prefill_lens) + sum(decode_contexts)
        return self.n_params * self.bytes_per_param + self.kv_bytes_per_token * kv_tokens

    def step_time(self, prefill_lens: Sequence[int], decode_contexts: Sequence[int]) -> float:
        """Seconds of the iteration: ``max(flops / peak_flops, bytes / mem_bandwidth) + overhead_s``."""
        compute = self.flops(prefill_lens, decode_contexts) / self.peak_flops
        memory = self.bytes(prefill_lens, decode_contexts) / self.mem_bandwidth
        return max(compute, memory) + self.overhead_s


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request: ``token_times`` [s], when each of its tokens was generated."""

    request: Request
    token_times: tuple[float, ...]
    preemptions: int

    @property
    def first_token_time(self) -> float:
        return self.token_times[0]

    @property
    def finish_time(self) -> float:
        return self.token_times[-1]

    @property
    def ttft(self) -> float:
        """Time to first token [s], from arrival."""
        return self.first_token_time - self.request.arrival_time

    @property
    def latency(self) -> float:
        """End-to-end latency [s], arrival to last token."""
        return self.finish_time - self.request.arrival_time

    @property
    def tpot(self) -> float:
        """Time per output token after the first [s]; NaN for a one-token output."""
        n = len(self.token_times)
        return (self.finish_time - self.first_token_time) / (n - 1) if n > 1 else float("nan")


@dataclass(frozen=True)
class StepRecord:
    """One iteration: it starts at ``start`` [s] and lasts ``duration`` [s] (swap transfers included);
    ``prefill_seqs`` sequences prefilled, ``prefill_tokens`` tokens in all, ``decode_seqs`` sequences
    decoded (each sequence in the iteration generates one token), ``running`` sequences hold
    KV memory, ``swapped_tokens`` tokens sit in the CPU pool; ``memory`` is the allocator's state during
    the iteration (its external waste measured for the request at the head of the queue)."""

    start: float
    duration: float
    prefill_seqs: int
    prefill_tokens: int
    decode_seqs: int
    running: int
    swapped_tokens: int
    memory: Fragmentation


@dataclass(frozen=True)
class Event:
    """``kind`` happened to ``request_id`` at ``time`` [s]: "admit" (first prefill), "preempt" (freed, to
    be recomputed), "swap_out", "resume" (prefilled again), "swap_in", "finish"."""

    time: float
    kind: str
    request_id: int


def _percentiles(values: Sequence[float]) -> tuple[float, float, float]:
    values = np.asarray([v for v in values if not np.isnan(v)], dtype=np.float64)
    if values.size == 0:
        return (float("nan"),) * 3
    return tuple(float(p) for p in np.percentile(values, [50, 90, 99]))


@dataclass(frozen=True)
class ServingMetrics:
    """Throughput and latency of a run. ``throughput``: output tokens per second from the first arrival
    to the last finish; ``ttft``, ``tpot``, ``latency`` percentiles in seconds; ``mean_running``: sequences
    holding memory, averaged over time; ``peak_running``: the most at once."""

    requests: int
    output_tokens: int
    duration: float
    throughput: float
    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    tpot_p50: float
    tpot_p90: float
    tpot_p99: float
    latency_p50: float
    latency_p90: float
    latency_p99: float
    preemptions: int
    mean_running: float
    peak_running: int


@dataclass
class SimulationResult:
    """Records of a :func:`simulate` run: one per request (by request id), per iteration, and events."""

    records: list[RequestRecord]
    steps: list[StepRecord]
    events: list[Event]

    def metrics(self) -> ServingMetrics:
        start = min(r.request.arrival_time for r in self.records)
        duration = max(r.finish_time for r in self.records) - start
        tokens = sum(len(r.token_times) for r in self.records)
        busy = np.array([s.duration for s in self.steps])
        running = np.array([s.running for s in self.steps])
        ttft, tpot, latency = (_percentiles([getattr(r, name) for r in self.records])
                               for name in ("ttft", "tpot", "latency"))
        return ServingMetrics(len(self.records), tokens, duration, tokens / duration, *ttft, *tpot, *latency,
                              sum(r.preemptions for r in self.records),
                              float(busy @ running / busy.sum()), int(running.max()))


@dataclass(eq=False)
class _Sequence:
    """A request inside the simulator. ``swapped_tokens`` > 0: its KV lives in the CPU pool."""

    request: Request
    token_times: list[float] = field(default_factory=list)
    preemptions: int = 0
    swapped_tokens: int = 0

    @property
    def id(self) -> int:
        return self.request.request_id

    @property
    def prefill_len(self) -> int:
        """Tokens a prefill processes now: the prompt and every token generated so far."""
        return self.request.prompt_len + len(self.token_times)

    @property
    def max_kv_tokens(self) -> int:
        """The most KV tokens it can ever hold (its last token is never processed)."""
        return self.request.prompt_len + self.request.max_new_tokens - 1

    @property
    def done(self) -> bool:
        return len(self.token_times) == self.request.output_len


class _Simulator:
    """The state of one run; :func:`simulate` documents the parameters."""

    def __init__(self, cost: StepCostModel, allocator: Allocator, policy: str, max_batch: int,
                 preemption: str, swap_bandwidth: float, swap_space_tokens: int):
        self.cost, self.allocator, self.policy, self.max_batch = cost, allocator, policy, max_batch
        self.preemption, self.swap_bandwidth, self.swap_space_tokens = preemption, swap_bandwidth, swap_space_tokens
        self.time, self.swapped_tokens = 0.0, 0
        self.waiting: deque[_Sequence] = deque()  # arrival order; preempted sequences at the front
        self.running: list[_Sequence] = []  # admission order
        self.steps: list[StepRecord] = []
        self.events: list[Event] = []

    def run(self, requests: Sequence[Request]) -> SimulationResult:
        sequences = [_Sequence(r) for r in sorted(requests, key=lambda r: (r.arrival_time, r.request_id))]
        pending = deque(sequences)
        while pending or self.waiting or self.running:
            while pending and pending[0].request.arrival_time <= self.time:
                self.waiting.append(pending.popleft())
            if not (self.waiting or self.running):
                self.time = pending[0].request.arrival_time
                continue
            prefill, decode, transfer_bytes = (self._schedule_static() if self.policy == "static"
                                               else self._schedule_continuous())
            if not (prefill or decode):
                raise RuntimeError("the scheduler made no progress (a request larger than the KV memory?)")
            self._iterate(prefill, decode, transfer_bytes)
        records = [RequestRecord(s.request, tuple(s.token_times), s.preemptions)
                   for s in sorted(sequences, key=lambda s: s.id)]
        return SimulationResult(records, self.steps, self.events)

    def _event(self, kind: str, seq: _Sequence) -> None:
        self.events.append(Event(self.time, kind, seq.id))

    def _schedule_static(self) -> tuple[list[_Sequence], list[_Sequence], float]:
        if self.running:
            for seq in self.running:
                self.allocator.append_token(seq.id)  # cannot fail: the batch's worst case fits
            return [], list(self.running), 0.0
        reserved = 0
        while self.waiting and len(self.running) < self.max_batch:
            seq = self.waiting[0]
            reserved += self.allocator.slots_for(seq.max_kv_tokens, seq.max_kv_tokens)
            if reserved > self.allocator.capacity_slots:
                break
            self._admit(self.waiting.popleft())
        return list(self.running), [], 0.0

    def _schedule_continuous(self) -> tuple[list[_Sequence], list[_Sequence], float]:
        decode, transfer = [], 0.0
        for seq in list(self.running):  # oldest first; a preemption removes the newest
            while seq in self.running and not self.allocator.can_append(seq.id):
                transfer += self._preempt(self.running[-1])
            if seq in self.running:
                self.allocator.append_token(seq.id)
                decode.append(seq)
        prefill = []
        while self.waiting and len(self.running) < self.max_batch and self._fits(self.waiting[0]):
            seq = self.waiting.popleft()
            if seq.swapped_tokens:
                transfer += self._swap_in(seq)
                decode.append(seq)
            else:
                self._admit(seq)
                prefill.append(seq)
        return prefill, decode, transfer

    def _fits(self, seq: _Sequence) -> bool:
        need = seq.swapped_tokens + 1 if seq.swapped_tokens else seq.prefill_len
        return self.allocator.can_allocate(need, seq.max_kv_tokens)

    def _admit(self, seq: _Sequence) -> None:
        self.allocator.allocate(seq.id, seq.prefill_len, seq.max_kv_tokens)
        self.running.append(seq)
        self._event("resume" if seq.preemptions else "admit", seq)

    def _preempt(self, seq: _Sequence) -> float:
        """Free ``seq``'s KV memory, queue it first; returns the bytes it sends to the CPU pool."""
        tokens = self.allocator.num_tokens(seq.id)
        self.allocator.free(seq.id)
        self.running.remove(seq)
        self.waiting.appendleft(seq)
        seq.preemptions += 1
        if self.preemption == "swap" and self.swapped_tokens + tokens <= self.swap_space_tokens:
            seq.swapped_tokens = tokens
            self.swapped_tokens += tokens
            self._event("swap_out", seq)
            return tokens * self.cost.kv_bytes_per_token
        self._event("preempt", seq)
        return 0.0

    def _swap_in(self, seq: _Sequence) -> float:
        """Bring ``seq``'s KV back from the CPU pool plus a slot for its next token; returns the bytes moved."""
        tokens, seq.swapped_tokens = seq.swapped_tokens, 0
        self.swapped_tokens -= tokens
        self.allocator.allocate(seq.id, tokens, seq.max_kv_tokens)
        self.allocator.append_token(seq.id)
        self.running.append(seq)
        self._event("swap_in", seq)
        return tokens * self.cost.kv_bytes_per_token

    def _iterate(self, prefill: list[_Sequence], decode: list[_Sequence], transfer_bytes: float) -> None:
        contexts = [self.allocator.num_tokens(s.id) for s in decode]
        duration = (self.cost.step_time([s.prefill_len for s in prefill], contexts)
                    + (transfer_bytes / self.swap_bandwidth if transfer_bytes else 0.0))
        head = self.waiting[0] if self.waiting else None
        request_slots = self.allocator.slots_for(head.prefill_len, head.max_kv_tokens) if head else 0
        self.steps.append(StepRecord(self.time, duration, len(prefill), sum(s.prefill_len for s in prefill),
                                     len(decode), len(self.running), self.swapped_tokens,
                                     fragmentation(self.allocator, request_slots)))
        self.time += duration
        for seq in prefill + decode:
            seq.token_times.append(self.time)
            if seq.done:
                self.allocator.free(seq.id)
                self._event("finish", seq)
        self.running = [s for s in self.running if not s.done]


def simulate(requests: Sequence[Request], cost: StepCostModel, allocator: Allocator, policy: str = "continuous", *,
             max_batch: int = 256, preemption: str = "recompute", swap_bandwidth: float = 25e9,
             swap_space_tokens: int | None = None) -> SimulationResult:
    """Serve ``requests`` with ``policy`` ("static" or "continuous") on KV memory ``allocator`` (empty; it is
    empty again at the end). ``max_batch``: most sequences in an iteration; ``preemption``: "recompute"
    or "swap" (continuous only); ``swap_bandwidth`` [byte/s] of the CPU link; ``swap_space_tokens``: the
    CPU pool [tokens], default the allocator's capacity.

    ValueError for a request whose worst case (prompt + max_new_tokens - 1 tokens) does not fit in the
    whole memory: no policy could serve it.
    """
    if policy not in ("static", "continuous"):
        raise ValueError(f"policy must be 'static' or 'continuous', got {policy!r}")
    if preemption not in ("recompute", "swap"):
        raise ValueError(f"preemption must be 'recompute' or 'swap', got {preemption!r}")
    if not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be a positive int, got {max_batch!r}")
    if not swap_bandwidth > 0:
        raise ValueError(f"swap_bandwidth must be positive (bytes/s), got {swap_bandwidth}")
    if allocator.sequences:
        raise ValueError(f"the allocator must be empty, it holds sequences {allocator.sequences}")
    if not requests:
        raise ValueError("no requests to serve")
    if len({r.request_id for r in requests}) != len(requests):
        raise ValueError("request ids must be distinct")
    for r in requests:
        worst = r.prompt_len + r.max_new_tokens - 1
        if allocator.slots_for(worst, worst) > allocator.capacity_slots:
            raise ValueError(f"request {r.request_id} may hold {worst} KV tokens, more than the memory "
                             f"({allocator.capacity_slots} slots)")
    space = allocator.capacity_slots if swap_space_tokens is None else swap_space_tokens
    return _Simulator(cost, allocator, policy, max_batch, preemption, swap_bandwidth, space).run(requests)


def latency_vs_load(rates: Sequence[float], cost: StepCostModel, make_allocator: Callable[[], Allocator],
                    policies: Mapping[str, Mapping[str, object]],
                    make_trace: Callable[[float], Sequence[Request]] = bundled_trace
                    ) -> dict[str, dict[str, np.ndarray]]:
    """The curves of latency against load: for each label of ``policies`` (label -> keyword arguments of
    :func:`simulate`, e.g. ``{"static": {"policy": "static", "max_batch": 8}}``) and each arrival rate
    [requests/s], serve ``make_trace(rate)`` on a fresh ``make_allocator()``.

    Returns ``{label: {"rate": (n,), "throughput": (n,), "ttft_p99": (n,), ...}}``, one array per field of
    :class:`ServingMetrics`, in the order of ``rates``.
    """
    curves = {}
    for label, options in policies.items():
        rows = [asdict(simulate(make_trace(rate), cost, make_allocator(), **options).metrics()) for rate in rates]
        curves[label] = {"rate": np.asarray(rates, dtype=np.float64)}
        curves[label].update({key: np.array([row[key] for row in rows]) for key in rows[0]})
    return curves


def max_load_under(curve: Mapping[str, np.ndarray], metric: str, bound: float) -> int | None:
    """Index of the highest load a policy sustains: the last rate of the longest prefix of ``curve``'s
    rates (ascending) whose ``metric`` (e.g. "latency_p99") stays at most ``bound``; None if even the
    first rate misses it."""
    rates = np.asarray(curve["rate"])
    if np.any(np.diff(rates) <= 0):
        raise ValueError("the curve's rates must be increasing")
    ok = list(np.asarray(curve[metric]) <= bound) + [False]
    first_miss = ok.index(False)
    return first_miss - 1 if first_miss else None
