"""The transformer of ``llm.model`` in plain numpy (no autodiff, no graph): full forward, KV cache, generation.

Generating token t+1 needs the keys and values of tokens 0..t in every layer. Recomputing them
(:func:`forward_numpy` on the whole context) costs a forward over t tokens per new token, with
attention over t² pairs; a **KV cache** keeps them, so a decode step projects one token and attends
over the t cached keys: linear work per token instead of quadratic.

:class:`KVCache` is the contiguous layout: one array per sequence, preallocated for ``max_len``
positions, (n_layers, 2, n_kv_heads, max_len, head_dim) (2: keys, values). Its bytes scale with
n_kv_heads, so MQA keeps 1/H and GQA H_kv/H of what MHA keeps. Positions never used are still
allocated: the waste that paged attention removes.

Shapes: T tokens, d = d_model, H heads, H_kv kv heads, G = H / H_kv, d_h = head_dim, V vocabulary.
"""

from __future__ import annotations

import math

import numpy as np

from .model import ModelConfig, check_params, check_tokens

GELU_C = math.sqrt(2.0 / math.pi)


class KVCache:
    """Keys and values of one sequence, every layer, in one preallocated array.

    data: (n_layers, 2, n_kv_heads, max_len, head_dim), ``data[l, 0]`` the keys and ``data[l, 1]`` the
    values of layer l; positions 0 .. length-1 are filled. max_len defaults to config.max_seq_len.
    """

    def __init__(self, config: ModelConfig, max_len: int | None = None, dtype=np.float32):
        max_len = config.max_seq_len if max_len is None else max_len
        if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or not 1 <= max_len <= config.max_seq_len:
            raise ValueError(f"KVCache: max_len must be an integer in [1, max_seq_len = {config.max_seq_len}], "
                             f"got {max_len!r}")
        self.config = config
        self.data = np.zeros((config.n_layers, 2, config.n_kv_heads, max_len, config.head_dim), dtype)
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.data.shape[3]

    @property
    def nbytes(self) -> int:
        """Bytes allocated (all max_len positions, used or not)."""
        return self.data.nbytes

    def store(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write k, v (H_kv, t, d_h) of positions start .. start+t-1 into ``layer``; return the keys and values
        of positions 0 .. start+t-1, views (H_kv, start+t, d_h)."""
        end = start + k.shape[-2]
        if end > self.max_len:
            raise ValueError(f"KVCache: positions up to {end - 1} do not fit in max_len = {self.max_len}")
        self.data[layer, 0, :, start:end] = k
        self.data[layer, 1, :, start:end] = v
        return self.data[layer, 0, :, :end], self.data[layer, 1, :, :end]


def norm(params: dict, config: ModelConfig, prefix: str, x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """RMSNorm or LayerNorm ``prefix`` over the last axis of x (..., d), as ``model.norm`` computes it."""
    if config.norm == "rms":
        return x * (np.mean(x * x, axis=-1, keepdims=True) + eps) ** -0.5 * params[f"{prefix}.weight"]
    centered = x - x.mean(axis=-1, keepdims=True)
    variance = np.mean(centered * centered, axis=-1, keepdims=True)
    return centered * (variance + eps) ** -0.5 * params[f"{prefix}.weight"] + params[f"{prefix}.bias"]


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (the autodiff ``gelu``)."""
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x ** 3)))


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the max."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int) -> np.ndarray:
    """Causal attention of t queries at positions start .. start+t-1 over keys at positions 0 .. start+t-1.

    q: (..., H_kv, G, t, d_h); k, v: (..., H_kv, L, d_h) with L = start + t -> (..., H_kv, G, t, d_h).
    Query i sees keys j <= start + i.
    """
    t, n_keys = q.shape[-2], k.shape[-2]
    k, v = k[..., None, :, :], v[..., None, :, :]  # a group axis: the G query heads share their kv head
    scores = q @ np.swapaxes(k, -1, -2) * (1.0 / math.sqrt(q.shape[-1]))
    future = np.arange(n_keys) > start + np.arange(t)[:, None]  # (t, L)
    scores = np.where(future, -np.inf, scores)
    return softmax(scores) @ v


def forward_at(params: dict, config: ModelConfig, tokens: np.ndarray, start: int = 0,
               cache: KVCache | None = None) -> np.ndarray:
    """Logits (..., T, V) of ``tokens`` (..., T) at positions start .. start+T-1.

    Without a cache, start must be 0 and the tokens are the whole context. With a cache (tokens (T,),
    one sequence) the new keys and values are stored at start .. start+T-1 and attention reads all
    of 0 .. start+T-1 from the cache.
    """
    if cache is None and start != 0:
        raise ValueError(f"forward_at: without a cache the tokens must start at position 0, got start = {start}")
    lead, t = tokens.shape[:-1], tokens.shape[-1]
    hkv, g, dh = config.n_kv_heads, config.group_size, config.head_dim
    x = params["wte"][tokens] + params["wpe"][start:start + t]
    for layer in range(config.n_layers):
        p = f"layers.{layer}"
        h = norm(params, config, f"{p}.norm1", x)

        def heads(w: str, groups: int) -> np.ndarray:  # (..., T, d) -> (..., H_kv, groups, T, d_h)
            y = (h @ params[f"{p}.{w}"]).reshape(*lead, t, hkv, groups, dh)
            return np.moveaxis(y, -4, -2)

        q, k, v = heads("wq", g), heads("wk", 1)[..., 0, :, :], heads("wv", 1)[..., 0, :, :]
        if cache is not None:
            k, v = cache.store(layer, start, k, v)
        o = np.moveaxis(attend(q, k, v, start), -2, -4).reshape(*lead, t, config.n_heads * dh)
        x = x + o @ params[f"{p}.wo"]
        h = norm(params, config, f"{p}.norm2", x)
        x = x + gelu(h @ params[f"{p}.w1"]) @ params[f"{p}.w2"]
    return norm(params, config, "norm_f", x) @ params["lm_head"]


def forward_numpy(params: dict[str, np.ndarray], config: ModelConfig, tokens) -> np.ndarray:
    """Logits (..., T, V) for integer tokens (..., T): the same numbers as ``model.forward``, in numpy.

    params: the arrays of ``model.init_params`` (any float dtype; the logits take it).
    """
    check_params(params, config)
    return forward_at(params, config, check_tokens(tokens, config))


def prefill(params: dict[str, np.ndarray], config: ModelConfig, cache: KVCache, tokens) -> np.ndarray:
    """Run tokens (T,) at positions cache.length .. cache.length+T-1, storing their keys and values:
    logits (T, V). On an empty cache this is the prompt; on a filled one, a chunk appended to it."""
    check_params(params, config)
    if cache.config != config:
        raise ValueError(f"prefill: the cache was made for {cache.config}, not for {config}")
    tokens = check_tokens(tokens, config, start=cache.length)
    if tokens.ndim != 1:
        raise ValueError(f"prefill: tokens must be one sequence (T,), got shape {tokens.shape}")
    logits = forward_at(params, config, tokens, cache.length, cache)
    cache.length += tokens.shape[0]
    return logits


def decode_step(params: dict[str, np.ndarray], config: ModelConfig, cache: KVCache, token: int) -> np.ndarray:
    """Logits (V,) of the token after ``token``, which sits at position cache.length; the cache grows by one."""
    return prefill(params, config, cache, np.array([token]))[0]


def sample(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """A token id from logits (V,): the argmax at temperature 0, else a draw from softmax(logits / temperature)."""
    if temperature == 0:
        return int(np.argmax(logits))
    probs = softmax(np.asarray(logits, np.float64) / temperature)
    return int(rng.choice(len(probs), p=probs))


def generate(params: dict[str, np.ndarray], config: ModelConfig, prompt, n: int, temperature: float = 1.0,
             rng: np.random.Generator | int | None = None) -> np.ndarray:
    """n new token ids (n,) after ``prompt`` (T,) (integers, T >= 1), decoded with a KV cache.

    temperature: 0 picks the most likely token (greedy), larger values flatten the distribution.
    rng: a Generator or seed for sampling. The model sees at most max_seq_len positions: a longer
    prompt is cut to its last max_seq_len tokens, and when the cache is full it is refilled from the
    most recent max_seq_len // 2 tokens (a prefill), so n is not limited. Up to that point the tokens
    are those of recomputing the whole context at every step.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"generate: n must be an integer >= 0, got {n!r}")
    if not temperature >= 0:
        raise ValueError(f"generate: temperature must be >= 0, got {temperature}")
    prompt = np.asarray(prompt)
    if prompt.ndim != 1 or prompt.size < 1:
        raise ValueError(f"generate: the prompt must have shape (T,) with T >= 1, got {prompt.shape}")
    rng = np.random.default_rng(rng)
    cache = KVCache(config, dtype=params["wte"].dtype)
    out = np.empty(n, np.int64)
    logits = prefill(params, config, cache, prompt[-cache.max_len:])[-1]
    for i in range(n):
        out[i] = sample(logits, temperature, rng)
        if i + 1 == n:
            break
        if cache.length < cache.max_len:
            logits = decode_step(params, config, cache, out[i])
        else:  # full: start again from the recent half of the context
            cache.length = 0
            recent = np.concatenate([prompt, out[:i + 1]])[-max(1, cache.max_len // 2):]
            logits = prefill(params, config, cache, recent)[-1]
    return out
