"""Train the transformer on the bundled corpus with Adam, through ``mlsys_lib.autodiff``.

    result = train(small_config(), steps=800)          # about a minute on 2 CPU cores
    prompt = result.tokenizer.encode("The keeper ")
    text = result.tokenizer.decode(generate(result.params, result.config, prompt, 200, 0.8, rng=0))

The first 90% of the corpus is trained on, the last 10% held out for :attr:`TrainResult.val_loss`.
A model that learned nothing predicts uniformly: log V nats per character (V = 56 characters:
4.0 nats); the course's small model (docs/library/llm.md), 800 steps of 16 × 64 characters, ends near
1.5 on its training batches and 1.8 on the held-out text (about 50 s on 2 shared cores).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits  # installed with scikit-learn

from ..autodiff import no_grad
from ..autodiff.optim import Adam
from .corpus import CharTokenizer, batches, load_corpus
from .model import ModelConfig, as_tensors, init_params, loss

VAL_FRACTION = 0.1


@dataclass
class TrainResult:
    """params: the trained float32 arrays; losses: the training loss (nats/token) of every step;
    val_loss: mean loss on held-out batches after training; seconds: wall time of the steps."""

    config: ModelConfig
    params: dict[str, np.ndarray]
    tokenizer: CharTokenizer
    losses: list[float]
    val_loss: float
    seconds: float


@contextlib.contextmanager
def blas_threads(threads: int | None) -> Iterator[None]:
    """Within the block numpy's BLAS uses at most ``threads`` threads (None: leave it alone).

    The model's matrices are small (64 × 256): splitting them over threads gains little, and on a
    machine whose cores are shared a BLAS thread spinning while its partner waits for a core costs
    far more (measured on 2 shared cores: 100 steps of the course's small model in 5 s on one thread, 14 to 40 s
    on two).
    """
    if threads is None:
        yield
        return
    with threadpool_limits(limits=threads, user_api="blas"):
        yield


def small_config(vocab_size: int | None = None, max_seq_len: int = 64, n_kv_heads: int = 2,
                 norm: str = "rms") -> ModelConfig:
    """The course's small model (docs/library/llm.md): d_model 64, 2 layers, 4 query heads (GQA with 2 kv heads
    by default), d_ff 256; vocab_size defaults to the bundled corpus's characters. About 0.1 M parameters."""
    if vocab_size is None:
        vocab_size = CharTokenizer(load_corpus()).vocab_size
    return ModelConfig(vocab_size=vocab_size, d_model=64, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads,
                       d_ff=256, max_seq_len=max_seq_len, norm=norm)


def cosine_lr(step: int, steps: int, lr: float, final_fraction: float = 0.1) -> float:
    """The learning rate of step ``step`` of ``steps``: ``lr`` decayed along a half cosine to final_fraction · lr."""
    return lr * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * step / steps)))


def split(tokens: np.ndarray, val_fraction: float = VAL_FRACTION) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation): the first 1 - val_fraction of the stream and the rest."""
    cut = int(len(tokens) * (1 - val_fraction))
    return tokens[:cut], tokens[cut:]


def evaluate(params: dict[str, np.ndarray], config: ModelConfig, tokens: np.ndarray, batch: int, seq: int,
             n_batches: int = 8, seed: int = 0) -> float:
    """Mean loss (nats/token) over ``n_batches`` random batches of ``tokens``, without recording a graph."""
    with no_grad():
        tensors = as_tensors(params, requires_grad=False)
        return float(np.mean([loss(tensors, config, x, y).item()
                              for x, y in itertools.islice(batches(tokens, batch, seq, seed), n_batches)]))


def train(config: ModelConfig, steps: int, batch: int = 16, seq: int | None = None, lr: float = 3e-3,
          seed: int = 0, text: str | None = None, log_every: int | None = None,
          threads: int | None = 1) -> TrainResult:
    """Train a fresh model (``init_params(config, seed)``) for ``steps`` Adam steps of ``batch`` windows of ``seq``
    characters (default: config.max_seq_len) of ``text`` (default: the bundled corpus).

    Adam with β = (0.9, 0.99) (nanoGPT's choice for small models); the learning rate falls from ``lr``
    to lr / 10 along a half cosine (:func:`cosine_lr`). config.vocab_size must equal the number of
    distinct characters of the text. log_every: print the loss every so many steps. threads: BLAS
    threads while training (:func:`blas_threads`).
    """
    text = load_corpus() if text is None else text
    tokenizer = CharTokenizer(text)
    if config.vocab_size != tokenizer.vocab_size:
        raise ValueError(f"train: config.vocab_size is {config.vocab_size} but the text has "
                         f"{tokenizer.vocab_size} distinct characters")
    seq = config.max_seq_len if seq is None else seq
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"train: steps must be a positive integer, got {steps!r}")
    train_tokens, val_tokens = split(tokenizer.encode(text))
    params = init_params(config, seed)
    tensors = as_tensors(params)  # the same arrays: Adam's in-place updates reach params
    optimizer = Adam(list(tensors.values()), lr=lr, betas=(0.9, 0.99))
    losses = []
    with blas_threads(threads):
        start = time.perf_counter()
        for step, (x, y) in enumerate(itertools.islice(batches(train_tokens, batch, seq, seed), steps)):
            optimizer.lr = cosine_lr(step, steps, lr)
            value = loss(tensors, config, x, y)
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
            losses.append(value.item())
            if log_every and (step % log_every == 0 or step == steps - 1):
                print(f"step {step:5d}  loss {losses[-1]:.3f}")
        seconds = time.perf_counter() - start
        val_loss = evaluate(params, config, val_tokens, batch, min(seq, len(val_tokens) - 1))
    return TrainResult(config, params, tokenizer, losses, val_loss, seconds)
