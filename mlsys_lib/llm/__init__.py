"""Transformers and LLM inference (Lab 10): what a model costs, and how a server runs it.

* **Model** (:mod:`.model`, :mod:`.ops`, :mod:`.corpus`, :mod:`.train`): a nanoGPT-style decoder on
  ``mlsys_lib.autodiff``; ``ModelConfig.n_kv_heads`` selects multi-head, grouped-query or multi-query
  attention; ``train(small_config())`` learns the bundled corpus (characters as tokens) in about a minute.
* **Inference** (:mod:`.inference`): a numpy-only forward pass, a contiguous :class:`KVCache`, ``prefill``,
  ``decode_step`` and ``generate``.
* **Accounting** (:mod:`.flops`, :mod:`.count`, :mod:`.mfu`): FLOPs per layer and kind, 6·N·D and its error,
  activation and KV-cache bytes, prefill/decode intensity; ``count_flops()`` records every matmul the
  autodiff graph runs (the oracle of the closed forms); MFU and HFU of a timed training step.
* **Paged KV cache** (:mod:`.paged`): vLLM's block manager (free list, reference counts, copy-on-write),
  ``paged_attention`` through block tables, the contiguous baseline and its fragmentation.
* **Serving** (:mod:`.trace`, :mod:`.serving`): Poisson request traces; a simulator of static and
  continuous batching with preemption by recompute or swap, iteration time from a roofline.
* **Speculative decoding** (:mod:`.speculative`) and **Mixture of Experts** (:mod:`.moe`, expert
  parallelism over ``mlsys_lib.comm``'s ``all_to_all``).
"""

from .corpus import CharTokenizer, batches, load_corpus
from .count import FlopCounter, count_flops
from .flops import (Flops, arithmetic_intensity, forward_flops, kv_cache_bytes_per_token, param_count, phase_cost,
                    six_nd, six_nd_error, training_flops)
from .inference import KVCache, decode_step, forward_numpy, generate, prefill
from .model import ModelConfig, as_tensors, forward, init_params, loss
from .moe import capacity, dispatch, expert_parallel_forward, load_balancing_loss, moe_forward, route_top_k
from .paged import BlockAllocator, ContiguousAllocator, OutOfBlocks, PagedKVCache, fragmentation, paged_attention
from .serving import StepCostModel, latency_vs_load, simulate
from .speculative import (acceptance_rate, expected_speedup, expected_tokens_per_call, speculative_generate,
                          speculative_step)
from .trace import Request, bundled_trace, poisson_trace
from .train import small_config, train

__all__ = [
    "ModelConfig", "init_params", "as_tensors", "forward", "loss", "CharTokenizer", "load_corpus", "batches",
    "small_config", "train", "forward_numpy", "KVCache", "prefill", "decode_step", "generate",
    "Flops", "param_count", "forward_flops", "training_flops", "six_nd", "six_nd_error",
    "kv_cache_bytes_per_token", "phase_cost", "arithmetic_intensity", "count_flops", "FlopCounter",
    "BlockAllocator", "ContiguousAllocator", "OutOfBlocks", "PagedKVCache", "paged_attention", "fragmentation",
    "Request", "poisson_trace", "bundled_trace", "StepCostModel", "simulate", "latency_vs_load",
    "speculative_step", "speculative_generate", "acceptance_rate", "expected_tokens_per_call", "expected_speedup",
    "route_top_k", "capacity", "dispatch", "load_balancing_loss", "moe_forward", "expert_parallel_forward",
]
