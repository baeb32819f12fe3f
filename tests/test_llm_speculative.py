"""Speculative sampling: the output is distributed as the target's, and the step count matches the formula.

The distribution tests are chi-square goodness-of-fit tests (scipy) with fixed seeds against the
target's exact probabilities, for the first token and for the joint of the first two. Two wrong
variants of the algorithm (resampling from p or from q instead of the residual) must fail the same
test: that is the check that the test has the power to see a wrong sampler.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from mlsys_lib.llm import speculative
from mlsys_lib.llm.speculative import (CountedModel, acceptance_rate, bigram_model, expected_speedup,
                                       expected_tokens_per_call, pair_with_acceptance, residual_distribution,
                                       speculative_generate, speculative_step)

V = 4
TARGET = np.random.default_rng(1).dirichlet(np.full(V, 3.0), size=V)  # bigram tables, rows = last token
DRAFT = np.random.default_rng(2).dirichlet(np.full(V, 1.0), size=V)
PREFIX = (0,)
SIGNIFICANCE = 1e-3


def first_tokens(n_samples: int, n: int, k: int, seed: int) -> np.ndarray:
    """(n_samples, n): the first n tokens after PREFIX, by speculative steps of k draft tokens."""
    rng = np.random.default_rng(seed)
    draft, target = bigram_model(DRAFT), bigram_model(TARGET)
    out = np.empty((n_samples, n), dtype=np.int64)
    for row in out:
        tokens: list[int] = []
        while len(tokens) < n:
            tokens += speculative_step(PREFIX + tuple(tokens), draft, target, k, rng)[0]
        row[:] = tokens[:n]
    return out


def p_values(samples: np.ndarray) -> tuple[float, float]:
    """Chi-square p-values of the first token and of the first two tokens against the target's law."""
    first = TARGET[PREFIX[-1]]
    joint = first[:, None] * TARGET  # P(x1, x2) = p(x1 | prefix) p(x2 | x1)
    n = len(samples)
    counts_1 = np.bincount(samples[:, 0], minlength=V)
    counts_2 = np.bincount(samples[:, 0] * V + samples[:, 1], minlength=V * V)
    return chisquare(counts_1, n * first).pvalue, chisquare(counts_2, n * joint.reshape(-1)).pvalue


def test_models_are_far_enough_apart_for_the_test_to_mean_something():
    assert acceptance_rate(TARGET, DRAFT) < 0.8


def test_output_is_distributed_as_the_target():
    for k in (1, 3):
        assert min(p_values(first_tokens(6000, 2, k, seed=0))) > SIGNIFICANCE


@pytest.mark.parametrize("wrong_residual", [lambda p, q: p, lambda p, q: q], ids=["resample from p", "from q"])
def test_a_wrong_resampling_rule_fails_the_same_test(monkeypatch, wrong_residual):
    monkeypatch.setattr(speculative, "residual_distribution", wrong_residual)
    assert min(p_values(first_tokens(6000, 2, 3, seed=0))) < SIGNIFICANCE


def test_identical_draft_and_target_accept_every_draft_token():
    rng = np.random.default_rng(0)
    same = bigram_model(TARGET)
    assert {speculative_step(PREFIX, same, same, 4, rng)[1] for _ in range(300)} == {4}


def test_draft_tokens_the_target_never_emits_are_always_rejected():
    p, q = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.0, 0.0, 0.0, 1.0])  # the draft always proposes 3
    rng = np.random.default_rng(0)
    steps = [speculative_step((), lambda prefix: q, lambda prefix: p, 3, rng) for _ in range(4000)]
    assert {(len(tokens), accepted) for tokens, accepted in steps} == {(1, 0)}
    counts = np.bincount([tokens[0] for tokens, _ in steps], minlength=4)
    assert counts[3] == 0 and chisquare(counts[:3], 4000 * p[:3]).pvalue > SIGNIFICANCE


def test_residual_distribution():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    np.testing.assert_array_equal(residual_distribution(p, q), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(residual_distribution([0.4, 0.4, 0.2], [0.1, 0.3, 0.6]), [0.75, 0.25, 0.0])
    np.testing.assert_array_equal(residual_distribution(p, p), p)  # p == q: nothing to resample, p itself
    # α + (1 − α)·residual = p: what makes the output the target's
    for t, d in zip(TARGET, DRAFT):
        alpha = acceptance_rate(t, d)
        np.testing.assert_allclose(np.minimum(t, d) + (1 - alpha) * residual_distribution(t, d), t, atol=1e-15)


def test_calls_are_counted_one_target_call_per_step():
    draft, target = CountedModel(bigram_model(DRAFT), "draft"), CountedModel(bigram_model(TARGET), "target")
    rng = np.random.default_rng(0)
    tokens, accepted = speculative_step(PREFIX, draft, target, 5, rng)
    assert (draft.calls, target.calls) == (5, 1)
    assert len(tokens) == accepted + 1 and 0 <= accepted <= 5
    gen = speculative_generate(PREFIX, draft, target, 50, 3, rng)
    assert len(gen.tokens) == 50 and sum(a + 1 for a in gen.accepted) == 50
    assert gen.target_calls == len(gen.accepted) == target.calls - 1 and gen.draft_calls == draft.calls - 5
    assert gen.draft_calls <= 3 * gen.target_calls  # the last step drafts no more than the tokens still wanted
    baseline = speculative_generate(PREFIX, draft, target, 50, 0, rng)  # k = 0: autoregressive
    assert (baseline.target_calls, baseline.draft_calls, baseline.speedup(0.3)) == (50, 0, 1.0)


def test_acceptance_rate_and_the_formulas():
    assert acceptance_rate([0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]) == pytest.approx(0.6)
    assert acceptance_rate([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert acceptance_rate(TARGET, TARGET) == pytest.approx(1.0)
    rows = [np.minimum(t, d).sum() for t, d in zip(TARGET, DRAFT)]
    assert acceptance_rate(TARGET, DRAFT) == pytest.approx(np.mean(rows))  # mean over contexts
    for alpha in (0.0, 0.3, 0.8, 0.999999):
        for k in (0, 1, 4, 10):
            series = sum(alpha ** i for i in range(k + 1))  # P(at least i tokens) summed
            assert expected_tokens_per_call(alpha, k) == pytest.approx(series, rel=1e-9)
            assert expected_speedup(alpha, k, 0.25) == pytest.approx(series / (1 + 0.25 * k), rel=1e-9)
    assert expected_tokens_per_call(1.0, 4) == 5.0 and expected_speedup(1, 4, 0) == 5.0


def test_measured_tokens_per_call_and_speedup_match_the_formulas():
    """Context-free models accept each draft token independently with probability α, as the formula assumes."""
    p, q = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.1, 0.2, 0.3, 0.4])
    alpha, c, steps = 0.6, 0.2, 3000
    measured = {}
    for k in (1, 2, 4, 8):
        draft, target = CountedModel(lambda prefix: q), CountedModel(lambda prefix: p)
        rng = np.random.default_rng(k)
        emitted = np.array([len(speculative_step((), draft, target, k, rng)[0]) for _ in range(steps)])
        assert (target.calls, draft.calls) == (steps, k * steps)
        error = 4 * emitted.std() / np.sqrt(steps)
        assert abs(emitted.sum() / target.calls - expected_tokens_per_call(alpha, k)) < error
        measured[k] = emitted.sum() / (target.calls + c * draft.calls)  # speed-up in modelled time
        assert abs(measured[k] - expected_speedup(alpha, k, c)) < error / (1 + c * k)
    assert max(measured, key=measured.get) == 2 == max(measured, key=lambda k: expected_speedup(alpha, k, c))


def test_bad_inputs_raise_clear_errors():
    rng = np.random.default_rng(0)
    good = bigram_model(TARGET)
    with pytest.raises(ValueError, match=r"target\(\(0,\)\): probs must sum to 1"):
        speculative_step(PREFIX, good, lambda prefix: np.full(V, 0.2), 2, rng)
    with pytest.raises(ValueError, match=r"draft\(\(0,\)\): probs must be finite and nonnegative"):
        speculative_step(PREFIX, lambda prefix: np.array([1.2, -0.2, 0, 0]), good, 2, rng)
    with pytest.raises(ValueError, match="must be finite"):
        speculative_step(PREFIX, good, lambda prefix: np.array([np.nan, 1, 0, 0]), 2, rng)
    with pytest.raises(ValueError, match="share the vocabulary: sizes 3 and 4"):
        speculative_step(PREFIX, lambda prefix: np.ones(3) / 3, good, 2, rng)
    with pytest.raises(ValueError, match="k .* must be an int >= 0"):
        speculative_step(PREFIX, good, good, -1, rng)
    with pytest.raises(ValueError, match="token ids must be ints >= 0"):
        speculative_step((0, -3), good, good, 1, rng)
    with pytest.raises(ValueError, match="alpha .* in \\[0, 1\\]"):
        expected_tokens_per_call(1.5, 2)
    with pytest.raises(ValueError, match="c .* >= 0"):
        expected_speedup(0.5, 2, -1)
    with pytest.raises(ValueError, match="square"):
        bigram_model(np.ones((2, 3)) / 3)
    with pytest.raises(ValueError, match="one shape"):
        acceptance_rate(np.ones(3) / 3, np.ones(4) / 4)


@pytest.mark.parametrize("alpha, vocab", [(0.5, 8), (0.9, 4), (1.0, 3), (0.25, 4)])
def test_pair_with_acceptance_has_that_acceptance_rate(alpha, vocab):
    p, q = pair_with_acceptance(alpha, vocab)
    assert p.sum() == pytest.approx(1) and q.sum() == pytest.approx(1) and q.min() >= 0
    assert sum(min(a, b) for a, b in zip(p, q)) == pytest.approx(alpha, abs=1e-12)


def test_pair_with_acceptance_refuses_a_rate_below_one_token():
    with pytest.raises(ValueError, match="alpha >= 1/vocab"):
        pair_with_acceptance(0.1, 4)
