"""Gradient checkpointing (rematerialization) of a sequential model built with ``mlsys_lib.autodiff``.

Backward through layer i needs what layer i saved in the forward pass; here we count a layer's saved
activations as its **input** (its bytes). Plain training keeps the inputs of all N layers. With
checkpoints every k layers the forward pass runs without recording a graph and keeps only the inputs
of layers 0, k, 2k, ... (S = ⌈N/k⌉ segments); the backward pass walks the segments from the last,
recomputes each one's forward from its checkpoint (now recording), backpropagates through it, and
drops it. The last segment is recorded in the first forward pass already, so it is never recomputed.

In units of one layer input (all of the same size), the peak is reached while segment s is being
differentiated: the s checkpoints before it plus its own L_s inputs. So memory is about N/k + k,
smallest at k = √N (2√N), and the price is N - L_last extra layer evaluations: one more forward pass.
Gradients are those of plain backpropagation: the same ops on the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..autodiff import Tensor, grad, no_grad
from ..autodiff.nn import Module


@dataclass(frozen=True)
class CheckpointRun:
    """What one checkpointed forward + backward pass gave and cost.

    grads: one array per parameter of the layers (in the order of :func:`layer_parameters`).
    peak_activation_bytes: the most bytes of layer inputs held at once.
    layer_evaluations: layer forward calls (N without recomputation).
    """

    loss: float
    grads: list[np.ndarray]
    peak_activation_bytes: int
    layer_evaluations: int


def layer_parameters(layers: Sequence[Module]) -> list[Tensor]:
    """The trainable tensors of ``layers``, each once, in layer order."""
    found: dict[int, Tensor] = {}
    for layer in layers:
        found.update((id(p), p) for p in layer.parameters())
    return list(found.values())


def checkpointed_gradients(layers: Sequence[Module], x, loss_fn: Callable[[Tensor], Tensor],
                           every: int) -> CheckpointRun:
    """The loss ``loss_fn(layers[-1](...layers[0](x)))`` and its parameter gradients, keeping the input of
    every ``every``-th layer only and recomputing each segment of ``every`` layers in the backward pass.

    layers: N autodiff modules applied in order; x: the input array; every: k, 1 <= k <= N
    (k = N: no checkpointing; k = √N: O(√N) activation memory).
    """
    n = len(layers)
    if n == 0:
        raise ValueError("checkpointed_gradients needs at least one layer")
    if isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= n:
        raise ValueError(f"every (the checkpoint interval k) must be an integer from 1 to {n}, got {every!r}")
    segments = [layers[i:i + every] for i in range(0, n, every)]
    evaluations, live, peak = 0, 0, 0

    def record(segment: Sequence[Module], a: np.ndarray) -> tuple[Tensor, Tensor, int]:
        """Run a segment recording its graph: (its input leaf, its output, bytes of its layers' inputs)."""
        nonlocal evaluations
        leaf = Tensor(a, requires_grad=True)
        out, held = leaf, 0
        for layer in segment:
            held += out.data.nbytes
            out = layer(out)
            evaluations += 1
        return leaf, out, held

    checkpoints, a = [], np.asarray(x)
    with no_grad():  # keep only each segment's input
        for segment in segments[:-1]:
            checkpoints.append(a)
            live += a.nbytes
            for layer in segment:
                a = layer(Tensor(a)).data
                evaluations += 1
    leaf, out, held = record(segments[-1], a)
    live += held
    peak = max(peak, live)
    loss = loss_fn(out)
    grads = {id(p): np.zeros(p.shape, p.dtype) for p in layer_parameters(layers)}
    target, seed = loss, None
    for s in reversed(range(len(segments))):
        if s < len(segments) - 1:  # recompute the segment from its checkpoint
            leaf, out, held = record(segments[s], checkpoints.pop())
            live += held - leaf.data.nbytes  # the checkpoint itself is already counted
            peak = max(peak, live)
            target = out
        params = layer_parameters(segments[s])
        g_input, *g_params = grad(target, [leaf, *params], grad_outputs=seed)
        for p, g in zip(params, g_params):
            grads[id(p)] += g.numpy()
        seed = g_input.numpy()
        live -= held
    return CheckpointRun(float(loss.numpy()), list(grads.values()), peak, evaluations)
