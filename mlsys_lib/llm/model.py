"""A small decoder-only transformer (GPT) on ``mlsys_lib.autodiff``, in the spirit of nanoGPT.

The parameters are a dict of named arrays (:func:`init_params`); the model is a function of them::

    x = wte[tokens] + wpe[0..T)                          token + learned position embeddings (B, T, d)
    for each layer:  x = x + attention(norm1(x))          pre-norm residual blocks
                     x = x + mlp(norm2(x))
    logits = norm_f(x) @ lm_head                          (B, T, V); untied head

attention: q = x Wq (H heads), k = x Wk and v = x Wv (H_kv heads), no biases; each group of
G = H / H_kv query heads shares one key/value head (query head h reads kv head h // G): H_kv = H is
multi-head attention (MHA), H_kv = 1 multi-query (MQA), in between grouped-query (GQA). Scores
q kᵀ / √d_h with a causal mask, softmax, o = P v, y = o Wo. mlp: GELU(x W1) W2, no biases.

The training forward (:func:`forward`, :func:`loss`) runs on autodiff Tensors; ``llm.inference`` runs
the same model in plain numpy for generation. Shapes: B batch, T sequence length, d = d_model,
H heads, H_kv key/value heads, d_h = d / H, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..autodiff import Tensor, cross_entropy, gelu, layer_norm, softmax
from .ops import embedding, rms_norm

NORMS = ("rms", "layer")


@dataclass(frozen=True)
class ModelConfig:
    """The shape of the model.

    vocab_size: V tokens; d_model: width d; n_layers: blocks; n_heads: query heads H; n_kv_heads: key/value
    heads H_kv (divides H); d_ff: MLP hidden width; max_seq_len: the most positions (rows of ``wpe``);
    norm: "rms" (RMSNorm, a weight) or "layer" (LayerNorm, a weight and a bias).
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    max_seq_len: int
    norm: str = "rms"

    def __post_init__(self):
        for field in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"ModelConfig: {field} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"ModelConfig: d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"ModelConfig: n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads}); "
                             f"n_kv_heads = n_heads is MHA, 1 is MQA, a divisor in between GQA")
        if self.norm not in NORMS:
            raise ValueError(f"ModelConfig: norm must be one of {NORMS}, got {self.norm!r}")

    @property
    def head_dim(self) -> int:
        """d_h = d_model // n_heads, the width of one head."""
        return self.d_model // self.n_heads

    @property
    def group_size(self) -> int:
        """G = n_heads // n_kv_heads: query heads per key/value head."""
        return self.n_heads // self.n_kv_heads

    @property
    def attention_kind(self) -> str:
        """"MHA" (H_kv = H), "MQA" (H_kv = 1 < H) or "GQA" (in between)."""
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    def n_params(self) -> int:
        """The number of parameters (elements of every array :func:`init_params` returns)."""
        return sum(math.prod(shape) for shape in param_shapes(self).values())


def param_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter, in a stable order (embeddings, layers in order, final norm, head)."""
    d, dh = config.d_model, config.head_dim

    def norm(prefix: str) -> dict[str, tuple[int, ...]]:
        return {f"{prefix}.weight": (d,), **({f"{prefix}.bias": (d,)} if config.norm == "layer" else {})}

    shapes = {"wte": (config.vocab_size, d), "wpe": (config.max_seq_len, d)}
    for layer in range(config.n_layers):
        p = f"layers.{layer}"
        shapes.update(norm(f"{p}.norm1"))
        shapes.update({f"{p}.wq": (d, config.n_heads * dh), f"{p}.wk": (d, config.n_kv_heads * dh),
                       f"{p}.wv": (d, config.n_kv_heads * dh), f"{p}.wo": (config.n_heads * dh, d)})
        shapes.update(norm(f"{p}.norm2"))
        shapes.update({f"{p}.w1": (d, config.d_ff), f"{p}.w2": (config.d_ff, d)})
    shapes.update(norm("norm_f"))
    shapes["lm_head"] = (d, config.vocab_size)
    return shapes


def init_params(config: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Fresh float32 parameters, GPT-2 style: weights ~ N(0, 0.02²), the two projections that write into the
    residual stream (wo, w2) scaled down by √(2 n_layers); norm weights 1, norm biases 0."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(config).items():
        if name.endswith(".weight"):
            params[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            params[name] = np.zeros(shape, np.float32)
        else:
            std = 0.02 / math.sqrt(2 * config.n_layers) if name.endswith((".wo", ".w2")) else 0.02
            params[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return params


def check_params(params: dict, config: ModelConfig) -> None:
    """ValueError naming the first parameter that is missing or has the wrong shape (arrays or Tensors)."""
    for name, shape in param_shapes(config).items():
        if name not in params:
            raise ValueError(f"parameter {name!r} is missing (expected shape {shape})")
        if tuple(params[name].shape) != shape:
            raise ValueError(f"parameter {name!r} has shape {tuple(params[name].shape)}, expected {shape}")


def check_tokens(tokens: np.ndarray, config: ModelConfig, start: int = 0) -> np.ndarray:
    """``tokens`` as an integer array, checked: ids in [0, V), positions start .. start+T-1 < max_seq_len."""
    tokens = np.asarray(tokens)
    if not np.issubdtype(tokens.dtype, np.integer):
        raise TypeError(f"tokens must be integers, got {tokens.dtype}")
    if tokens.ndim < 1 or tokens.shape[-1] < 1:
        raise ValueError(f"tokens must have shape (..., T) with T >= 1, got {tokens.shape}")
    if start + tokens.shape[-1] > config.max_seq_len:
        raise ValueError(f"positions {start}..{start + tokens.shape[-1] - 1} exceed max_seq_len "
                         f"({config.max_seq_len})")
    if tokens.min() < 0 or tokens.max() >= config.vocab_size:
        raise ValueError(f"token ids must lie in [0, {config.vocab_size}), got values in [{tokens.min()}, {tokens.max()}]")
    return tokens


def as_tensors(params: dict[str, np.ndarray], requires_grad: bool = True) -> dict[str, Tensor]:
    """Wrap each array in a Tensor without copying (so an optimizer updating the Tensors updates the arrays)."""
    return {name: Tensor(value, requires_grad=requires_grad, name=name) for name, value in params.items()}


def causal_mask(t: int, dtype) -> np.ndarray:
    """(T, T) additive mask: 0 where key j <= query i, -inf above the diagonal (softmax gives it weight 0)."""
    return np.triu(np.full((t, t), -np.inf, dtype), k=1)


def norm(params: dict, config: ModelConfig, prefix: str, x: Tensor) -> Tensor:
    """The norm ``prefix`` ("layers.0.norm1", ..., "norm_f") applied over the last axis of x (..., d)."""
    if config.norm == "rms":
        return rms_norm(x, params[f"{prefix}.weight"])
    return layer_norm(x, params[f"{prefix}.weight"], params[f"{prefix}.bias"])


def attention(params: dict, config: ModelConfig, layer: int, x: Tensor) -> Tensor:
    """Causal self-attention of layer ``layer``: x (B, T, d) -> (B, T, d).

    Heads are laid out as (H_kv, G): query head h = kv·G + g reads kv head kv. Keys and values get a
    size-1 group axis and broadcast over the G query heads of their group (no copies), so one batched
    matmul covers MHA, GQA and MQA alike.
    """
    b, t, _ = x.shape
    hkv, g, dh = config.n_kv_heads, config.group_size, config.head_dim
    p = f"layers.{layer}"

    def heads(w: str, groups: int) -> Tensor:  # (B, T, d) @ (d, H_kv·groups·d_h) -> (B, H_kv, groups, T, d_h)
        return (x @ params[f"{p}.{w}"]).reshape(b, t, hkv, groups, dh).transpose((0, 2, 3, 1, 4))

    q, k, v = heads("wq", g), heads("wk", 1), heads("wv", 1)
    scores = q @ k.transpose((0, 1, 2, 4, 3)) * (1.0 / math.sqrt(dh)) + causal_mask(t, x.dtype)  # (B, H_kv, G, T, T)
    o = softmax(scores, axis=-1) @ v  # (B, H_kv, G, T, d_h)
    return o.transpose((0, 3, 1, 2, 4)).reshape(b, t, config.n_heads * dh) @ params[f"{p}.wo"]


def mlp(params: dict, layer: int, x: Tensor) -> Tensor:
    """GELU(x W1) W2 for x (..., d) -> (..., d)."""
    return gelu(x @ params[f"layers.{layer}.w1"]) @ params[f"layers.{layer}.w2"]


def embed(params: dict, config: ModelConfig, tokens: np.ndarray) -> Tensor:
    """Token plus position embeddings: tokens (B, T) integers -> (B, T, d)."""
    tokens = check_tokens(tokens, config)
    return embedding(params["wte"], tokens) + embedding(params["wpe"], np.arange(tokens.shape[-1]))


def block(params: dict, config: ModelConfig, layer: int, x: Tensor) -> Tensor:
    """One pre-norm residual block: x + attention(norm1(x)), then + mlp(norm2(·)). (B, T, d) -> (B, T, d)."""
    p = f"layers.{layer}"
    x = x + attention(params, config, layer, norm(params, config, f"{p}.norm1", x))
    return x + mlp(params, layer, norm(params, config, f"{p}.norm2", x))


def head(params: dict, config: ModelConfig, x: Tensor) -> Tensor:
    """Final norm and the untied output projection: (B, T, d) -> logits (B, T, V)."""
    return norm(params, config, "norm_f", x) @ params["lm_head"]


def forward(params: dict[str, Tensor], config: ModelConfig, tokens: np.ndarray) -> Tensor:
    """Logits (B, T, V) of next tokens for integer tokens (B, T), T <= max_seq_len.

    params: the arrays of :func:`init_params` as Tensors (:func:`as_tensors`); position t's logits
    depend on tokens 0..t only (the causal mask).
    """
    check_params(params, config)
    if np.ndim(tokens) != 2:
        raise ValueError(f"forward: tokens must have shape (B, T), got {np.shape(tokens)}")
    x = embed(params, config, tokens)
    for layer in range(config.n_layers):
        x = block(params, config, layer, x)
    return head(params, config, x)


def loss(params: dict[str, Tensor], config: ModelConfig, tokens: np.ndarray, targets: np.ndarray) -> Tensor:
    """Mean cross-entropy (nats per token) of predicting ``targets`` (B, T) from ``tokens`` (B, T): a scalar."""
    targets = np.asarray(targets)
    if targets.shape != np.shape(tokens):
        raise ValueError(f"loss: targets have shape {targets.shape}, tokens {np.shape(tokens)}")
    logits = forward(params, config, tokens)
    return next_token_loss(logits, targets)


def next_token_loss(logits: Tensor, targets: np.ndarray) -> Tensor:
    """Mean cross-entropy of logits (B, T, V) against integer targets (B, T): a scalar Tensor."""
    b, t, v = logits.shape
    return cross_entropy(logits.reshape(b * t, v), np.asarray(targets).reshape(b * t))
