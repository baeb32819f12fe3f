"""ZeRO stages 0-3 executed (``mlsys_lib.distributed.zero``): equality with plain data parallelism,
model-state bytes per rank against Lab 4's calculator, communication volume, on the sim backend
(1, 2 and 4 ranks) and once on MPI with 4 ranks.

The oracles are independent of the module: single-process Adam on ``nn.MLP`` with the whole-graph
``backward``; the fp32 bytes per parameter by hand (4 parameter, 4 gradient, 8 Adam); the ring's
bytes per collective, (p−1)/p of the buffer.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from mlsys_lib.autodiff import Tensor, cross_entropy, nn, optim
from mlsys_lib.comm import ProcessGroup, launch
from mlsys_lib.comm.mpi import find_mpiexec
from mlsys_lib.distributed.zero import ZeroResult, zero_train
from mlsys_lib.memory.accounting import ZERO_STAGES

SIZES = [5, 7, 6, 3]  # layers of 42, 48 and 21 parameters: 111 in all, a multiple of neither 2 nor 4
LAYER_PARAMS = [42, 48, 21]
STEPS, LR = 4, 1e-2


def blobs(sizes: list[int], batch: int = 24, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, sizes[0])).astype(np.float32), rng.integers(0, sizes[-1], batch)


def every_stage(g: ProcessGroup, sizes: list[int], steps: int, prefetch: bool) -> list[ZeroResult]:
    X, y = blobs(sizes)
    return [zero_train(g, sizes, X, y, steps, stage, lr=LR, prefetch=prefetch) for stage in ZERO_STAGES]


def single_process_adam(sizes: list[int], steps: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[float]]:
    """The oracle: nn.MLP + optim.Adam on the whole batch, one backward over the whole graph."""
    X, y = blobs(sizes)
    model = nn.MLP(sizes, rng=0)
    adam, losses = optim.Adam(model.parameters(), lr=LR), []
    for _ in range(steps):
        adam.zero_grad()
        loss = cross_entropy(model(Tensor(X)), y)
        losses.append(loss.item())
        loss.backward()
        adam.step()
    return [(layer.weight.data, layer.bias.data) for layer in model.layers[::2]], losses


@pytest.fixture(scope="module")
def runs() -> dict[int, list[list[ZeroResult]]]:
    """runs[p][rank][stage] on the sim backend (prefetch on with 4 ranks, off otherwise)."""
    return {p: launch(every_stage, p, args=(SIZES, STEPS, p == 4), timeout=120) for p in (1, 2, 4)}


def padded(p: int) -> list[int]:
    return [-(-n // p) * p for n in LAYER_PARAMS]


def assert_same_parameters(a: ZeroResult, b: ZeroResult) -> None:
    for (wa, ba), (wb, bb) in zip(a.layers, b.layers, strict=True):
        np.testing.assert_array_equal(wa, wb)
        np.testing.assert_array_equal(ba, bb)


def test_one_rank_every_stage_is_single_process_adam_bit_for_bit(runs):
    reference, losses = single_process_adam(SIZES, STEPS)
    for result in runs[1][0]:
        for (w, b), (w_ref, b_ref) in zip(result.layers, reference, strict=True):
            np.testing.assert_array_equal(w, w_ref)
            np.testing.assert_array_equal(b, b_ref)
        assert result.losses == losses
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("p", [2, 4])
def test_every_stage_on_every_rank_equals_plain_data_parallelism_bit_for_bit(runs, p):
    plain = runs[p][0][0]
    for rank in range(p):
        for stage in ZERO_STAGES:
            assert_same_parameters(runs[p][rank][stage], plain)


@pytest.mark.parametrize("p", [2, 4])
def test_plain_data_parallelism_is_single_process_adam_up_to_summation_order(runs, p):
    # The ranks' gradients are summed in another order than one matmul over the whole batch: relative
    # differences of ~1e-7 in each gradient; Adam's step is at most about lr per element, so after
    # STEPS steps 1e-5 (a thousandth of one step) leaves room while catching any wrong update.
    reference, losses = single_process_adam(SIZES, STEPS)
    for (w, b), (w_ref, b_ref) in zip(runs[p][0][0].layers, reference, strict=True):
        np.testing.assert_allclose(w, w_ref, rtol=0, atol=1e-5)
        np.testing.assert_allclose(b, b_ref, rtol=0, atol=1e-5)
    np.testing.assert_allclose(runs[p][0][0].losses, losses, rtol=1e-5)


FP32_BYTES = {  # bytes per padded parameter of (parameters, gradients, Adam m and v) held per rank
    0: lambda p: (4, 4, 8), 1: lambda p: (4, 4, 8 / p), 2: lambda p: (4, 4 / p, 8 / p), 3: lambda p: (4 / p, 4 / p, 8 / p),
}


@pytest.mark.parametrize("p", [1, 2, 4])
def test_bytes_held_per_rank_match_lab4_calculator(runs, p):
    psi = sum(padded(p))  # 111, 112, 116
    for rank in range(p):
        for stage, result in enumerate(runs[p][rank]):
            assert (result.num_params, result.padded_params) == (111, psi)
            by_hand = dict(zip(("parameters", "gradients", "optimizer_states"),
                               (psi * k for k in FP32_BYTES[stage](p))))
            calc = result.calculator
            assert result.held == by_hand
            assert by_hand == {"parameters": calc.parameters, "gradients": calc.gradients,
                               "optimizer_states": calc.optimizer_states}


@pytest.mark.parametrize("p", [1, 2, 4])
def test_peak_bytes_count_what_lives_during_the_step(runs, p):
    held = [r.held for r in runs[p][0]]
    peak = [r.peak for r in runs[p][0]]
    assert peak[0] == held[0] and peak[1] == held[1]  # no transient model state
    # stage 2: one layer's full local gradient lives until its reduce-scatter
    assert peak[2] == {**held[2], "gradients": held[2]["gradients"] + 4 * max(padded(p))}
    assert sum(peak[3].values()) > sum(held[3].values())  # stage 3: gathered layers while they live


@pytest.mark.parametrize("p", [2, 4])
def test_communication_per_step_stage_1_2_as_all_reduce_stage_3_one_and_a_half(runs, p):
    ring = sum(4 * n * (p - 1) / p for n in padded(p))  # bytes a rank sends in one ring RS or AG of a layer
    sent = [r.bytes_sent_per_step for r in runs[p][0]]
    assert sent == [2 * ring, 2 * ring, 2 * ring, 3 * ring]
    assert sent[3] == 1.5 * sent[0]
    assert all(r.bytes_sent_per_step == 0 for r in runs[1][0])


def test_zero3_on_four_ranks_holds_under_0_3_of_plain_data_parallelism():
    # 16 layers of 32x32 + 32 = 1056 parameters; the peak of stage 3 with prefetch holds a quarter of
    # every state plus, during a backward, two gathered layers and one layer's full gradient.
    sizes = [32] * 17
    results = launch(every_stage, 4, args=(sizes, 1, True), timeout=120)
    psi = 16 * 1056
    for plain, _, _, zero3 in results:
        assert sum(plain.peak.values()) == 16 * psi
        assert sum(zero3.peak.values()) == 16 * psi // 4 + 4 * 3 * 1056
        assert sum(zero3.peak.values()) <= 0.3 * sum(plain.peak.values())
        assert_same_parameters(zero3, plain)


@pytest.mark.parametrize("stage", [4, -1, True, 1.0, "2", None])
def test_a_bad_stage_is_refused_before_any_communication(stage):
    X, y = blobs(SIZES)
    with pytest.raises(ValueError, match=r"ZeRO stage must be 0 \(plain data parallelism\), 1, 2 or 3, got"):
        zero_train(None, SIZES, X, y, 1, stage)  # no group needed: the stage is checked first


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None,
                    reason='needs mpi4py and mpiexec: pip install "mlsys_lib[mpi]"')
def test_every_stage_on_mpi_with_four_ranks_equals_the_sim_backend(runs):
    on_mpi = launch(every_stage, 4, backend="mpi", args=(SIZES, STEPS, True), timeout=240)
    for rank in range(4):
        for mpi, sim in zip(on_mpi[rank], runs[4][rank], strict=True):
            assert_same_parameters(mpi, on_mpi[0][0])  # every stage on every rank: MPI's plain DP, bit for bit
            assert_same_parameters(mpi, sim)
            assert mpi.losses == sim.losses
            assert (mpi.held, mpi.peak, mpi.bytes_sent_per_step) == (sim.held, sim.peak, sim.bytes_sent_per_step)
