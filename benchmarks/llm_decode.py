"""Decoding with a KV cache against recomputing the whole context, per generated token (Lab 10).

    python benchmarks/llm_decode.py [--repeats 20]

The course's small model (docs/library/llm.md; ``llm.train.small_config``: d_model 64, 2 layers, 4 heads,
2 kv heads) with max_seq_len 512 and random weights, float32, numpy only (``llm.inference``). For each context length
L = 64, 128, 256, 512, the cost of producing the logits of token L + 1:

* **KV cache**: ``decode_step`` of one token over a cache holding L - 1 tokens (it attends over L keys);
  the cache is rewound to L - 1 before every repeat;
* **recompute**: ``forward_numpy`` on all L tokens, the last position's logits.

Both are checked to give the same logits first. A time is the best of ``--repeats`` runs; the two
contenders take turns, so that a load on the machine that comes and goes hits them alike. One
BLAS thread (the matrices are tiny). Targets: the cache ≥ 10× faster at L = 512; its cost grows
about linearly with L (here mostly the fixed cost of one token's projections), recomputation's
faster than linearly (attention over L² pairs).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from mlsys_lib.llm.inference import KVCache, decode_step, forward_numpy, prefill
from mlsys_lib.llm.model import init_params
from mlsys_lib.llm.train import blas_threads, small_config
from mlsys_lib.tensor.roofline import time_best

CONTEXTS = (64, 128, 256, 512)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    config = small_config(max_seq_len=max(CONTEXTS))
    params = init_params(config, seed=0)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, max(CONTEXTS))
    print(f"model: {config}\n")
    print(f"{'context':>8} {'KV cache (ms/token)':>20} {'recompute (ms/token)':>21} {'speed-up':>9}")
    rows = []
    with blas_threads(1):
        for length in CONTEXTS:
            cache = KVCache(config)
            prefill(params, config, cache, tokens[:length - 1])

            def cached(cache=cache, length=length):
                cache.length = length - 1
                return decode_step(params, config, cache, tokens[length - 1])

            def recompute(length=length):
                return forward_numpy(params, config, tokens[:length])[-1]

            np.testing.assert_allclose(cached(), recompute(), rtol=1e-4, atol=1e-5)
            t_cache = t_full = math.inf
            for _ in range(args.repeats):  # in turns
                t_cache, t_full = min(t_cache, time_best(cached, 1)), min(t_full, time_best(recompute, 1))
            rows.append((length, t_cache, t_full))
            print(f"{length:>8} {t_cache * 1e3:>20.3f} {t_full * 1e3:>21.3f} {t_full / t_cache:>8.1f}x")
    (l0, c0, f0), (l1, c1, f1) = rows[0], rows[-1]
    growth = math.log(l1 / l0)
    print(f"\ncost growth from L = {l0} to {l1} ({l1 / l0:.0f}x the context): KV cache {c1 / c0:.1f}x "
          f"(exponent {math.log(c1 / c0) / growth:.2f}), recompute {f1 / f0:.1f}x (exponent {math.log(f1 / f0) / growth:.2f})")
    print(f"speed-up at L = {l1}: {f1 / c1:.1f}x (target >= 10x)")


if __name__ == "__main__":
    main()
