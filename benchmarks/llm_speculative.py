"""Speculative sampling: measured speed-up vs draft length k for several acceptance rates α, against the formulas.

    python benchmarks/llm_speculative.py [--tokens 50000] [--length 1000] [--c 0.05]

For each α a context-free draft and target on 8 tokens with exactly that acceptance rate (the
target uniform, the draft moved towards token 0: q = (1 − w)·p + w·δ_0, α = 1 − w·7/8) generate
``--tokens`` tokens, as sequences of ``--length`` tokens by ``speculative_generate``, every model
call counted. Printed per k:
tokens per target call, measured and by (1 − α^{k+1}) / (1 − α); the speed-up over autoregressive
sampling in modelled time (a draft call costs c target calls), measured and by Leviathan et al.'s
(1 − α^{k+1}) / ((1 − α)(k·c + 1)); and the k that maximizes each. A last block does the same for
a bigram draft and target (random tables), whose α varies with the context: there the formula,
fed the mean α, is only an approximation. Target: measured within 2% of the formula (context-free).
"""

from __future__ import annotations

import argparse

import numpy as np

from mlsys_lib.llm.speculative import (CountedModel, acceptance_rate, bigram_model, expected_speedup,
                                       expected_tokens_per_call, pair_with_acceptance, speculative_generate)

VOCAB = 8
KS = (0, 1, 2, 3, 4, 6, 8)


def bigram_pair(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A target table and a draft table near it (mixed with noise), rows = the last token."""
    rng = np.random.default_rng(seed)
    target = rng.dirichlet(np.ones(VOCAB), size=VOCAB)
    return target, 0.6 * target + 0.4 * rng.dirichlet(np.ones(VOCAB), size=VOCAB)


def speedup(draft, target, k: int, tokens: int, length: int, c: float) -> tuple[float, float]:
    """(tokens per target call, speed-up in modelled time) over ``tokens`` tokens in sequences of ``length``."""
    draft, target, rng = CountedModel(draft), CountedModel(target), np.random.default_rng(k)
    for _ in range(tokens // length):
        speculative_generate((0,), draft, target, length, k, rng)
    done = tokens // length * length
    return done / target.calls, done / (target.calls + c * draft.calls)


def sweep(label: str, draft, target, alpha: float, tokens: int, length: int, c: float) -> float:
    """Print one block of rows (one per k); return the worst relative error of the measured speed-up."""
    print(f"\n{label}: α = {alpha:.3f}, c = {c}")
    print(f"{'k':>3} {'tokens/call':>12} {'formula':>8} {'speed-up':>9} {'formula':>8} {'error':>7}")
    measured, worst = {}, 0.0
    for k in KS:
        per_call, measured[k] = speedup(draft, target, k, tokens, length, c)
        error = measured[k] / expected_speedup(alpha, k, c) - 1
        worst = max(worst, abs(error))
        print(f"{k:3d} {per_call:12.3f} {expected_tokens_per_call(alpha, k):8.3f} {measured[k]:9.3f} "
              f"{expected_speedup(alpha, k, c):8.3f} {error:+7.1%}")
    best_formula = max(KS, key=lambda k: expected_speedup(alpha, k, c))
    print(f"best k: measured {max(measured, key=measured.get)}, formula {best_formula}")
    return worst


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=50000, help="tokens generated per (α, k)")
    parser.add_argument("--length", type=int, default=1000, help="tokens per generated sequence")
    parser.add_argument("--c", type=float, default=0.05, help="cost of a draft call / cost of a target call")
    args = parser.parse_args(argv)
    worst = 0.0
    for alpha in (0.5, 0.7, 0.9):
        p, q = pair_with_acceptance(alpha, VOCAB)
        assert abs(acceptance_rate(p, q) - alpha) < 1e-12
        worst = max(worst, sweep("context-free", lambda prefix, q=q: q, lambda prefix, p=p: p,
                                 alpha, args.tokens, args.length, args.c))
    target, draft = bigram_pair(0)
    sweep("bigram (formula with the mean α over contexts)", bigram_model(draft), bigram_model(target),
          acceptance_rate(target, draft), args.tokens, args.length, args.c)
    print(f"\nworst relative error of the measured speed-up, context-free: {worst:.1%} (target: within 2%)")


if __name__ == "__main__":
    main()
