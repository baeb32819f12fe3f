"""3-D parallelism sizing: microbatches, bubble, bytes per step, memory per GPU; bad configurations."""

from __future__ import annotations

import math

import pytest

from mlsys_lib.parallel.sizing import Transformer, configurations, sizing

MODEL = Transformer(num_layers=8, hidden=64, heads=8, seq_len=32)


def test_a_small_configuration_by_hand():
    # n = 16 = p 2 x t 4 x d 2; B = 32 sequences, b = 2: m = 32 / (2 * 2) = 8 microbatches per pipeline.
    s = sizing(MODEL, 16, 2, 4, 2, 32, 2)
    assert (s.p, s.t, s.d, s.num_microbatches) == (2, 4, 2, 8)
    assert math.isclose(s.bubble_ratio, 1 / 8) and math.isclose(s.bubble_fraction, 1 / 9)
    bsh_bytes = 2 * 32 * 64 * 2  # b s h fp16 elements
    # 4 layers per stage x 8 microbatches x 4 all-reduces, each a ring sending 2 (4 - 1)/4 of it.
    assert math.isclose(s.tp_bytes, 4 * 8 * 4 * 1.5 * bsh_bytes)
    assert math.isclose(s.pp_bytes, 8 * bsh_bytes / 4), "two stages: one direction each, split over t = 4"
    params = 12 * 8 * 64 ** 2 / 8  # Psi / (p t)
    assert math.isclose(s.dp_bytes, 2 * (2 - 1) / 2 * params * 2)
    # Mixed-precision Adam: 2 + 2 + 12 bytes per parameter.
    assert (s.memory.parameters, s.memory.gradients, s.memory.optimizer_states) == (2 * params, 2 * params, 12 * params)
    # Activations: the first stage holds min(p, m) = 2 microbatches of 4 layers, split t = 4 ways;
    # per layer 34 sbh + 5 a s^2 b bytes (Korthikanti et al.).
    per_layer = 34 * 32 * 2 * 64 + 5 * 8 * 32 ** 2 * 2
    assert math.isclose(s.memory.activations, 2 * 4 * per_layer / 4)


def test_more_pipeline_stages_mean_more_bubble_and_less_memory_per_gpu():
    shallow, deep = sizing(MODEL, 16, 2, 2, 4, 64, 1), sizing(MODEL, 16, 8, 2, 1, 64, 1)
    assert deep.bubble_ratio == 7 / 64 and shallow.bubble_ratio == 1 / 16
    assert deep.memory.parameters == shallow.memory.parameters / 4
    assert deep.dp_bytes == 0, "d = 1: no gradient all-reduce"
    assert sizing(MODEL, 4, 1, 4, 1, 8, 1).pp_bytes == 0, "p = 1: nothing to send between stages"
    middle = sizing(MODEL, 4, 4, 1, 1, 8, 1)
    assert middle.pp_bytes == 2 * 8 * 32 * 64 * 2, "a middle stage sends forward and backward"
    assert sizing(MODEL, 4, 4, 1, 1, 8, 1).tp_bytes == 0


def test_zero_stage_3_splits_everything_over_d():
    plain, zero = sizing(MODEL, 8, 1, 1, 8, 64, 1), sizing(MODEL, 8, 1, 1, 8, 64, 1, zero_stage=3)
    assert zero.memory.parameters == plain.memory.parameters / 8
    assert zero.memory.optimizer_states == plain.memory.optimizer_states / 8


def test_configurations_are_every_factorisation():
    got = configurations(12)
    assert len(got) == len(set(got)) == 18  # 12 = 2^2 3: (2+2 choose 2) (1+2 choose 2) ordered triples
    assert all(p * t * d == 12 for p, t, d in got)
    assert configurations(1) == [(1, 1, 1)]


def test_bad_configurations_raise():
    with pytest.raises(ValueError, match=r"p·t·d must equal the number of GPUs: 2·2·2 = 8, not n = 16"):
        sizing(MODEL, 16, 2, 2, 2, 32, 1)
    with pytest.raises(ValueError, match="B = 30 must be divisible by d·b = 2·4"):
        sizing(MODEL, 4, 1, 2, 2, 30, 4)
    with pytest.raises(ValueError, match="cannot be split evenly into p = 3"):
        sizing(MODEL, 3, 3, 1, 1, 3, 1)
    with pytest.raises(ValueError, match="t = 16 must divide the heads"):
        sizing(MODEL, 16, 1, 16, 1, 16, 1)
    with pytest.raises(ValueError, match="microbatch"):
        sizing(MODEL, 4, 1, 4, 1, 4, 0)
