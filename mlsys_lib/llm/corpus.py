"""The bundled text corpus, a character-level tokenizer, and random training batches.

``data/almanac.txt`` is about 25 KB of plain English written for this course (free to use): a year
in a harbour town, told by its lighthouse keeper. A character model learns its spelling and short
words within a few hundred steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources

import numpy as np

CORPUS = "almanac.txt"


def load_corpus() -> str:
    """The bundled corpus as one string (ASCII, lines separated by '\\n')."""
    return resources.files(__package__).joinpath("data", CORPUS).read_text(encoding="utf-8")


class CharTokenizer:
    """One token per distinct character of ``text``, ids in sorted character order (0 .. vocab_size-1)."""

    def __init__(self, text: str):
        if not isinstance(text, str) or not text:
            raise ValueError("CharTokenizer: needs a non-empty string to take its characters from")
        self.chars = sorted(set(text))
        self.ids = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """Token ids (len(text),) int64; ValueError naming the first character not in the vocabulary."""
        try:
            return np.array([self.ids[c] for c in text], dtype=np.int64)
        except KeyError as missing:
            position = next(i for i, c in enumerate(text) if c not in self.ids)
            raise ValueError(f"CharTokenizer.encode: character {missing.args[0]!r} at position {position} is not "
                             f"in the vocabulary of {self.vocab_size} characters") from None

    def decode(self, ids) -> str:
        """The text of integer ids (...) in [0, vocab_size) (flattened in order)."""
        ids = np.asarray(ids).ravel()
        if ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"CharTokenizer.decode: ids must be integers in [0, {self.vocab_size}), "
                             f"got {ids.dtype} values in [{ids.min()}, {ids.max()}]")
        return "".join(self.chars[i] for i in ids)


def batches(tokens: np.ndarray, batch: int, seq: int,
            rng: np.random.Generator | int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless random training batches from a token stream (N,): (inputs, targets), each (batch, seq) int64.

    Each row is a window tokens[s : s+seq] at a uniformly random start s; its targets are the same
    window shifted by one, tokens[s+1 : s+seq+1] (the next token at every position).
    """
    tokens = np.asarray(tokens)
    for name, value in (("batch", batch), ("seq", seq)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"batches: {name} must be a positive integer, got {value!r}")
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer) or tokens.size < seq + 1:
        raise ValueError(f"batches: tokens must be a 1-D integer array of more than seq = {seq} tokens, "
                         f"got {tokens.dtype} of shape {tokens.shape}")
    rng = np.random.default_rng(rng)
    offsets = np.arange(seq)
    while True:
        starts = rng.integers(0, tokens.size - seq, size=batch)[:, None]
        yield tokens[starts + offsets], tokens[starts + offsets + 1]
