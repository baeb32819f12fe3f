"""FLOPs, parameters, activation memory, KV-cache bytes and arithmetic intensity of the transformer, in closed form.

Conventions (the shared spec): a matmul (m, k) @ (k, n) costs 2·m·k·n FLOPs; the attention score and
P @ V matmuls are counted dense (the causal mask does not halve them); the embedding lookups cost 0;
elementwise work (norms, softmax, GELU, residual adds, the loss) is not counted: it is O(N·d) against
the matmuls' O(N·d²). ``llm.count`` counts the matmuls the autodiff graph actually runs; the tests
check these formulas against it exactly.

Symbols: B batch, T tokens per sequence, N = B·T tokens, d = d_model, H heads, H_kv kv heads,
d_h = head_dim (H·d_h = d), f = d_ff, V vocabulary, L layers, S = max_seq_len.

Forward FLOPs of one layer, by kind:

    qkv     2·N·d·(H + 2·H_kv)·d_h      q, k, v projections (GQA/MQA shrink k and v)
    out     2·N·(H·d_h)·d               output projection
    scores  2·B·H·T·T·d_h               q kᵀ for every head (dense)
    pv      2·B·H·T·T·d_h               P v
    mlp     2·N·d·f · 2                 W1 and W2
and once for the model: lm_head 2·N·d·V.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import ModelConfig

LAYER_KINDS = ("qkv", "out", "scores", "pv", "mlp")
ATTENTION_KINDS = ("scores", "pv")


@dataclass(frozen=True)
class Flops:
    """FLOPs of one pass over ``tokens`` tokens.

    layer: FLOPs of one transformer layer by kind (:data:`LAYER_KINDS`; every layer is the same);
    lm_head: FLOPs of the output projection; n_layers: L; tokens: the tokens run (B·T, or B for a decode step).
    """

    layer: dict[str, int]
    lm_head: int
    n_layers: int
    tokens: int

    @property
    def by_kind(self) -> dict[str, int]:
        """FLOPs of each kind summed over the layers, and "lm_head"."""
        return {**{kind: self.n_layers * flops for kind, flops in self.layer.items()}, "lm_head": self.lm_head}

    @property
    def per_layer(self) -> int:
        """FLOPs of one layer, all kinds."""
        return sum(self.layer.values())

    @property
    def attention(self) -> int:
        """FLOPs of the score and P @ V matmuls, all layers: the part that grows with T² (the rest grows with T)."""
        return self.n_layers * sum(self.layer[kind] for kind in ATTENTION_KINDS)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    @property
    def per_token(self) -> float:
        return self.total / self.tokens

    def scaled(self, factor: int) -> Flops:
        """Every entry times ``factor``."""
        return Flops({k: factor * v for k, v in self.layer.items()}, factor * self.lm_head, self.n_layers, self.tokens)


@dataclass(frozen=True)
class TrainingFlops:
    """FLOPs of one training step: forward, backward, and their sum ``total``."""

    forward: Flops
    backward: Flops

    @property
    def total(self) -> int:
        return self.forward.total + self.backward.total


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def matmul_param_count(config: ModelConfig) -> int:
    """Parameters that are a matmul operand, those that cost FLOPs: per layer the attention weights
    d·(H + 2·H_kv)·d_h + H·d_h·d and the MLP's 2·d·f, and the head d·V."""
    d, dh = config.d_model, config.head_dim
    attention = d * (config.n_heads + 2 * config.n_kv_heads) * dh + config.n_heads * dh * d
    return config.n_layers * (attention + 2 * d * config.d_ff) + d * config.vocab_size


def param_count(config: ModelConfig) -> int:
    """All parameters: the matmul weights (:func:`matmul_param_count`), the embedding tables V·d + S·d, and
    2·L + 1 norms (d each for RMSNorm, 2·d for LayerNorm)."""
    norm = config.d_model if config.norm == "rms" else 2 * config.d_model
    embeddings = (config.vocab_size + config.max_seq_len) * config.d_model
    return matmul_param_count(config) + embeddings + (2 * config.n_layers + 1) * norm


def _pass_flops(config: ModelConfig, batch: int, queries: int, keys: int) -> Flops:
    """Forward FLOPs of ``batch`` sequences, each running ``queries`` new tokens that attend over ``keys`` keys."""
    d, dh, h = config.d_model, config.head_dim, config.n_heads
    n = batch * queries
    layer = {
        "qkv": 2 * n * d * (h + 2 * config.n_kv_heads) * dh,
        "out": 2 * n * h * dh * d,
        "scores": 2 * batch * h * queries * keys * dh,
        "pv": 2 * batch * h * queries * keys * dh,
        "mlp": 2 * 2 * n * d * config.d_ff,
    }
    return Flops(layer, 2 * n * d * config.vocab_size, config.n_layers, n)


def forward_flops(config: ModelConfig, batch: int, seq: int) -> Flops:
    """Forward FLOPs of ``batch`` sequences of ``seq`` tokens (training, or a prefill), by layer and kind."""
    _check_positive(batch=batch, seq=seq)
    if seq > config.max_seq_len:
        raise ValueError(f"seq ({seq}) exceeds max_seq_len ({config.max_seq_len})")
    return _pass_flops(config, batch, seq, seq)


def decode_flops(config: ModelConfig, batch: int, context: int) -> Flops:
    """Forward FLOPs of one decode step: ``batch`` sequences each run 1 new token whose attention reads ``context``
    keys (the new token included, so a KV cache holding context - 1 tokens before the step)."""
    _check_positive(batch=batch, context=context)
    if context > config.max_seq_len:
        raise ValueError(f"context ({context}) exceeds max_seq_len ({config.max_seq_len})")
    return _pass_flops(config, batch, 1, context)


def training_flops(config: ModelConfig, batch: int, seq: int) -> TrainingFlops:
    """FLOPs of a forward and backward pass: the backward of every matmul costs twice its forward.

    For C = A B with A (m, k), B (k, n), the backward computes Ā = C̄ Bᵀ and B̄ = Aᵀ C̄: 2·m·k·n FLOPs
    each, so 2× the forward **when both operands need a gradient**. Here every matmul operand does:
    weights are parameters, and activations (even layer 0's input) derive from the learned
    embeddings; q, k, v, P all derive from parameters. It does not hold where an operand needs no
    gradient: a first layer reading raw data (no Ā: backward = 1× forward), frozen weights (fine-tuning,
    LoRA: no B̄), or an inference-only pass (0×). The weight gradients of a batch are summed over the
    batch inside the B̄ matmul (no extra FLOPs counted).
    """
    forward = forward_flops(config, batch, seq)
    return TrainingFlops(forward, forward.scaled(2))


def six_nd(config: ModelConfig, tokens: int) -> int:
    """The rule of thumb for training FLOPs: 6 · N · D, N parameters (:func:`param_count`), D tokens."""
    _check_positive(tokens=tokens)
    return 6 * param_count(config) * tokens


@dataclass(frozen=True)
class SixNDGap:
    """6·N·D against the exact training FLOPs of D = B·T tokens. ``exact = six_nd - free_params + attention``.

    six_nd: 6·N·D. exact: :func:`training_flops` ``.total``. attention: the score and P @ V matmuls,
    forward and backward (12·L·H·d_h·T per token), which 6·N·D leaves out and which grows with T.
    free_params: 6·D·(parameters that are no matmul operand: embedding tables, norms), which 6·N·D
    counts although a lookup or a norm weight costs no matmul FLOPs.
    """

    six_nd: int
    exact: int
    attention: int
    free_params: int

    @property
    def relative_error(self) -> float:
        """(6·N·D - exact) / exact: > 0 where embeddings dominate (short T, small d), < 0 where attention does."""
        return (self.six_nd - self.exact) / self.exact


def six_nd_error(config: ModelConfig, seq: int, batch: int = 1) -> SixNDGap:
    """How far 6·N·D is from the exact training FLOPs at sequence length ``seq`` (per B·T tokens).

    Exact: 6·D·N_matmul + attention, where N_matmul counts only matmul weights. So 6·N·D is exact when
    the embeddings and norms are negligible against N and T ≪ 6·d (attention's 12·L·d·T per token is
    small against 6·N_matmul ≈ 6·L·(4 + 2f/d)·d² per token); it overcounts small models with large
    vocabularies or long position tables, and undercounts long contexts.
    """
    flops = training_flops(config, batch, seq)
    tokens = batch * seq
    return SixNDGap(six_nd=six_nd(config, tokens), exact=flops.total,
                    attention=flops.forward.attention + flops.backward.attention,
                    free_params=6 * tokens * (param_count(config) - matmul_param_count(config)))


def activation_bytes(config: ModelConfig, batch: int, seq: int, dtype_bytes: int = 4) -> int:
    """Bytes of the activations a training step keeps for its backward pass (no recomputation).

    The tensors a hand-written backward needs, following Korthikanti et al. (2022) §4.1 without
    dropout (``memory.transformer_layer_activation_bytes(..., dropout=False)`` when H_kv = H, f = 4d):
    per layer, N·(2d norm inputs + 2d norm outputs, which feed the q/k/v projections and W1,
    + (H + 2·H_kv)·d_h for q, k, v + H·d_h for the attention output, which feeds Wo, + 2f for the GELU input
    and output, which feeds W2) elements, plus B·H·T² softmax probabilities; after the layers the final
    norm's input and output (2·N·d) and the logits (N·V, for the softmax's gradient).
    An autodiff graph keeps more (every intermediate of the composite ops).
    """
    _check_positive(batch=batch, seq=seq, dtype_bytes=dtype_bytes)
    d, dh, n = config.d_model, config.head_dim, batch * seq
    per_layer = n * (4 * d + (2 * config.n_heads + 2 * config.n_kv_heads) * dh + 2 * config.d_ff) \
        + batch * config.n_heads * seq * seq
    return dtype_bytes * (config.n_layers * per_layer + n * (2 * d + config.vocab_size))


def kv_cache_bytes_per_token(config: ModelConfig, dtype_bytes: int = 4) -> int:
    """Bytes of keys and values one token keeps in the cache: 2 · L · H_kv · d_h · dtype_bytes.

    MHA keeps 2·L·d per token; GQA H_kv/H of that; MQA 1/H.
    """
    _check_positive(dtype_bytes=dtype_bytes)
    return 2 * config.n_layers * config.n_kv_heads * config.head_dim * dtype_bytes


@dataclass(frozen=True)
class PhaseCost:
    """FLOPs and bytes moved by one prefill or decode step; ``intensity`` = flops / bytes (FLOP/byte)."""

    flops: int
    weight_bytes: int
    kv_bytes: int
    activation_bytes: int

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.activation_bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def phase_cost(config: ModelConfig, batch: int, context: int, phase: str = "decode",
               dtype_bytes: int = 4) -> PhaseCost:
    """FLOPs and bytes of a step of ``batch`` sequences, each with ``context`` tokens.

    phase "prefill": each sequence runs its ``context`` prompt tokens (:func:`forward_flops`);
    phase "decode": each runs 1 new token attending over ``context`` keys (:func:`decode_flops`).

    Bytes model (what moves between memory and the chip, every tensor ``dtype_bytes`` per element):
    * weights: every parameter read once per step, whatever the batch: param_count · dtype_bytes;
    * KV: the keys and values of the B·context tokens, written once (prefill) or read once (decode):
      B · context · :func:`kv_cache_bytes_per_token`;
    * activations: per processed token, the residual stream read and written once per layer and the
      logits written, (2·L·d + V) · dtype_bytes; intermediates (q, P, the MLP hidden) are assumed to stay on
      chip, as in a fused (FlashAttention-style) kernel.
    Decode reads all the weights to produce B tokens, 2 FLOPs per weight per token: intensity ≈ 2·B / dtype_bytes
    FLOP/byte, until the KV reads, which grow with B·context, take over (then ≈ 2·(H/H_kv) / dtype_bytes, whatever
    B: GQA and MQA raise it). Prefill amortizes the weights over B·context tokens.
    """
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase must be 'prefill' or 'decode', got {phase!r}")
    _check_positive(dtype_bytes=dtype_bytes)
    if phase == "prefill":
        flops, tokens = forward_flops(config, batch, context), batch * context
    else:
        flops, tokens = decode_flops(config, batch, context), batch
    return PhaseCost(flops=flops.total, weight_bytes=param_count(config) * dtype_bytes,
                     kv_bytes=batch * context * kv_cache_bytes_per_token(config, dtype_bytes),
                     activation_bytes=tokens * (2 * config.n_layers * config.d_model + config.vocab_size) * dtype_bytes)


def arithmetic_intensity(config: ModelConfig, batch: int, context: int, phase: str = "decode",
                         dtype_bytes: int = 4) -> float:
    """FLOPs per byte moved of a prefill or decode step (see :func:`phase_cost` for the bytes model)."""
    return phase_cost(config, batch, context, phase, dtype_bytes).intensity
