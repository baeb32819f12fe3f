"""ZeRO (Rajbhandari et al. 2020) executed: data-parallel Adam on an autodiff MLP, stages 0 to 3.

Layout (FSDP's flat parameter per layer): each Linear layer's parameters, W (in, out) row-major
then b (out,), form one flat fp32 vector, zero-padded to a multiple of the world size p and cut
into p equal shards; rank r owns shard r of every layer. The padding's gradient is 0, so Adam never
moves it. Ψ counts the model's parameters, Ψ' the padded ones (Ψ ≤ Ψ' < Ψ + p · layers).

Every rank runs forward and backward on its ``np.array_split`` share of the batch, with the loss
scaled by (its rows / all rows) so that the sum of the ranks' gradients is the full batch's mean
gradient. The backward goes layer by layer, last first, recomputing each layer's forward from its
saved input (so stage 3 can gather a layer's parameters again just before its backward); every
stage runs this same code, so the local gradients are the same in every stage.

* stage 0 (plain data parallelism): all-reduce each layer's gradient; every rank updates everything.
* stage 1 (P_os, Adam's m and v sharded): reduce-scatter each layer's gradient, update the rank's
  shard, all-gather each layer's parameters.
* stage 2 (P_os+g): stage 1, and a layer's full local gradient is freed after its reduce-scatter;
  only the gradient shard is kept.
* stage 3 (P_os+g+p): stage 2 with parameters sharded too: each layer is all-gathered just before
  its forward and again before its backward, freed after use; ``prefetch`` issues the next layer's
  all-gather (a non-blocking collective, ``group.iall_gather``) before the current layer runs, so its
  messages move while this layer computes (more memory: two gathered layers).

Memory, counted by :class:`MemoryTracker` for each logical buffer of model state (numpy's and the
collectives' temporary copies and activations are not model states and are not counted). All fp32:
4 B parameter + 4 B gradient + 8 B Adam m and v = 16 B per parameter, so per rank 16Ψ, 8Ψ + 8Ψ/p,
4Ψ + 12Ψ/p and 16Ψ/p for stages 0 to 3: ``training_memory(Ψ', optimizer="adam", precision="fp32",
zero_stage, dp_degree=p)`` of Lab 4 exactly, held between steps. (The lecture's 16Ψ, 4Ψ + 12Ψ/N_d,
2Ψ + 14Ψ/N_d, 16Ψ/N_d are for mixed precision: 2 B fp16 weight + 2 B fp16 gradient + 12 B fp32
master copy, m and v.) During a step stage 2 also holds one layer's full gradient and stage 3 the
gathered layer (two with prefetch) and its full gradient: the peak.

Communication per rank per step (ring collectives, n'_l padded elements of layer l, 4 B each):
stage 0 sends Σ 2(p−1)/p · 4n'_l bytes (all-reduce = reduce-scatter + all-gather), stages 1 and 2
exactly the same (reduce-scatter + all-gather), stage 3 one more all-gather: 1.5 times as much.

Equality: the ring all-reduce is a reduce-scatter then an all-gather over the same p equal blocks,
so every gradient element is summed in the same order in every stage, and Adam is elementwise:
after any number of steps every stage's parameters equal stage 0's bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlsys_lib.autodiff import Tensor, cross_entropy, linear, nn, no_grad, optim, relu
from mlsys_lib.comm import ProcessGroup, Request
from mlsys_lib.memory.accounting import ZERO_STAGES, TrainingMemory, training_memory

MODEL_STATES = ("parameters", "gradients", "optimizer_states")


class MemoryTracker:
    """Bytes of model state one rank holds, by kind (:data:`MODEL_STATES`), now and at the peak."""

    def __init__(self) -> None:
        self.current = dict.fromkeys(MODEL_STATES, 0)
        self.peak = dict(self.current)  # the breakdown at the moment the total was highest

    def hold(self, kind: str, array: np.ndarray) -> np.ndarray:
        """Count ``array`` as held (``kind`` one of MODEL_STATES); returns it."""
        self.add(kind, array.nbytes)
        return array

    def release(self, kind: str, array: np.ndarray) -> None:
        """Stop counting ``array`` (held earlier as ``kind``)."""
        self.add(kind, -array.nbytes)

    def add(self, kind: str, nbytes: int) -> None:
        """Count ``nbytes`` more (or fewer, if negative) of ``kind``."""
        self.current[kind] += nbytes
        if sum(self.current.values()) > sum(self.peak.values()):
            self.peak = dict(self.current)


def check_stage(stage: object) -> int:
    """``stage`` if it is a ZeRO stage 0..3, else ValueError."""
    if isinstance(stage, bool) or not isinstance(stage, (int, np.integer)) or stage not in ZERO_STAGES:
        raise ValueError(f"ZeRO stage must be 0 (plain data parallelism), 1, 2 or 3, got {stage!r}")
    return int(stage)  # type: ignore[call-overload]


def padded_size(n: int, p: int) -> int:
    """n rounded up to a multiple of p (the flat layer vector's length, padding included)."""
    return -(-n // p) * p


def pack(flat: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Write a layer's W (row-major) then b into the start of its flat vector; returns ``flat``."""
    flat[:w.size], flat[w.size:w.size + b.size] = w.ravel(), b
    return flat


def calculator_memory(padded_params: int, stage: int, world_size: int) -> TrainingMemory:
    """Lab 4's per-rank bytes for Adam in fp32 at this ZeRO stage (16 B per parameter before sharding)."""
    return training_memory(padded_params, optimizer="adam", precision="fp32", zero_stage=stage,
                           dp_degree=world_size)


@dataclass
class ZeroResult:
    """What one rank reports after :func:`zero_train`; bytes are model-state bytes of this rank."""

    layers: list[tuple[np.ndarray, np.ndarray]]  # final (W, b) of every layer, gathered
    losses: list[float]  # full-batch mean loss before each step
    held: dict[str, int]  # at the end of the last step, by kind
    peak: dict[str, int]  # at the highest total during the steps, by kind
    bytes_sent_per_step: float  # payload bytes this rank sent per step (mean over the steps)
    num_params: int  # Ψ
    padded_params: int  # Ψ'
    calculator: TrainingMemory = field(repr=False)  # Lab 4's prediction for Ψ', this stage and p


class _ShardedMLP:
    """One rank's model states under ZeRO ``stage``: flat per-layer vectors, Adam, the tracker."""

    def __init__(self, group: ProcessGroup, model: nn.MLP, stage: int, lr: float, prefetch: bool) -> None:
        self.group, self.stage, self.prefetch = group, stage, prefetch
        p, r = group.world_size, group.rank
        linears = model.layers[::2]
        self.shapes = [(layer.weight.shape, layer.bias.shape) for layer in linears]
        self.sizes = [int(np.prod(w)) + b[0] for w, b in self.shapes]  # parameters of each layer
        self.padded = [padded_size(n, p) for n in self.sizes]  # its flat vector's length
        self.tracker = MemoryTracker()
        full = [np.zeros(n, np.float32) for n in self.padded]
        for flat, layer in zip(full, linears):  # every rank builds the whole model from the seed (not counted)
            pack(flat, layer.weight.data, layer.bias.data)
        self.mine = [slice(r * n // p, (r + 1) * n // p) for n in self.padded]  # this rank's shard
        if stage == 3:
            full = [f[own].copy() for f, own in zip(full, self.mine)]
        self.params = [self.tracker.hold("parameters", f) for f in full]
        grad_sizes = [n // p if stage >= 2 else n for n in self.padded]
        self.grads = [self.tracker.hold("gradients", np.zeros(n, np.float32)) for n in grad_sizes]
        updated = self.params if stage in (0, 3) else [f[own] for f, own in zip(self.params, self.mine)]
        self.updated = [Tensor(u, requires_grad=True) for u in updated]  # views: Adam updates in place
        self.adam = optim.Adam(self.updated, lr=lr)
        for m, v in zip(self.adam.m, self.adam.v):
            self.tracker.hold("optimizer_states", m)
            self.tracker.hold("optimizer_states", v)

    # ------------------------------------------------------------- parameters, just in time
    def unflatten(self, i: int, flat: np.ndarray) -> tuple[Tensor, Tensor]:
        """Layer i's W and b as Tensors that need gradients (views of ``flat``, its full vector)."""
        (w_shape, b_shape), n_w = self.shapes[i], int(np.prod(self.shapes[i][0]))
        return (Tensor(flat[:n_w].reshape(w_shape), requires_grad=True),
                Tensor(flat[n_w:n_w + b_shape[0]], requires_grad=True))

    def full_layers(self, order: list[int]):
        """Yield (i, layer i's full flat parameters) in ``order``; stage 3 all-gathers each just in time
        (non-blocking; with ``prefetch`` the next layer's all-gather is issued before this layer runs)
        and frees it when the next one is asked for."""
        if self.stage < 3:
            yield from ((i, self.params[i]) for i in order)
            return
        gathering: dict[int, Request] = {}
        for k, i in enumerate(order):
            for j in order[k:k + 2] if self.prefetch else [i]:
                if j not in gathering:  # the gathered buffer exists from the moment the all-gather is issued
                    gathering[j] = self.group.iall_gather(self.params[j])
                    self.tracker.add("parameters", self.params[j].nbytes * self.group.world_size)
            self.group.progress()
            yield i, gathering[i].wait()
            del gathering[i]
            self.tracker.add("parameters", -self.params[i].nbytes * self.group.world_size)

    # ------------------------------------------------------------- gradients
    def reduce_gradient(self, i: int, local: np.ndarray) -> None:
        """Sum layer i's flat local gradient over the ranks into this rank's gradient buffer."""
        g = self.group
        if self.stage == 0:
            local[:] = g.all_reduce(local)
        elif self.stage == 1:
            local[self.mine[i]] = g.reduce_scatter(local)
        else:
            self.grads[i][:] = g.reduce_scatter(local)
            self.tracker.release("gradients", local)

    def local_gradient(self, i: int, w: Tensor, b: Tensor) -> np.ndarray:
        """Layer i's gradient as a flat padded vector: the persistent buffer (stages 0, 1) or a new one."""
        if self.stage < 2:
            flat = self.grads[i]
        else:
            flat = self.tracker.hold("gradients", np.zeros(self.padded[i], np.float32))
        return pack(flat, w.grad.numpy(), b.grad.numpy())

    # ------------------------------------------------------------- one step
    def step(self, X: np.ndarray, labels: np.ndarray, scale: float) -> float:
        """Forward, backward, gradient reduction and Adam on this rank's rows; returns its scaled loss."""
        last = len(self.sizes) - 1
        inputs = [X]  # each layer's input, kept for the backward (activations, not model states)
        with no_grad():
            for i, flat in self.full_layers(list(range(last + 1))):
                y = linear(Tensor(inputs[-1]), *self.unflatten(i, flat))
                inputs.append(y.numpy() if i == last else relu(y).numpy())
            loss_value = (cross_entropy(Tensor(inputs.pop()), labels) * scale).item()
        upstream = None
        for i, flat in self.full_layers(list(range(last, -1, -1))):
            x = Tensor(inputs[i], requires_grad=i > 0)
            w, b = self.unflatten(i, flat)
            y = linear(x, w, b)
            if i == last:
                (cross_entropy(y, labels) * scale).backward()
            else:
                relu(y).backward(upstream)
            upstream = x.grad.numpy() if i > 0 else None
            self.reduce_gradient(i, self.local_gradient(i, w, b))
        self.apply_adam()
        return loss_value

    def apply_adam(self) -> None:
        """Adam on what this rank updates, then (stages 1, 2) all-gather every layer's parameters."""
        for i, t in enumerate(self.updated):
            t.grad = Tensor(self.grads[i][self.mine[i]] if self.stage == 1 else self.grads[i])
        self.adam.step()
        if self.stage in (1, 2):
            for flat, own in zip(self.params, self.mine):
                flat[:] = self.group.all_gather(flat[own])

    def gathered_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every layer's (W, b), copies (stage 3 all-gathers them: call it outside the measured steps)."""
        out = []
        for i, flat in self.full_layers(list(range(len(self.sizes)))):
            w, b = self.unflatten(i, flat)
            out.append((w.data.copy(), b.data.copy()))
        return out


def zero_train(group: ProcessGroup, sizes: list[int], X: np.ndarray, labels: np.ndarray, steps: int,
               stage: int, lr: float = 1e-2, seed: int = 0, prefetch: bool = False) -> ZeroResult:
    """Train ``nn.MLP(sizes, rng=seed)`` (fp32) with Adam(lr) for ``steps`` full-batch steps on every
    rank of ``group`` under ZeRO ``stage`` (0..3); mean cross-entropy of ``X`` (batch, sizes[0]) float
    against ``labels`` (batch,) integers in 0..sizes[-1]-1, the batch split over the ranks.

    Every rank returns a :class:`ZeroResult`; the final parameters are the same on every rank.
    """
    stage = check_stage(stage)
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"zero_train: group must be a comm ProcessGroup (what launch passes each rank), "
                        f"got {type(group).__name__}")
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 for n in sizes):
        raise ValueError(f"zero_train: sizes must be layer widths, ints >= 1, got {list(sizes)}")
    p = group.world_size
    X, labels = np.asarray(X, np.float32), np.asarray(labels)
    if len(sizes) < 2 or X.ndim != 2 or X.shape[1] != sizes[0] or labels.shape != X.shape[:1]:
        raise ValueError(f"zero_train: expected X (batch, {sizes[0] if sizes else 'in'}) and labels (batch,) "
                         f"for sizes [in, ..., out], got X {X.shape}, labels {labels.shape}, sizes {list(sizes)}")
    if X.shape[0] < p:
        raise ValueError(f"zero_train: the batch ({X.shape[0]} rows) must have a row for each of the {p} ranks")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"zero_train: steps must be an int >= 1, got {steps!r}")
    model = _ShardedMLP(group, nn.MLP(sizes, rng=seed), stage, lr, prefetch)
    rows = np.array_split(np.arange(X.shape[0]), p)[group.rank]
    scale = len(rows) / X.shape[0]
    losses, before = [], group.bytes_sent
    for _ in range(steps):
        local = model.step(X[rows], labels[rows], scale)
        losses.append(float(sum(group.all_gather_object(local))))  # untraced
    sent = (group.bytes_sent - before) / steps
    held, peak = dict(model.tracker.current), dict(model.tracker.peak)
    return ZeroResult(layers=model.gathered_layers(), losses=losses, held=held, peak=peak,
                      bytes_sent_per_step=sent, num_params=sum(model.sizes), padded_params=sum(model.padded),
                      calculator=calculator_memory(sum(model.padded), stage, p))
