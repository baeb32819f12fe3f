"""Distributed data parallel (DDP) with gradient buckets, and the α-β model of its compute/communication overlap.

**Buckets.** Backward produces gradients in reverse layer order, so the parameters are taken in the
reverse of ``model.parameters()`` and packed greedily into buckets of at most ``bucket_bytes``
(PyTorch DDP's reducer): a parameter that would overflow the current bucket starts a new one, and a
parameter bigger than ``bucket_bytes`` gets a bucket of its own (:func:`assign_buckets`).

**Data path.** :class:`DistributedDataParallel` runs forward layer by layer and backward layer by
layer in reverse (each layer's input is a detached leaf, so the gradients are those of one
``loss.backward()``). As soon as a layer's backward has finished, its parameters' gradients are
ready (last parameter first); when every gradient of a bucket is ready, and every bucket before it
has been issued (buckets go out in order, as in PyTorch), the bucket is flattened and its
all-reduce (op "mean") is issued as a *non-blocking* collective (``group.iall_reduce``), and the
rank advances its communication lane (``group.progress()``) before the next layer's backward runs.
At the end of backward every bucket is waited on and written back into ``.grad``, so the optimizer
step that follows sees every bucket reduced. Inside :meth:`~DistributedDataParallel.no_sync`
nothing is sent and the gradients accumulate in ``.grad``; the next synchronized backward
all-reduces the accumulated sums.

**Clock.** Each rank has a compute lane and a communication lane, in seconds. The executed step
runs on the group's own α-β clock (``mlsys_lib.comm``): each layer's forward and backward is charged
to the rank's clock with ``group.compute`` and the buckets' all-reduces run on the rank's
communication lane, which has its own clock (``comm.lane``), so :attr:`DistributedDataParallel.timeline`
is measured, not assumed. :class:`LaneClock` is the same model without data, in closed form:

* a layer's forward and backward take their FLOPs / ``flops_per_s`` (:func:`layer_costs`: a Linear
  layer of a (b, in) input does 2·b·in·out FLOPs forward, 4·b·in·out backward; ReLU is counted as 0);
  they run back to back on the compute lane;
* a bucket's all-reduce starts on the communication lane at max(time its last gradient is ready,
  time the lane is free) and lasts the ring closed form
  2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ (:func:`mlsys_lib.comm.closed_form`, n = bucket bytes);
* the step ends at max(end of compute, end of the last all-reduce) (:attr:`Timeline.step_time`).

The measured timeline equals the model's to rounding (exactly when every bucket's elements divide
evenly into p blocks; the tests check it). Every rank has the same shapes, so every rank's lanes
are the same; :func:`simulate_step` replays the same events without data. The "all-reduce after backward" baseline (plain data parallelism) is
:func:`all_reduce_gradients` for the data and ``bucket_bytes=None`` (one bucket, issued when the
last gradient is ready) for the clock. :func:`modelled_step_time` is the closed form of step time
vs number of buckets for gradients produced at a uniform rate:
``F + max(B + c_k, B/k + k·c_k)``, with c_k the all-reduce of n/k bytes: too many buckets and the
k·2(p−1)α term dominates (α-bound), one bucket and nothing overlaps (F + B + c_1).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from mlsys_lib.autodiff import Tensor
from mlsys_lib.autodiff.nn import Linear, Sequential
from mlsys_lib.comm import CostModel, ProcessGroup, Request, closed_form

from .timeline import Interval, Timeline

__all__ = ["assign_buckets", "LayerCost", "layer_costs", "LaneClock", "simulate_step", "step_time_vs_bucket_size",
           "modelled_step_time", "all_reduce_gradients", "DistributedDataParallel"]


def assign_buckets(param_bytes: Sequence[int], bucket_bytes: int | None) -> list[list[int]]:
    """Indices of the parameters (sizes ``param_bytes`` in bytes, model order) in each bucket, in reverse order.

    Bucket 0 holds the last parameters (their gradients are ready first). ``bucket_bytes=None``: one
    bucket of everything. A bucket never exceeds ``bucket_bytes`` unless it holds a single parameter.
    """
    if bucket_bytes is not None and (not isinstance(bucket_bytes, (int, np.integer)) or bucket_bytes < 1):
        raise ValueError(f"bucket_bytes must be an int >= 1 (bytes) or None, got {bucket_bytes!r}")
    buckets: list[list[int]] = []
    filled = 0
    for i in reversed(range(len(param_bytes))):
        if not buckets or (bucket_bytes is not None and filled + param_bytes[i] > bucket_bytes):
            buckets.append([])
            filled = 0
        buckets[-1].append(i)
        filled += param_bytes[i]
    return buckets


@dataclass(frozen=True)
class LayerCost:
    """One layer on the lane clock: forward and backward seconds, and its parameters' sizes in bytes (model order)."""

    name: str
    forward_s: float
    backward_s: float
    param_bytes: tuple[int, ...]


def layer_costs(model: Sequential, batch_rows: int, flops_per_s: float) -> list[LayerCost]:
    """The :class:`LayerCost` of each layer of ``model`` for a local batch of ``batch_rows`` rows.

    Linear: 2·b·in·out FLOPs forward, 4·b·in·out backward (dX and dW); other layers 0 s.
    """
    if not flops_per_s > 0:
        raise ValueError(f"flops_per_s must be > 0, got {flops_per_s!r}")
    costs = []
    for i, layer in enumerate(model.layers):
        flops = 2 * batch_rows * layer.in_features * layer.out_features if isinstance(layer, Linear) else 0
        costs.append(LayerCost(f"{type(layer).__name__.lower()}{i}", flops / flops_per_s, 2 * flops / flops_per_s,
                               tuple(p.data.nbytes for p in layer.parameters())))
    return costs


class LaneClock:
    """The compute and communication lanes of one rank (seconds), recording a :class:`Timeline`."""

    def __init__(self, rank: int, world_size: int, cost: CostModel, algorithm: str = "ring") -> None:
        self.world_size, self.cost, self.algorithm = world_size, cost, algorithm
        self.timeline = Timeline(rank)
        self.compute_free = self.comm_free = 0.0

    def compute(self, label: str, seconds: float) -> None:
        """Run ``seconds`` of compute after the previous compute."""
        start, self.compute_free = self.compute_free, self.compute_free + seconds
        self.timeline.intervals.append(Interval("compute", label, start, self.compute_free))

    def all_reduce(self, label: str, nbytes: int) -> None:
        """All-reduce ``nbytes`` whose inputs are ready now (end of compute so far), when the lane is free."""
        start = max(self.compute_free, self.comm_free)
        c = self.cost
        self.comm_free = start + closed_form("all_reduce", self.algorithm, nbytes, self.world_size,
                                             c.alpha, c.beta, c.gamma)
        self.timeline.intervals.append(Interval("comm", label, start, self.comm_free))


class _Readiness:
    """Counts the ready gradients of each bucket; :meth:`ready` returns the buckets that may be issued now.

    Buckets are issued in order (as PyTorch's reducer does): a complete bucket waits for the ones before it.
    """

    def __init__(self, buckets: list[list[int]]) -> None:
        self.bucket_of = {i: b for b, bucket in enumerate(buckets) for i in bucket}
        self.missing = [len(bucket) for bucket in buckets]
        self.next = 0

    def ready(self, param_index: int) -> list[int]:
        self.missing[self.bucket_of[param_index]] -= 1
        start = self.next
        while self.next < len(self.missing) and self.missing[self.next] == 0:
            self.next += 1
        return list(range(start, self.next))


def simulate_step(layers: Sequence[LayerCost], bucket_bytes: int | None, world_size: int,
                  cost: CostModel | None = None, algorithm: str = "ring", rank: int = 0) -> Timeline:
    """The lane-clock timeline of one DDP step (forward, backward with bucketed all-reduces), without data.

    ``bucket_bytes=None``: the all-reduce-after-backward baseline (one bucket, no overlap).
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    sizes = [n for layer in layers for n in layer.param_bytes]
    buckets = assign_buckets(sizes, bucket_bytes)
    clock, readiness = LaneClock(rank, world_size, cost or CostModel(), algorithm), _Readiness(buckets)
    for layer in layers:
        clock.compute(f"F {layer.name}", layer.forward_s)
    first = [0, *itertools.accumulate(len(layer.param_bytes) for layer in layers)]  # each layer's first parameter
    for layer, start in reversed(list(zip(layers, first))):
        clock.compute(f"B {layer.name}", layer.backward_s)
        for i in reversed(range(start, start + len(layer.param_bytes))):
            for b in readiness.ready(i):
                clock.all_reduce(f"bucket {b}", sum(sizes[j] for j in buckets[b]))
    return clock.timeline


def step_time_vs_bucket_size(layers: Sequence[LayerCost], bucket_sizes: Sequence[int | None], world_size: int,
                             cost: CostModel | None = None, algorithm: str = "ring") -> list[float]:
    """Simulated step time (s) for each bucket size in bytes (None: all-reduce after backward)."""
    return [simulate_step(layers, b, world_size, cost, algorithm).step_time for b in bucket_sizes]


def modelled_step_time(forward_s: float, backward_s: float, grad_bytes: int, num_buckets: int, world_size: int,
                       cost: CostModel | None = None) -> float:
    """Closed-form step time (s) with ``num_buckets`` = k equal ring all-reduces of ``grad_bytes / k`` bytes.

    Gradients appear at a uniform rate during the backward's ``backward_s`` seconds, so bucket j is
    ready at j·B/k; the communication lane then ends at max(B + c_k, B/k + k·c_k).
    """
    if not isinstance(num_buckets, int) or num_buckets < 1:
        raise ValueError(f"num_buckets must be an int >= 1, got {num_buckets!r}")
    c = cost or CostModel()
    k = num_buckets
    c_k = closed_form("all_reduce", "ring", grad_bytes / k, world_size, c.alpha, c.beta, c.gamma)
    return forward_s + max(backward_s + c_k, backward_s / k + k * c_k)


def all_reduce_gradients(params: Sequence[Tensor], group: ProcessGroup, algorithm: str = "ring") -> None:
    """Plain data parallelism: one blocking all-reduce (mean) of every parameter's ``.grad``, after backward."""
    params = list(params)
    _write_back(params, group.all_reduce(_flat_gradients(params), op="mean", algorithm=algorithm))


def _flat_gradients(params: list[Tensor]) -> np.ndarray:
    """The gradients of ``params`` in one flat buffer of the parameters' dtype (every parameter must have one).

    The autodiff may hand a float32 parameter a float64 gradient; DDP communicates (and a bucket's size
    counts) the gradient in the parameter's dtype, as PyTorch does.
    """
    for p in params:
        if p.grad is None:
            raise ValueError(f"parameter {p.name or '?'} of shape {p.shape} has no gradient: the loss does not "
                             f"depend on it (every parameter must get a gradient in every step)")
    return np.concatenate([p.grad.numpy().astype(p.data.dtype, copy=False).ravel() for p in params])


def _write_back(params: list[Tensor], flat: np.ndarray) -> None:
    """Set each parameter's ``.grad`` to its slice of the reduced buffer ``flat``."""
    start = 0
    for p in params:
        p.grad = Tensor(flat[start:start + p.data.size].reshape(p.shape))
        start += p.data.size


class DistributedDataParallel:
    """Wraps a :class:`~mlsys_lib.autodiff.nn.Sequential` (e.g. an MLP) for data-parallel training.

    Usage on every rank: ``out = ddp(x_local); loss = f(out); ddp.backward(loss); opt.step()``.
    The constructor broadcasts rank 0's parameters. ``bucket_bytes`` (bytes, None: one bucket)
    shapes the buckets (:attr:`buckets`, lists of indices into ``model.parameters()``).
    Each layer's forward and backward is charged to the group's clock at ``flops_per_s``
    (:func:`layer_costs`); :attr:`timeline` is the last step's, measured on the group's clocks
    (compute lane: the rank's clock; comm lane: its non-blocking collectives), seconds from the
    step's start. The loss should be a mean over the local batch: the all-reduce averages over
    ranks, which gives the global mean when every rank has the same number of rows.
    """

    def __init__(self, model: Sequential, group: ProcessGroup, bucket_bytes: int | None,
                 flops_per_s: float = 20e9) -> None:
        if not isinstance(model, Sequential):
            raise TypeError(f"model must be an autodiff.nn.Sequential (e.g. an MLP), got {type(model).__name__}")
        if not isinstance(group, ProcessGroup):
            raise TypeError(f"group must be a comm ProcessGroup (what launch passes each rank), "
                            f"got {type(group).__name__}")
        if not flops_per_s > 0:
            raise ValueError(f"flops_per_s must be > 0, got {flops_per_s!r}")
        self.model, self.group, self.flops_per_s = model, group, flops_per_s
        self.params = model.parameters()
        for p in self.params:
            p.data[...] = group.broadcast(p.data, root=0)
        self.buckets = assign_buckets([p.data.nbytes for p in self.params], bucket_bytes)
        index = {id(p): i for i, p in enumerate(self.params)}
        self._layer_params = [[index[id(p)] for p in layer.parameters()] for layer in model.layers]
        self._sync = True
        self._saved: list[tuple[Tensor, Tensor]] = []
        self._costs: list[LayerCost] = []
        self._step_start = group.clock
        self.timeline = Timeline(group.rank)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside: backward accumulates gradients locally and sends nothing (gradient accumulation)."""
        saved, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = saved

    def __call__(self, x) -> Tensor:
        """Forward, layer by layer, each layer's input a detached leaf; starts a new timeline."""
        x = x if isinstance(x, Tensor) else Tensor(np.asarray(x))
        rows = int(np.prod(x.shape[:-1]))
        self._costs = layer_costs(self.model, rows, self.flops_per_s)
        self._step_start = self.group.clock
        self._intervals: list[Interval] = []
        self._saved = []
        for layer, cost in zip(self.model.layers, self._costs):
            out = layer(x)
            self._compute(f"F {cost.name}", cost.forward_s)
            self._saved.append((x, out))
            x = Tensor(out.data, requires_grad=out.requires_grad)
        self._output = x
        return x

    def backward(self, loss: Tensor) -> None:
        """Backward layer by layer in reverse; each bucket's all-reduce is issued (non-blocking) as soon as its
        gradients are ready, and all are waited on at the end, so the optimizer step sees them reduced."""
        if not self._saved:
            raise RuntimeError("backward: call the DDP module (forward) first")
        readiness = _Readiness(self.buckets)
        first_collective = len(self.group.lane_history)
        in_flight: list[tuple[int, Request]] = []
        loss.backward()
        upstream = self._output
        for (inp, out), cost, indices in reversed(list(zip(self._saved, self._costs, self._layer_params))):
            if out.requires_grad:
                if upstream.grad is None:
                    raise ValueError("backward: the loss does not depend on the DDP module's output")
                out.backward(upstream.grad)
            self._compute(f"B {cost.name}", cost.backward_s)
            for i in reversed(indices):
                for b in readiness.ready(i) if self._sync else []:
                    params = [self.params[j] for j in self.buckets[b]]
                    in_flight.append((b, self.group.iall_reduce(_flat_gradients(params), op="mean")))
            self.group.progress()
            upstream = inp
        for b, request in in_flight:
            _write_back([self.params[j] for j in self.buckets[b]], request.wait())
        t0 = self._step_start
        lane = self.group.lane_history[first_collective:]
        self._intervals += [Interval("comm", f"bucket {b}", start - t0, end - t0)
                            for (b, _), (_, start, end) in zip(in_flight, lane)]
        self._saved = []
        self.timeline = Timeline(self.group.rank, self._intervals)

    def _compute(self, label: str, seconds: float) -> None:
        """Charge ``seconds`` of compute to the group's clock and record it on the compute lane."""
        start = self.group.clock
        self.group.compute(seconds)
        self._intervals.append(Interval("compute", label, start - self._step_start,
                                        self.group.clock - self._step_start))
