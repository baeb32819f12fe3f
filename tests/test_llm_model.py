"""mlsys_lib.llm: the transformer on autodiff, its numpy inference path and KV cache, the corpus, training.

Oracles: central differences (gradcheck), a per-head loop written from the spec, full recomputation
for the KV cache, numpy slicing for batches.
"""

import math

import numpy as np
import pytest

from mlsys_lib.autodiff import Tensor, gradcheck
from mlsys_lib.llm.corpus import CharTokenizer, batches, load_corpus
from mlsys_lib.llm.inference import KVCache, decode_step, forward_numpy, generate, prefill
from mlsys_lib.llm.model import ModelConfig, as_tensors, attention, forward, init_params, loss
from mlsys_lib.llm.ops import embedding, rms_norm
from mlsys_lib.llm.train import small_config, train


def config(n_kv_heads=2, norm="rms", **changes):
    """A small model whose sizes all differ (d 24, d_h 6, f 40, V 29), so a mixed-up axis shows."""
    sizes = dict(vocab_size=29, d_model=24, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, d_ff=40, max_seq_len=16,
                 norm=norm)
    return ModelConfig(**{**sizes, **changes})


ATTENTION = [pytest.param(4, id="MHA"), pytest.param(2, id="GQA"), pytest.param(1, id="MQA")]


def random_params(cfg, seed=0, dtype=np.float32):
    """init_params plus noise, so that norms and biases are not trivially 1 and 0."""
    rng = np.random.default_rng(seed)
    return {k: (v + 0.3 * rng.standard_normal(v.shape)).astype(dtype) for k, v in init_params(cfg, seed).items()}


# ---- config and parameters ------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("vocab_size", 0, "vocab_size must be a positive integer"),
    ("n_layers", True, "n_layers must be a positive integer"),
    ("d_ff", 2.0, "d_ff must be a positive integer"),
    ("n_heads", 5, r"d_model \(24\) must be divisible by n_heads \(5\)"),
    ("n_kv_heads", 3, r"n_kv_heads \(3\) must divide n_heads \(4\)"),
    ("norm", "batch", "norm must be one of"),
])
def test_config_rejects_bad_fields_naming_them(field, value, message):
    with pytest.raises(ValueError, match=message):
        config(**{field: value})


def test_config_names_the_attention_kind_and_head_sizes():
    assert [config(h).attention_kind for h in (4, 2, 1)] == ["MHA", "GQA", "MQA"]
    assert (config().head_dim, config(1).group_size) == (6, 4)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_init_params_names_shapes_and_count(norm):
    cfg = config(2, norm)
    params = init_params(cfg, seed=3)
    assert list(params)[:4] == ["wte", "wpe", "layers.0.norm1.weight", "layers.0.norm1.bias" if norm == "layer"
                                else "layers.0.wq"]
    assert params["layers.1.wk"].shape == (24, 2 * 6) and params["layers.0.wo"].shape == (24, 24)
    assert all(v.dtype == np.float32 for v in params.values())
    assert cfg.n_params() == sum(v.size for v in params.values())
    assert all(np.array_equal(params[k], init_params(cfg, seed=3)[k]) for k in params)  # reproducible
    assert not np.array_equal(params["wte"], init_params(cfg, seed=4)["wte"])


def test_forward_rejects_bad_tokens_and_params():
    cfg = config()
    params = as_tensors(init_params(cfg))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 29\)"):
        forward(params, cfg, np.array([[0, 29]]))
    with pytest.raises(ValueError, match="exceed max_seq_len"):
        forward(params, cfg, np.zeros((1, 17), int))
    with pytest.raises(TypeError, match="integers"):
        forward(params, cfg, np.zeros((1, 3)))
    with pytest.raises(ValueError, match="'layers.1.w1' is missing"):
        forward({k: v for k, v in params.items() if k != "layers.1.w1"}, cfg, np.zeros((1, 3), int))
    bad = dict(params, lm_head=Tensor(np.zeros((24, 28), np.float32)))
    with pytest.raises(ValueError, match=r"'lm_head' has shape \(24, 28\), expected \(24, 29\)"):
        forward(bad, cfg, np.zeros((1, 3), int))


# ---- ops and gradients --------------------------------------------------------------------------

def test_embedding_gathers_rows_and_scatter_adds_repeated_ids():
    table = np.random.default_rng(0).standard_normal((5, 3))
    ids = np.array([[1, 4, 1], [0, 1, 2]])
    assert np.array_equal(embedding(table, ids).numpy(), table[ids])
    t = Tensor(table, requires_grad=True)
    seed = np.random.default_rng(1).standard_normal((2, 3, 3))
    embedding(t, ids).backward(seed)
    expected = np.zeros_like(table)
    for (i, j), row in np.ndenumerate(ids):
        expected[row] += seed[i, j]
    np.testing.assert_allclose(t.grad.numpy(), expected)  # row 1 read three times gets three adjoints
    assert gradcheck(lambda w: embedding(w, ids) ** 2, [table])  # second-order terms too: VJP and JVP
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 5\)"):
        embedding(table, np.array([5]))


def test_rms_norm_matches_its_definition_and_gradcheck():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 5)), rng.standard_normal(5)
    expected = x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(rms_norm(x, w).numpy(), expected, rtol=1e-12)
    assert gradcheck(rms_norm, [x, w])


@pytest.mark.parametrize("n_kv_heads, norm", [(2, "rms"), (1, "layer")])
def test_loss_gradients_match_finite_differences(n_kv_heads, norm):
    cfg = ModelConfig(vocab_size=7, d_model=8, n_layers=1, n_heads=2, n_kv_heads=n_kv_heads, d_ff=6, max_seq_len=5,
                      norm=norm)
    params = random_params(cfg, dtype=np.float64)
    names = list(params)
    rng = np.random.default_rng(1)
    tokens, targets = rng.integers(0, 7, (2, 5)), rng.integers(0, 7, (2, 5))
    assert gradcheck(lambda *ts: loss(dict(zip(names, ts)), cfg, tokens, targets), list(params.values()))


@pytest.mark.parametrize("n_kv_heads", ATTENTION)
def test_attention_heads_read_their_kv_head_as_the_spec_says(n_kv_heads):
    """A per-head loop from the spec: query head h reads kv head h // (H / H_kv); causal softmax of q kᵀ/√d_h."""
    cfg = config(n_kv_heads)
    p = random_params(cfg, dtype=np.float64)
    x = np.random.default_rng(2).standard_normal((2, 7, 24))
    dh, group = cfg.head_dim, cfg.n_heads // n_kv_heads
    q, k, v = x @ p["layers.1.wq"], x @ p["layers.1.wk"], x @ p["layers.1.wv"]
    o = np.zeros((2, 7, 24))
    for b in range(2):
        for h in range(cfg.n_heads):
            kv = h // group
            qh, kh, vh = q[b, :, h * dh:(h + 1) * dh], k[b, :, kv * dh:(kv + 1) * dh], v[b, :, kv * dh:(kv + 1) * dh]
            for i in range(7):
                s = np.array([qh[i] @ kh[j] / math.sqrt(dh) for j in range(i + 1)])
                w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
                o[b, i, h * dh:(h + 1) * dh] = w @ vh[:i + 1]
    got = attention(as_tensors(p, False), cfg, 1, Tensor(x)).numpy()
    np.testing.assert_allclose(got, o @ p["layers.1.wo"], rtol=1e-10, atol=1e-12)


def test_logits_at_a_position_do_not_see_later_tokens():
    cfg = config()
    params = as_tensors(random_params(cfg), False)
    a = np.random.default_rng(0).integers(0, 29, (1, 9))
    b = a.copy()
    b[0, 5] = (b[0, 5] + 1) % 29
    la, lb = forward(params, cfg, a).numpy(), forward(params, cfg, b).numpy()
    np.testing.assert_array_equal(la[0, :5], lb[0, :5])
    assert np.abs(la[0, 5:] - lb[0, 5:]).min() > 0


# ---- numpy inference and the KV cache ------------------------------------------------------------

@pytest.mark.parametrize("norm", ["rms", "layer"])
@pytest.mark.parametrize("n_kv_heads", ATTENTION)
def test_forward_numpy_equals_the_autodiff_forward(n_kv_heads, norm):
    cfg = config(n_kv_heads, norm)
    params = random_params(cfg)
    tokens = np.random.default_rng(0).integers(0, 29, (3, 11))
    expected = forward(as_tensors(params, False), cfg, tokens).numpy()
    got = forward_numpy(params, cfg, tokens)
    assert got.dtype == np.float32 and got.shape == (3, 11, 29)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_kv_heads", ATTENTION)
def test_decoding_with_the_cache_equals_recomputation_at_every_step(n_kv_heads):
    cfg = config(n_kv_heads)
    params = random_params(cfg)
    tokens = np.random.default_rng(1).integers(0, 29, 16)
    full = forward_numpy(params, cfg, tokens)
    cache = KVCache(cfg)
    np.testing.assert_allclose(prefill(params, cfg, cache, tokens[:5]), full[:5], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(prefill(params, cfg, cache, tokens[5:8]), full[5:8], rtol=1e-5, atol=1e-5)  # a chunk
    for t in range(8, 16):
        recomputed = forward_numpy(params, cfg, tokens[:t + 1])[-1]
        np.testing.assert_allclose(decode_step(params, cfg, cache, tokens[t]), recomputed, rtol=1e-5, atol=1e-5)
    assert cache.length == 16
    with pytest.raises(ValueError, match="exceed max_seq_len"):
        decode_step(params, cfg, cache, 0)


def test_kv_cache_memory_is_n_kv_heads_over_n_heads_of_mha():
    mha = KVCache(config(4), max_len=12)
    assert mha.data.shape == (2, 2, 4, 12, 6) and mha.nbytes == 2 * 2 * 4 * 12 * 6 * 4
    for n_kv_heads in (2, 1):
        assert KVCache(config(n_kv_heads), max_len=12).nbytes * 4 == mha.nbytes * n_kv_heads
    with pytest.raises(ValueError, match="max_len must be an integer"):
        KVCache(config(), max_len=17)


def test_greedy_generation_follows_the_argmax_of_recomputation():
    cfg = config(1)
    params = random_params(cfg)
    context = [3, 1, 4]
    for _ in range(10):
        context.append(int(np.argmax(forward_numpy(params, cfg, np.array(context))[-1])))
    assert generate(params, cfg, context[:3], 10, temperature=0.0).tolist() == context[3:]


def test_sampling_is_reproducible_and_runs_past_max_seq_len():
    cfg = config()
    params = random_params(cfg)
    a = generate(params, cfg, [1, 2], 40, temperature=1.0, rng=7)
    assert a.shape == (40,) and a.min() >= 0 and a.max() < 29
    assert np.array_equal(a, generate(params, cfg, [1, 2], 40, temperature=1.0, rng=7))
    assert not np.array_equal(a, generate(params, cfg, [1, 2], 40, temperature=1.0, rng=8))
    greedy = generate(params, cfg, [1, 2], 40, temperature=0.0)
    assert np.array_equal(greedy[:14], generate(params, cfg, [1, 2], 14, temperature=0.0))
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        generate(params, cfg, [1], 3, temperature=-1.0)


# ---- corpus and training ------------------------------------------------------------------------

def test_corpus_and_char_tokenizer_round_trip():
    text = load_corpus()
    assert 20_000 <= len(text.encode()) <= 60_000
    tok = CharTokenizer(text)
    ids = tok.encode(text)
    assert ids.dtype == np.int64 and tok.decode(ids) == text
    assert tok.chars == sorted(set(text)) and tok.vocab_size == len(set(text))
    with pytest.raises(ValueError, match=r"character '€' at position 2 is not in the vocabulary"):
        tok.encode("ab€")
    with pytest.raises(ValueError, match="ids must be integers in"):
        tok.decode([tok.vocab_size])


def test_batches_are_windows_of_the_stream_and_their_next_tokens():
    stream = np.arange(100, 150)
    gen = batches(stream, 4, 7, rng=0)
    for _ in range(3):
        x, y = next(gen)
        assert x.shape == y.shape == (4, 7)
        starts = x[:, 0] - 100
        assert np.array_equal(x, stream[starts[:, None] + np.arange(7)])
        assert np.array_equal(y, x + 1)  # the next token of each position
    with pytest.raises(ValueError, match="more than seq = 50 tokens"):
        next(batches(stream, 1, 50))


def test_training_brings_the_loss_well_below_uniform():
    vocab = small_config().vocab_size
    cfg = ModelConfig(vocab_size=vocab, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=32)
    result = train(cfg, steps=100, batch=8)
    uniform = math.log(vocab)
    assert len(result.losses) == 100 and abs(result.losses[0] - uniform) < 0.3
    assert np.mean(result.losses[-10:]) < uniform - 1.2
    assert result.val_loss < uniform - 1.0
    with pytest.raises(ValueError, match="config.vocab_size is 30 but the text has"):
        train(ModelConfig(30, 8, 1, 2, 1, 8, 8), steps=1)
