"""Pipeline-parallel training of an MLP over ``mlsys_lib.comm``: one rank per stage, any schedule.

The model is an MLP on autodiff Tensors: layer j is ``x ↦ x W_j + b_j``, followed by GeLU except
after the last layer; the loss of a batch of B rows is Σ (y − target)² / B. Its L layers are cut
into p·v consecutive virtual stages (:func:`split_layers`); rank s holds chunks c = 0..v−1, that is,
virtual stages c·p + s. Each training step cuts the batch into m microbatches (``np.array_split``
of the rows) and every rank runs its list of the schedule:

* ``F(i, c)``: receive the activations of microbatch i from the previous virtual stage (the input
  rows on virtual stage 0), run the chunk, send its output on (the last virtual stage computes the
  microbatch's share of the loss instead); keep the graph until the backward;
* ``B(i, c)``: receive the gradient of the output (the last virtual stage starts from the loss),
  send the gradient of the input back; without a W, also accumulate the weight gradients;
* ``W(i, c)``: accumulate the weight gradients of microbatch i.

The sum over microbatches of the gradients of their loss shares is the gradient of the whole
batch's loss, so after the step's SGD update ``W ← W − lr·∇W`` the weights are those of
single-process training (:func:`train`) up to rounding. Sends are ``isend`` (waited for at the end
of the step), receives block: the model under which ``validate`` rules out deadlocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlsys_lib.autodiff import Tensor, gelu, grad, linear
from mlsys_lib.comm import ProcessGroup
from mlsys_lib.comm.group import MAX_TAG

from .schedules import Schedule
from .validation import validate

Layer = tuple[np.ndarray, np.ndarray]  # W (n_in, n_out), b (n_out,)


def init_mlp(sizes: Sequence[int], seed: int = 0) -> list[Layer]:
    """Layers of an MLP with widths ``sizes`` = [n_0, ..., n_L]: W_j ~ N(0, 1/n_j), b_j ~ N(0, 0.1²), float64."""
    if len(sizes) < 2 or any(not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"sizes must be at least two positive ints [in, ..., out], got {list(sizes)}")
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((a, b)) / np.sqrt(a), 0.1 * rng.standard_normal(b))
            for a, b in zip(sizes[:-1], sizes[1:])]


def split_layers(num_layers: int, num_parts: int) -> list[range]:
    """Layer indices of each of ``num_parts`` consecutive parts, sizes as ``np.array_split``."""
    if num_layers < num_parts:
        raise ValueError(f"cannot cut {num_layers} layers into {num_parts} stages: each needs at least one layer")
    bounds = np.cumsum([0] + [len(part) for part in np.array_split(np.arange(num_layers), num_parts)])
    return [range(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def forward(layers: dict[int, list[Tensor]], x: Tensor, num_layers: int) -> Tensor:
    """Run the layers ``{index: [W, b]}`` in index order on x (rows, n_in); GeLU after all but layer L−1."""
    for j in sorted(layers):
        x = linear(x, *layers[j])
        if j < num_layers - 1:
            x = gelu(x)
    return x


def squared_error(y: Tensor, target: np.ndarray, batch_size: int) -> Tensor:
    """Σ (y − target)² / batch_size: a microbatch's share of the whole batch's loss (a scalar)."""
    return ((y - Tensor(target)) ** 2).sum() / float(batch_size)


def _check_data(X: np.ndarray, Y: np.ndarray, layers: Sequence[Layer], microbatches: int) -> None:
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise ValueError(f"X must be (B, n_in) and Y (B, n_out) with the same B, got {X.shape} and {Y.shape}")
    if X.shape[1] != layers[0][0].shape[0] or Y.shape[1] != layers[-1][0].shape[1]:
        raise ValueError(f"X has {X.shape[1]} features and Y {Y.shape[1]}: the model takes "
                         f"{layers[0][0].shape[0]} and gives {layers[-1][0].shape[1]}")
    if X.shape[0] < microbatches:
        raise ValueError(f"a batch of {X.shape[0]} rows cannot be cut into {microbatches} microbatches")


def train(layers: Sequence[Layer], X: np.ndarray, Y: np.ndarray, steps: int,
          lr: float) -> tuple[list[Layer], list[float]]:
    """Single-process full-batch SGD of the MLP: the new layers and the loss before each step."""
    _check_data(X, Y, layers, 1)
    params = {j: [Tensor(W.copy(), requires_grad=True), Tensor(b.copy(), requires_grad=True)]
              for j, (W, b) in enumerate(layers)}
    losses = []
    for _ in range(steps):
        loss = squared_error(forward(params, Tensor(X), len(layers)), Y, len(X))
        flat = [t for j in sorted(params) for t in params[j]]
        for t, g in zip(flat, grad(loss, flat)):
            t.data -= lr * g.data
        losses.append(loss.item())
    return [(W.data, b.data) for W, b in (params[j] for j in sorted(params))], losses


class _Stage:
    """One rank's chunks, its messages and the graphs it keeps between an action and the next."""

    def __init__(self, group: ProcessGroup, schedule: Schedule, layers: Sequence[Layer]) -> None:
        self.group, self.schedule = group, schedule
        self.p, self.v = schedule.num_stages, schedule.num_chunks
        self.num_layers = len(layers)
        parts = split_layers(self.num_layers, self.p * self.v)
        self.chunks = {c: {j: [Tensor(layers[j][0].copy(), requires_grad=True),
                               Tensor(layers[j][1].copy(), requires_grad=True)]
                           for j in parts[c * self.p + group.rank]} for c in range(self.v)}
        if 2 * schedule.num_microbatches * self.v > MAX_TAG + 1:
            raise ValueError(f"{schedule.num_microbatches} microbatches x {self.v} chunks need more message tags "
                             f"than the {MAX_TAG + 1} there are")
        self.local: dict[int, np.ndarray] = {}  # messages to itself (p = 1)

    def _peer(self, k: int) -> tuple[int, int]:
        """(rank, chunk) of virtual stage k."""
        return k % self.p, k // self.p

    def send(self, x: np.ndarray, k: int, microbatch: int, backward: bool) -> list:
        rank, chunk = self._peer(k)
        tag = (microbatch * self.v + chunk) * 2 + backward
        if rank == self.group.rank:
            self.local[tag] = x
            return []
        return [self.group.isend(x, rank, tag)]

    def recv(self, k_from: int, k_to: int, microbatch: int, backward: bool) -> np.ndarray:
        rank, _ = self._peer(k_from)
        tag = (microbatch * self.v + self._peer(k_to)[1]) * 2 + backward
        return self.local.pop(tag) if rank == self.group.rank else self.group.recv(rank, tag=tag)

    def step(self, X: np.ndarray, Y: np.ndarray, lr: float) -> float:
        """One training step of the schedule on the batch (X, Y); the loss if this rank computes it, else 0."""
        rows = np.array_split(np.arange(len(X)), self.schedule.num_microbatches)
        last = self.p * self.v - 1
        grads = {id(t): np.zeros_like(t.data) for chunk in self.chunks.values() for ps in chunk.values() for t in ps}
        kept: dict[tuple[int, int], tuple[Tensor, Tensor, np.ndarray | None]] = {}
        sends, loss = [], 0.0
        for action in self.schedule.stages[self.group.rank]:
            i, c = action.microbatch, action.chunk
            k = c * self.p + self.group.rank
            params = [t for j in sorted(self.chunks[c]) for t in self.chunks[c][j]]
            if action.kind == "F":
                x = Tensor(X[rows[i]] if k == 0 else self.recv(k - 1, k, i, False), requires_grad=k > 0)
                out = forward(self.chunks[c], x, self.num_layers)
                if k == last:
                    out = squared_error(out, Y[rows[i]], len(X))
                    loss += out.item()
                else:
                    sends += self.send(out.data, k + 1, i, False)
                kept[(i, c)] = (x, out, None)
                continue
            x, out, dy = kept.pop((i, c))
            if action.kind == "B":
                dy = None if k == last else self.recv(k + 1, k, i, True)
                wanted = ([x] if k > 0 else []) + ([] if self.schedule.split_backward else params)
                got = grad(out, wanted, grad_outputs=dy)
                if k > 0:
                    sends += self.send(got[0].data, k - 1, i, True)
                if self.schedule.split_backward:
                    kept[(i, c)] = (x, out, dy)
                    continue
                got = got[1:] if k > 0 else got
            else:
                got = grad(out, params, grad_outputs=dy)
            for t, g in zip(params, got):
                grads[id(t)] += g.data
        for request in sends:
            request.wait()
        for chunk in self.chunks.values():
            for t in (t for ps in chunk.values() for t in ps):
                t.data -= lr * grads[id(t)]
        return loss


def pipeline_train(group: ProcessGroup, schedule: Schedule, layers: Sequence[Layer], X: np.ndarray,
                   Y: np.ndarray, steps: int, lr: float) -> tuple[dict[int, Layer], list[float]]:
    """Train the MLP ``layers`` (every rank passes the same full list) with ``schedule`` on p = world_size ranks.

    X (B, n_0), Y (B, n_L): the batch of every step (cut into the schedule's m microbatches).
    Returns this rank's trained layers ``{layer index: (W, b)}`` and, on the rank holding the last
    virtual stage, the loss before each step (an empty list elsewhere).
    """
    validate(schedule)
    if schedule.num_stages != group.world_size:
        raise ValueError(f"the schedule has {schedule.num_stages} stages but the group has {group.world_size} ranks")
    _check_data(X, Y, layers, schedule.num_microbatches)
    stage = _Stage(group, schedule, layers)
    holds_loss = (schedule.num_stages * schedule.num_chunks - 1) % schedule.num_stages == group.rank
    losses = [stage.step(X, Y, lr) for _ in range(steps)]
    trained = {j: (W.data, b.data) for chunk in stage.chunks.values() for j, (W, b) in chunk.items()}
    return trained, losses if holds_loss else []
