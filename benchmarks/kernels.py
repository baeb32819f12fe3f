"""The CUDA kernels: instrumentation overhead under the simulator, speed-ups on a GPU.

    python benchmarks/kernels.py [--repeats 3]

Under Numba's CUDA simulator (no GPU, or MLSYS_DEVICE=sim) it prints, for a small matmul and
convolution, the best time of the plain simulator and of the instrumented one and their ratio
(target: at most 2x), then each kernel's counted traffic and arithmetic intensity (its place on a
roofline). On a GPU it prints CUDA-event timings, GFLOP/s and GB/s of naive vs tiled matmul (and
cuBLAS through CuPy when installed) and naive vs fused attention, with the speed-ups. Every
kernel is checked against numpy before anything is timed.
"""

from __future__ import annotations

import argparse
import math

import mlsys_lib  # noqa: F401  (picks the backend before numba.cuda is imported)
import numpy as np

from mlsys_lib.kernels import (KernelPlan, attention_fused, attention_naive, conv1d_naive, conv1d_shared,
                               device_info, elementwise_map, gpu_available, instrument, matmul_naive,
                               matmul_register_blocked, matmul_tiled, measure, time_cupy_matmul)
from mlsys_lib.tensor import arithmetic_intensity, time_best


def _attention_reference(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    S = Q.astype(np.float64) @ K.T / math.sqrt(Q.shape[1])
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return (P / P.sum(axis=1, keepdims=True)) @ V


def _instrumented(plan: KernelPlan) -> None:
    with instrument():
        plan.run()


def simulator(repeats: int) -> None:
    rng = np.random.default_rng(0)
    A, B = rng.random((16, 16), dtype=np.float32), rng.random((16, 16), dtype=np.float32)
    x, w = rng.random(500, dtype=np.float32), rng.random(5, dtype=np.float32)
    Q, K, V = (rng.random((24, 8), dtype=np.float32) for _ in range(3))
    plans = {
        "matmul_naive 16x16": (matmul_naive.plan(A, B, block=8), A @ B),
        "matmul_tiled 16x16 L=8": (matmul_tiled.plan(A, B, tile=8), A @ B),
        "matmul_register 16x16 V=4": (matmul_register_blocked.plan(A, B, v=4, block=2), A @ B),
        "conv1d_naive n=500 w=5": (conv1d_naive.plan(x, w, block=64), np.correlate(x, w, mode="valid")),
        "conv1d_shared n=500 w=5": (conv1d_shared.plan(x, w, block=64), np.correlate(x, w, mode="valid")),
        "attention_naive 24x8": (attention_naive.plan(Q, K, V, block=4), _attention_reference(Q, K, V)),
        "attention_fused 24x8": (attention_fused.plan(Q, K, V, block_q=8, block_k=8), _attention_reference(Q, K, V)),
        "elementwise_map n=500": (elementwise_map.plan(lambda v: 2 * v, x, block=64), 2 * x),
    }
    for name, (plan, expected) in plans.items():
        np.testing.assert_allclose(plan.run(), expected, rtol=1e-4, atol=1e-5, err_msg=name)
    _instrumented(plans["matmul_naive 16x16"][0])  # first use imports the simulator's internals

    print(f"instrumentation overhead (best of {repeats}; target <= 2x)")
    print(f"{'kernel':<26} {'plain [s]':>10} {'instrumented [s]':>17} {'ratio':>7}")
    for name in ("matmul_naive 16x16", "matmul_tiled 16x16 L=8", "conv1d_naive n=500 w=5", "conv1d_shared n=500 w=5"):
        plan = plans[name][0]
        plain = time_best(plan.run, repeats)
        traced = time_best(lambda: _instrumented(plan), repeats)
        print(f"{name:<26} {plain:>10.3f} {traced:>17.3f} {traced / plain:>7.2f}", flush=True)

    print("\ncounted global traffic (roofline placement; modeled = the lecture's formula)")
    print(f"{'kernel':<26} {'FLOPs':>8} {'bytes':>8} {'modeled':>8} {'FLOP/byte':>10} {'races+oob':>10}")
    for name, (plan, _) in plans.items():
        with instrument() as report:
            plan.run()
        problems = sum(launch.race_count + launch.out_of_bounds_count for launch in report.launches)
        print(f"{name:<26} {plan.flops:>8} {report.global_bytes:>8} {plan.modeled_bytes:>8} "
              f"{arithmetic_intensity(plan.flops, report.global_bytes):>10.3f} {problems:>10}")


def gpu(repeats: int) -> None:
    rng = np.random.default_rng(0)

    def row(label: str, plan: KernelPlan, reference: float | None = None) -> float:
        m = measure(plan, repeats)
        speedup = "" if reference is None else f"{reference / m.seconds:>9.2f}x"
        print(f"{label:<30} {m.seconds * 1e3:>10.3f} {m.gflops:>9.1f} {m.gbps:>9.1f} {speedup}", flush=True)
        return m.seconds

    print(f"CUDA-event timings, mean of {repeats} runs after one warm-up")
    print(f"{'kernel':<30} {'time [ms]':>10} {'GFLOP/s':>9} {'GB/s':>9} {'speed-up':>10}")
    for n in (512, 1024, 2048):
        A, B = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
        for op in (matmul_naive, matmul_tiled, matmul_register_blocked):
            np.testing.assert_allclose(op(A[:67, :45], B[:45, :71]), A[:67, :45] @ B[:45, :71], rtol=1e-4)
        naive = row(f"matmul_naive n={n}", matmul_naive.plan(A, B))
        row(f"matmul_tiled n={n} L=16", matmul_tiled.plan(A, B, tile=16), naive)
        row(f"matmul_tiled n={n} L=32", matmul_tiled.plan(A, B, tile=32), naive)
        row(f"matmul_register n={n} V=4", matmul_register_blocked.plan(A, B, v=4, block=16), naive)
        cublas = time_cupy_matmul(A, B, repeats)
        if cublas is None:
            print(f"{'cuBLAS (CuPy)':<30} not installed")
        else:
            print(f"{'cuBLAS (CuPy) n=' + str(n):<30} {cublas * 1e3:>10.3f} {2 * n ** 3 / cublas / 1e9:>9.1f} "
                  f"{'':>9} {naive / cublas:>9.2f}x")
    for n, d in ((1024, 64), (4096, 64)):
        Q, K, V = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
        q, k, v = Q[:100], K[:90], V[:90]
        np.testing.assert_allclose(attention_fused(q, k, v), _attention_reference(q, k, v), rtol=1e-4, atol=1e-5)
        for causal in (False, True):
            naive = row(f"attention_naive n={n} causal={causal:d}", attention_naive.plan(Q, K, V, causal=causal))
            row(f"attention_fused n={n} causal={causal:d}", attention_fused.plan(Q, K, V, causal=causal), naive)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    info = device_info()
    print(f"backend: {info['backend']} ({info['device']}; {info['reason']})\n")
    if gpu_available():
        gpu(args.repeats)
    else:
        simulator(args.repeats)


if __name__ == "__main__":
    main()
