"""Model and hardware FLOPs utilization of a measured training step on this machine.

    MFU = model FLOPs / step time / peak FLOP/s      model FLOPs: what the step must compute (no recomputation)
    HFU = hardware FLOPs / step time / peak FLOP/s   hardware FLOPs: what it did compute, recomputation included

Without recomputation the two are equal. With activation checkpointing (Lab 4's
``memory.checkpointed_gradients``) the backward pass recomputes the forward of every segment but the
last, so the hardware does more FLOPs for the same model FLOPs: HFU > MFU. The hardware FLOPs are
counted from the matmuls the step executed (``llm.count``), not estimated. The peak is measured in
the same process by a float32 GEMM benchmark, so both numbers are relative to what numpy's BLAS
reaches here, not to a data-sheet figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..autodiff import Tensor
from ..autodiff.nn import Module
from ..memory.checkpoint import checkpointed_gradients
from ..tensor.roofline import time_best
from .count import count_flops
from .model import ModelConfig, as_tensors, block, embed, forward, head, init_params, next_token_loss
from .train import blas_threads


def measure_peak_flops(sizes: tuple[int, ...] = (256, 512, 1024), repeats: int = 5, seed: int = 0,
                       threads: int | None = 1) -> float:
    """The best float32 FLOP/s of numpy's ``A @ B`` (n × n × n, 2·n³ FLOPs) over ``sizes`` and ``repeats``,
    with ``threads`` BLAS threads (as the training step is measured: see :func:`~.train.blas_threads`)."""
    rng = np.random.default_rng(seed)
    best = 0.0
    for n in sizes:
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        out = np.empty((n, n), np.float32)

        def gemm():
            np.matmul(a, b, out=out)
        with blas_threads(threads):
            gemm()  # warm-up
            best = max(best, 2 * n ** 3 / time_best(gemm, repeats))
    return best


@dataclass(frozen=True)
class StepMeasurement:
    """One training step (forward + backward, no optimizer update) measured.

    seconds: the best wall time of the step; model_flops: the matmul FLOPs a step without recomputation
    executes (counted; :func:`~.flops.training_flops` in closed form); hardware_flops: the matmul FLOPs the
    measured step executed (recomputation included); checkpoint_every:
    the segment length in layers when checkpointed (None: not checkpointed).
    """

    seconds: float
    model_flops: int
    hardware_flops: int
    checkpoint_every: int | None


class _Layer(Module):
    """A part of the model as a Module for ``checkpointed_gradients``: ``fn(its parameters by name, x)``.
    The parameters are kept as a list attribute, where ``Module.parameters`` finds them."""

    def __init__(self, params: dict[str, Tensor], names: list[str], fn: Callable[[dict, Tensor], Tensor]):
        self.names, self.tensors, self.fn = names, [params[name] for name in names], fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(dict(zip(self.names, self.tensors)), x)


def model_layers(params: dict[str, Tensor], config: ModelConfig) -> list[Module]:
    """The model as the L + 2 layers Lab 4's checkpointing walks: embeddings, the L blocks, final norm + head.

    ``checkpointed_gradients`` hands every layer a float array, so the first layer takes the token ids
    as floats (exact below 2²⁴) and turns them back into integers.
    """
    def blocks(layer: int) -> _Layer:
        names = [name for name in params if name.startswith(f"layers.{layer}.")]
        return _Layer(params, names, lambda p, x: block(p, config, layer, x))

    return [_Layer(params, ["wte", "wpe"], lambda p, x: embed(p, config, x.numpy().astype(np.int64))),
            *(blocks(layer) for layer in range(config.n_layers)),
            _Layer(params, [name for name in params if name.startswith("norm_f.") or name == "lm_head"],
                   lambda p, x: head(p, config, x))]


def checkpoint_interval(config: ModelConfig) -> int:
    """√ of the number of layers (L + 2, the embeddings and the head counted), rounded down: Lab 4's optimum."""
    return max(1, math.isqrt(config.n_layers + 2))


def measure_training_step(config: ModelConfig, batch: int, seq: int, checkpoint: bool = False, repeats: int = 3,
                          seed: int = 0, threads: int | None = 1) -> StepMeasurement:
    """Time forward + backward of the loss on random tokens (batch, seq) and count the FLOPs it executes.

    checkpoint: recompute activations with Lab 4's ``checkpointed_gradients`` in segments of
    :func:`checkpoint_interval` layers, instead of keeping them. A plain step runs once counted (the model
    FLOPs), the measured step once counted (the hardware FLOPs; also the warm-up), then ``repeats`` times
    timed, uncounted, with ``threads`` BLAS threads.
    """
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, config.vocab_size, (batch, seq))
    targets = rng.integers(0, config.vocab_size, (batch, seq))
    params = as_tensors(init_params(config, seed))
    every = checkpoint_interval(config) if checkpoint else None

    def plain_step():
        for p in params.values():
            p.grad = None
        next_token_loss(forward(params, config, tokens), targets).backward()

    def checkpointed_step():
        checkpointed_gradients(layers, tokens.astype(np.float32), lambda logits: next_token_loss(logits, targets), every)

    layers = model_layers(params, config) if checkpoint else None
    step = checkpointed_step if checkpoint else plain_step
    with blas_threads(threads):
        with count_flops() as model:
            plain_step()
        with count_flops() as hardware:
            step()
        seconds = time_best(step, repeats)
    return StepMeasurement(seconds, model.total, hardware.total, every)


def _utilization(flops: float, seconds: float, peak: float) -> float:
    if not (flops > 0 and seconds > 0 and peak > 0):
        raise ValueError(f"FLOPs, seconds and peak FLOP/s must be positive, got {flops}, {seconds}, {peak}")
    return flops / seconds / peak


def mfu(model_flops: float, seconds: float, peak: float) -> float:
    """Model FLOPs utilization: model_flops / seconds / peak (peak in FLOP/s). Recomputation does not count."""
    return _utilization(model_flops, seconds, peak)


def hfu(hardware_flops: float, seconds: float, peak: float) -> float:
    """Hardware FLOPs utilization: hardware_flops (recomputation included) / seconds / peak."""
    return _utilization(hardware_flops, seconds, peak)
