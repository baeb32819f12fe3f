"""mlsys_lib.memory.training_memory against the lecture's ZeRO table, the 16N rule and independent sums."""

import itertools

import pytest

from mlsys_lib.memory import TrainingMemory, training_memory, transformer_layer_activation_bytes

GB = 1e9


def test_the_zero_table_of_the_lecture():
    # Psi = 7.5B, K = 12 (Adam, mixed precision), N_d = 64: 120, 31.4, 16.6, 1.9 GB per GPU
    table = [round(training_memory(7.5e9, zero_stage=stage, dp_degree=64).total / GB, 1) for stage in range(4)]
    assert table == [120.0, 31.4, 16.6, 1.9]
    psi, k, nd = 7.5e9, 12, 64
    exact = [(2 + 2 + k) * psi, 2 * psi + 2 * psi + k * psi / nd, 2 * psi + (2 + k) * psi / nd, (2 + 2 + k) * psi / nd]
    for stage, want in enumerate(exact):
        assert training_memory(psi, zero_stage=stage, dp_degree=nd).total == pytest.approx(want, rel=1e-12)


def test_the_16n_rule_for_gpt3():
    m = training_memory(175e9)  # Adam, mixed precision, one GPU
    assert (m.parameters, m.gradients, m.optimizer_states, m.activations) == (2 * 175e9, 2 * 175e9, 12 * 175e9, 0.0)
    assert m.total == 2.8e12  # 2.8 TB: fp16 weights 2 + fp16 grads 2 + fp32 master 4 + Adam m 4 + v 4


def test_every_combination_against_a_sum_written_out():
    weight = {"fp32": 4, "mixed": 2}
    states = {("sgd", "fp32"): 0, ("momentum", "fp32"): 4, ("adam", "fp32"): 8,
              ("sgd", "mixed"): 4, ("momentum", "mixed"): 8, ("adam", "mixed"): 12}  # mixed: + FP32 master
    psi, act = 3.3e8, 1.7e9
    for (opt, prec), stage, nd in itertools.product(states, range(4), (1, 8, 64)):
        m = training_memory(psi, optimizer=opt, precision=prec, zero_stage=stage, dp_degree=nd, activation_bytes=act)
        assert isinstance(m, TrainingMemory)
        assert m.parameters == pytest.approx(weight[prec] * psi / (nd if stage == 3 else 1))
        assert m.gradients == pytest.approx(weight[prec] * psi / (nd if stage >= 2 else 1))
        assert m.optimizer_states == pytest.approx(states[opt, prec] * psi / (nd if stage >= 1 else 1))
        assert m.activations == act
        assert m.total == pytest.approx(m.parameters + m.gradients + m.optimizer_states + act)


def test_transformer_layer_activations_follow_korthikanti():
    s, b, h, a = 2048, 4, 12288, 96
    assert transformer_layer_activation_bytes(s, b, h, a) == s * b * h * (34 + 5 * a * s / h)
    # FP32 activations, 1-byte masks, counted tensor by tensor
    attention = 4 * (s * b * h + 2 * s * b * h + a * s * s * b + a * s * s * b + s * b * h + s * b * h) \
        + a * s * s * b + s * b * h
    mlp = 4 * (s * b * h + 4 * s * b * h + 4 * s * b * h) + s * b * h
    norms = 4 * 2 * s * b * h
    assert transformer_layer_activation_bytes(s, b, h, a, bytes_per_element=4) == attention + mlp + norms
    no_dropout = 2 * (16 * s * b * h + a * s * s * b)
    assert transformer_layer_activation_bytes(s, b, h, a, dropout=False) == no_dropout


@pytest.mark.parametrize("kwargs, match", [
    (dict(optimizer="adagrad"), "unknown optimizer"),
    (dict(precision="fp16"), "unknown precision"),
    (dict(zero_stage=4), "zero_stage"),
    (dict(zero_stage=-1), "zero_stage"),
    (dict(dp_degree=0), "dp_degree"),
    (dict(dp_degree=2.5), "dp_degree"),
    (dict(activation_bytes=-1.0), ">= 0"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        training_memory(1e9, **kwargs)
    with pytest.raises(ValueError, match=">= 0"):
        training_memory(-5)
    with pytest.raises(ValueError, match="heads must be positive"):
        transformer_layer_activation_bytes(128, 1, 64, 0)
