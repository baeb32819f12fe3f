"""mlsys_lib.llm accounting: closed-form FLOPs, parameters, memory and intensity against the counted graph.

Oracles: the matmuls the autodiff graph executes (``count_flops``), the parameter arrays themselves,
the KV cache's own array, Korthikanti et al.'s activation formula in ``mlsys_lib.memory``, and plain
backpropagation for the checkpointed step.
"""

import math

import numpy as np
import pytest

from mlsys_lib.autodiff import linear, matmul
from mlsys_lib.autodiff.linalg import Linear, MatMul
from mlsys_lib.llm.count import count_flops
from mlsys_lib.llm.flops import (activation_bytes, arithmetic_intensity, decode_flops, forward_flops,
                                 kv_cache_bytes_per_token, param_count, phase_cost, six_nd, six_nd_error,
                                 training_flops)
from mlsys_lib.llm.inference import KVCache
from mlsys_lib.llm.mfu import hfu, measure_peak_flops, measure_training_step, mfu, model_layers
from mlsys_lib.llm.model import ModelConfig, as_tensors, init_params, loss, next_token_loss
from mlsys_lib.memory import checkpointed_gradients, transformer_layer_activation_bytes

BATCH, SEQ = 3, 7  # seq not a power of two, and unlike every model size below


def config(n_kv_heads=2, norm="rms", **changes):
    """d 24, d_h 6, f 40, V 29: every matmul's shape tells its kind."""
    sizes = dict(vocab_size=29, d_model=24, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, d_ff=40, max_seq_len=16,
                 norm=norm)
    return ModelConfig(**{**sizes, **changes})


CONFIGS = [pytest.param(config(h, norm), id=f"{kind}-{norm}")
           for h, kind in ((4, "MHA"), (2, "GQA"), (1, "MQA")) for norm in ("rms", "layer")]


def counted_step(cfg, batch=BATCH, seq=SEQ):
    """(forward counter, backward counter) of one loss + backward on random tokens."""
    rng = np.random.default_rng(0)
    tokens, targets = rng.integers(0, cfg.vocab_size, (2, batch, seq))
    params = as_tensors(init_params(cfg))
    with count_flops() as fwd:
        value = loss(params, cfg, tokens, targets)
    with count_flops() as bwd:
        value.backward()
    return fwd, bwd


def kind_of(record, cfg, seq):
    """The kind of a forward matmul from its shapes (weights are 2-D; attention's operands are batched)."""
    k, n = record.a_shape[-1], record.b_shape[-1]
    if len(record.b_shape) > 2:
        return "scores" if (k, n) == (cfg.head_dim, seq) else "pv" if (k, n) == (seq, cfg.head_dim) else "?"
    if n == cfg.vocab_size:
        return "lm_head"
    return "mlp" if cfg.d_ff in (k, n) else "projections"


@pytest.mark.parametrize("cfg", CONFIGS)
def test_param_count_is_the_number_of_parameter_elements(cfg):
    assert param_count(cfg) == sum(v.size for v in init_params(cfg).values()) == cfg.n_params()


@pytest.mark.parametrize("cfg", CONFIGS)
def test_forward_and_training_flops_equal_the_counted_graph_exactly(cfg):
    fwd, bwd = counted_step(cfg)
    closed = training_flops(cfg, BATCH, SEQ)
    assert fwd.total == closed.forward.total
    assert bwd.total == closed.backward.total == 2 * fwd.total
    counted = {}
    for record in fwd.records:
        kind = kind_of(record, cfg, SEQ)
        counted[kind] = counted.get(kind, 0) + record.flops
    by_kind = closed.forward.by_kind
    assert counted == {"projections": by_kind["qkv"] + by_kind["out"], "scores": by_kind["scores"],
                       "pv": by_kind["pv"], "mlp": by_kind["mlp"], "lm_head": by_kind["lm_head"]}
    assert closed.forward.per_layer * cfg.n_layers + closed.forward.lm_head == fwd.total


def test_the_breakdown_by_kind_and_per_token():
    cfg = config(1)
    f = forward_flops(cfg, 2, 5)
    n, d, dh = 10, 24, 6
    assert f.layer == {"qkv": 2 * n * d * (4 + 2) * dh, "out": 2 * n * d * d, "scores": 2 * 2 * 4 * 5 * 5 * dh,
                       "pv": 2 * 2 * 4 * 5 * 5 * dh, "mlp": 4 * n * d * 40}
    assert f.lm_head == 2 * n * d * 29 and f.per_token == f.total / n
    assert f.attention == 2 * (f.layer["scores"] + f.layer["pv"])
    with pytest.raises(ValueError, match=r"seq \(17\) exceeds max_seq_len \(16\)"):
        forward_flops(cfg, 1, 17)
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        forward_flops(cfg, 0, 4)


def test_decode_flops_are_one_query_over_the_context():
    cfg = config(2)
    step, one = decode_flops(cfg, 4, 9), forward_flops(cfg, 4, 1)
    for kind in ("qkv", "out", "mlp"):
        assert step.layer[kind] == one.layer[kind]
    assert step.layer["scores"] == step.layer["pv"] == 2 * 4 * cfg.n_heads * 9 * cfg.head_dim
    assert step.lm_head == one.lm_head and step.tokens == 4


def test_count_flops_restores_the_ops_and_nests():
    originals = MatMul.forward, Linear.forward
    a, b = np.ones((2, 3, 4)), np.ones((4, 5))
    with count_flops() as outer:
        matmul(a, b)
        with count_flops() as inner:
            linear(a, b, np.ones(5))
    assert (MatMul.forward, Linear.forward) == originals
    assert inner.total == 2 * 4 * 2 * 3 * 5 and outer.total == 2 * inner.total
    assert outer.records[0].out_shape == (2, 3, 5)
    with pytest.raises(RuntimeError), count_flops():
        raise RuntimeError("boom")
    assert (MatMul.forward, Linear.forward) == originals


def test_six_nd_misses_attention_and_counts_free_parameters():
    cfg = config(4, max_seq_len=512, n_layers=4)
    for seq in (8, 100, 512):
        gap = six_nd_error(cfg, seq, batch=2)
        assert gap.six_nd == six_nd(cfg, 2 * seq) == 6 * param_count(cfg) * 2 * seq
        assert gap.exact == training_flops(cfg, 2, seq).total
        assert gap.exact == gap.six_nd - gap.free_params + gap.attention
        assert gap.attention == 2 * seq * 12 * cfg.n_layers * cfg.d_model * seq
    errors = [six_nd_error(cfg, seq).relative_error for seq in (8, 100, 512)]
    assert errors[0] > 0 > errors[-1] and errors == sorted(errors, reverse=True)  # attention's share grows with T


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_kv_cache_bytes_per_token_match_the_cache_array(n_kv_heads):
    cfg = config(n_kv_heads)
    assert KVCache(cfg, max_len=10).nbytes == 10 * kv_cache_bytes_per_token(cfg, 4)
    assert kv_cache_bytes_per_token(cfg, 2) * cfg.n_heads == kv_cache_bytes_per_token(config(4), 2) * n_kv_heads


def test_activation_bytes_follow_korthikanti_for_mha():
    cfg = config(4, d_ff=96)  # f = 4d as in the paper
    n = 2 * 5
    head = n * (2 * 24 + 29) * 2
    per_layer = transformer_layer_activation_bytes(seq_len=5, batch=2, hidden=24, heads=4, bytes_per_element=2,
                                                   dropout=False)
    assert activation_bytes(cfg, 2, 5, dtype_bytes=2) == 2 * per_layer + head
    fewer_kv = activation_bytes(config(4, d_ff=96), 2, 5) - activation_bytes(config(1, d_ff=96), 2, 5)
    assert fewer_kv == 2 * n * 2 * 3 * 6 * 4  # L · N · (k and v) · (H - H_kv) · d_h · 4 bytes


def test_arithmetic_intensity_of_prefill_and_decode():
    cfg = config(2, max_seq_len=512)
    cost = phase_cost(cfg, 3, 8, "decode", dtype_bytes=2)
    assert cost.flops == decode_flops(cfg, 3, 8).total
    assert cost.weight_bytes == 2 * param_count(cfg) and cost.kv_bytes == 3 * 8 * kv_cache_bytes_per_token(cfg, 2)
    assert cost.activation_bytes == 3 * (2 * 2 * 24 + 29) * 2
    assert arithmetic_intensity(cfg, 3, 8, "decode", 2) == cost.flops / cost.bytes
    decode = [arithmetic_intensity(cfg, b, 16, "decode") for b in (1, 4, 16)]
    assert decode == sorted(decode) and decode[-1] > 5 * decode[0]  # batching amortizes the weights
    assert arithmetic_intensity(cfg, 1, 256, "prefill") > 20 * decode[0]
    # long contexts: KV reads dominate, intensity tends to 2 (H / H_kv) / dtype_bytes whatever the batch
    long = {h: arithmetic_intensity(config(h, max_seq_len=10 ** 6), 64, 10 ** 6, "decode", 2) for h in (4, 1)}
    assert long[4] == pytest.approx(2 * 1 / 2, rel=0.02) and long[1] == pytest.approx(2 * 4 / 2, rel=0.02)
    with pytest.raises(ValueError, match="phase must be 'prefill' or 'decode'"):
        arithmetic_intensity(cfg, 1, 4, "train")


def test_checkpointed_layers_give_the_gradients_of_plain_backprop():
    cfg = config(2, "layer")
    params = as_tensors(init_params(cfg, 1))
    rng = np.random.default_rng(0)
    tokens, targets = rng.integers(0, cfg.vocab_size, (2, BATCH, SEQ))
    loss(params, cfg, tokens, targets).backward()
    layers = model_layers(params, cfg)
    run = checkpointed_gradients(layers, tokens.astype(np.float32), lambda z: next_token_loss(z, targets), every=2)
    by_id = {id(p): g for p, g in zip([p for layer in layers for p in layer.parameters()], run.grads)}
    assert len(by_id) == len(params)
    for name, p in params.items():
        np.testing.assert_allclose(by_id[id(p)], p.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)


def test_hfu_counts_recomputation_and_mfu_does_not():
    cfg = config(2)
    peak = measure_peak_flops(sizes=(128, 256), repeats=3)
    plain = measure_training_step(cfg, BATCH, SEQ)
    ckpt = measure_training_step(cfg, BATCH, SEQ, checkpoint=True)
    assert plain.model_flops == plain.hardware_flops == ckpt.model_flops == training_flops(cfg, BATCH, SEQ).total
    # segments of 2 of the 4 layers (embeddings, 2 blocks, head): the first block's forward runs twice
    assert ckpt.checkpoint_every == 2
    assert ckpt.hardware_flops == ckpt.model_flops + forward_flops(cfg, BATCH, SEQ).per_layer
    assert mfu(plain.model_flops, plain.seconds, peak) == hfu(plain.hardware_flops, plain.seconds, peak)
    m, h = mfu(ckpt.model_flops, ckpt.seconds, peak), hfu(ckpt.hardware_flops, ckpt.seconds, peak)
    assert 0 < m < h <= 1
    assert h / m == pytest.approx(ckpt.hardware_flops / ckpt.model_flops)
    with pytest.raises(ValueError, match="must be positive"):
        mfu(1e6, 0.0, peak)


def test_peak_flops_is_a_gemm_rate():
    peak = measure_peak_flops(sizes=(64, 128), repeats=2)
    assert 1e8 < peak < 1e13 and math.isfinite(peak)
