"""Attention ``O = softmax(Q K^T / sqrt(d)) V``: naive (scores in global memory) and fused (FlashAttention-style).

Shapes: ``Q`` is (n, d), ``K`` is (m, d), ``V`` is (m, dv), ``O`` is (n, dv), all float32; one head.
With ``causal=True`` query ``i`` attends to keys ``j <= i`` only (rows past the last key attend to all).

* **naive**: three launches that go through global memory. (1) one thread per score writes
  ``S[i, j] = q_i . k_j / sqrt(d)`` (``-inf`` where masked), an n x m array; (2) one thread per row
  turns it into probabilities in three passes (max, ``exp`` and sum, divide); (3) the naive matmul
  ``P @ V``. The n x m scores cross the memory bus five times.
* **fused**: one launch. A block of ``block_q`` threads owns ``block_q`` query rows (thread ``t``
  one row) and keeps their Q tile in shared memory. It walks the keys ``block_k`` at a time,
  copying a K tile and a V tile into shared memory; each thread scores its row against the tile
  and folds the tile into its output with the *online softmax*: a running max ``m_i`` and running
  sum ``l_i``, rescaling the accumulated row by ``exp(m_old - m_new)`` whenever the max grows, so
  the scores are never stored: ``O[i] = acc / l_i`` at the end. Q is read once, K and V once per
  block of queries (causal blocks stop at their last row's key).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32

from .checks import block_threads, ceil_div, float32_array, positive_int, shared_bytes
from .matmul import matmul_naive_kernel
from .plan import HostOp, KernelPlan, KernelStep
from .tiles import load_tile

_ZERO = float32(0.0)
_NEG_INF = float32(-math.inf)


@cuda.jit
def _scores_kernel(Q, K, S, scale, causal):
    key, query = cuda.grid(2)
    if query < S.shape[0] and key < S.shape[1]:
        if causal and key > query:
            S[query, key] = _NEG_INF
        else:
            dot = _ZERO
            for k in range(Q.shape[1]):
                dot += Q[query, k] * K[key, k]
            S[query, key] = dot * scale


@cuda.jit
def _softmax_rows_kernel(S):
    row = cuda.grid(1)
    if row < S.shape[0]:
        m = S.shape[1]
        top = _NEG_INF
        for j in range(m):
            top = max(top, S[row, j])
        total = _ZERO
        for j in range(m):
            e = math.exp(S[row, j] - top)
            S[row, j] = e
            total += e
        for j in range(m):
            S[row, j] = S[row, j] / total


@functools.lru_cache(maxsize=None)
def _attention_fused_kernel(block_q: int, block_k: int, d: int, dv: int):
    """The fused kernel for ``block_q`` query rows per block, ``block_k`` keys per tile, head sizes d and dv.

    ValueError if its three shared-memory tiles, ``4 (block_q d + block_k (d + dv))`` bytes, exceed
    the 48 KiB a block may declare statically (no GPU could launch it).
    """
    shared_bytes(f"block_q={block_q}, block_k={block_k} with d={d}, dv={dv}",
                 4 * (block_q * d + block_k * (d + dv)))

    @cuda.jit
    def attention_fused_kernel(Q, K, V, O, scale, causal):
        sQ = cuda.shared.array((block_q, d), float32)
        sK = cuda.shared.array((block_k, d), float32)
        sV = cuda.shared.array((block_k, dv), float32)
        s = cuda.local.array(block_k, float32)
        acc = cuda.local.array(dv, float32)
        tid = cuda.threadIdx.x
        row0 = cuda.blockIdx.x * block_q
        row = row0 + tid
        n = Q.shape[0]
        m = K.shape[0]
        load_tile(sQ, Q, row0, 0, tid, block_q)  # made visible by the first syncthreads below
        for c in range(dv):
            acc[c] = _ZERO
        m_i = _NEG_INF  # running max of this row's scores
        l_i = _ZERO     # running sum of exp(score - m_i)
        kv_end = m
        if causal:
            kv_end = min(m, row0 + block_q)
        for kv0 in range(0, kv_end, block_k):
            load_tile(sK, K, kv0, 0, tid, block_q)
            load_tile(sV, V, kv0, 0, tid, block_q)
            cuda.syncthreads()
            if row < n:
                tile_max = _NEG_INF
                for j in range(block_k):
                    key = kv0 + j
                    s[j] = _NEG_INF
                    if key < m and (not causal or key <= row):
                        dot = _ZERO
                        for k in range(d):
                            dot += sQ[tid, k] * sK[j, k]
                        s[j] = dot * scale
                        tile_max = max(tile_max, s[j])
                if tile_max > _NEG_INF:
                    m_new = max(m_i, tile_max)
                    correction = math.exp(m_i - m_new)  # 0 on the first tile (m_i = -inf)
                    l_i *= correction
                    for c in range(dv):
                        acc[c] *= correction
                    for j in range(block_k):
                        if s[j] > _NEG_INF:
                            p = math.exp(s[j] - m_new)
                            l_i += p
                            for c in range(dv):
                                acc[c] += p * sV[j, c]
                    m_i = m_new
            cuda.syncthreads()  # the tile is consumed before the next one overwrites it
        if row < n:
            for c in range(dv):
                O[row, c] = acc[c] / l_i

    return attention_fused_kernel


def _checked(Q: np.ndarray, K: np.ndarray, V: np.ndarray, causal: bool
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.float32, int]:
    """Validated ``(Q, K, V, O, scale, unmasked)``: O (n, dv) allocated, ``unmasked`` the number of scored pairs."""
    Q = float32_array("Q", Q, 2)
    K = float32_array("K", K, 2)
    V = float32_array("V", V, 2)
    if K.shape[1] != Q.shape[1]:
        raise ValueError(f"Q and K need the same head size d, got Q {Q.shape} and K {K.shape}")
    if V.shape[0] != K.shape[0]:
        raise ValueError(f"K and V need one row per key, got K {K.shape} and V {V.shape}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    n, m = Q.shape[0], K.shape[0]
    first = min(n, m)  # causal rows 0..first-1 see i + 1 keys, the rest see all m
    unmasked = first * (first + 1) // 2 + (n - first) * m if causal else n * m
    scale = np.float32(1.0 / math.sqrt(Q.shape[1]))
    return Q, K, V, np.empty((n, V.shape[1]), dtype=np.float32), scale, unmasked


@HostOp
def attention_naive(Q: np.ndarray, K: np.ndarray, V: np.ndarray, causal: bool = False, block: int = 16
                    ) -> KernelPlan:
    """``softmax(Q K^T / sqrt(d)) V`` with the n x m scores materialized in global memory; O (n, dv) float32.

    Q (n, d), K (m, d), V (m, dv). Score and ``P @ V`` launches use ``block`` x ``block`` threads,
    the row softmax ``block * block`` threads per block.
    """
    Q, K, V, O, scale, unmasked = _checked(Q, K, V, causal)
    block = positive_int("block", block)
    block_threads(f"block={block} ({block} x {block})", block * block)
    (n, d), (m, dv) = Q.shape, V.shape
    S = np.empty((n, m), dtype=np.float32)
    steps = (KernelStep(_scores_kernel, (ceil_div(m, block), ceil_div(n, block)), (block, block),
                        (Q, K, S, scale, bool(causal))),
             KernelStep(_softmax_rows_kernel, (ceil_div(n, block * block),), (block * block,), (S,)),
             KernelStep(matmul_naive_kernel, (ceil_div(dv, block), ceil_div(n, block)), (block, block),
                        (S, V, O)))
    reads = 2 * d * unmasked + 3 * n * m + 2 * n * m * dv  # scores, softmax passes, P @ V
    writes = n * m + 2 * n * m + n * dv
    return KernelPlan("attention_naive", steps, O, flops=2 * (d + dv) * unmasked,
                      modeled_bytes=4 * (reads + writes), compulsory_bytes=4 * (n * d + m * (d + dv) + n * dv))


@HostOp
def attention_fused(Q: np.ndarray, K: np.ndarray, V: np.ndarray, causal: bool = False, block_q: int = 16,
                    block_k: int = 16) -> KernelPlan:
    """``softmax(Q K^T / sqrt(d)) V`` in one launch with online softmax; Q (n, d), K (m, d), V (m, dv) -> O (n, dv).

    ``block_q`` query rows (threads) per block, ``block_k`` keys per shared-memory tile;
    ``4 (block_q d + block_k (d + dv))`` bytes of shared memory per block.
    """
    Q, K, V, O, scale, unmasked = _checked(Q, K, V, causal)
    block_q = positive_int("block_q", block_q)
    block_k = positive_int("block_k", block_k)
    block_threads("block_q", block_q)
    (n, d), (m, dv) = Q.shape, V.shape
    kernel = _attention_fused_kernel(block_q, block_k, d, dv)
    blocks = ceil_div(n, block_q)
    key_rows = 0  # K and V rows each block loads: whole tiles up to its last key, clipped at m
    for b in range(blocks):
        kv_end = min(m, (b + 1) * block_q) if causal else m
        key_rows += min(m, ceil_div(kv_end, block_k) * block_k)
    step = KernelStep(kernel, (blocks,), (block_q,),
                      (Q, K, V, O, scale, bool(causal)))
    return KernelPlan("attention_fused", (step,), O, flops=2 * (d + dv) * unmasked,
                      modeled_bytes=4 * (n * d + key_rows * (d + dv) + n * dv),
                      compulsory_bytes=4 * (n * d + m * (d + dv) + n * dv))
