"""Fused attention partitioned like FlashAttention-2: many heads, several warps per block, one launch.

``O = softmax(Q K^T / sqrt(d)) V`` for every head of every batch. Shapes: ``Q`` is (..., n, d),
``K`` is (..., m, d), ``V`` is (..., m, dv), ``O`` is (..., n, dv), the leading dimensions (e.g.
batch x heads) the same for all four; float32 or float64 inputs, computed with float32 arithmetic
and accumulation, ``O`` in the inputs' dtype. With ``causal=True`` query ``i`` attends to keys
``j <= i`` only (rows past the last key attend to all), as in :mod:`~mlsys_lib.kernels.attention`.

Why not the teaching kernel (``attention_fused``) at GPU sizes: its blocks are one 16-thread
query tile of one head, so n = 1024 gives 64 blocks for 132 SMs, each streaming all of K and V.
Here the work is split as in FlashAttention-2 (Dao, 2023, section 3.2):

* **grid** ``(ceil(n / block_q), heads)``: one block per query tile x head (x batch); n = 4096 with
  32 heads and ``block_q = 128`` is 1024 blocks, several waves on every GPU here;
* **block** of ``block_q`` threads (128: four warps), thread ``t`` owns query row ``t`` of the tile;
  its Q row (pre-multiplied by ``1/sqrt(d)``), its running max ``m_i``, running sum ``l_i`` and
  output row ``acc`` (``dv`` floats) stay in registers for the whole launch;
* **K/V tiles** of ``block_k`` keys are copied to shared memory by the whole block with coalesced
  reads, once per block: every warp reads the same ``sK[j, k]`` at the same time (a broadcast, no
  bank conflict). Each thread writes its ``block_k`` scores for the tile to its own column of a
  shared ``sS[j, t]`` (consecutive threads, consecutive banks), then folds the tile into ``acc``
  with the online softmax: ``m_new = max(m_i, max_j s_j)``, ``acc *= exp(m_i - m_new)``,
  ``acc += sum_j exp(s_j - m_new) V_j``; at the end ``O = acc / l_i``;
* causal blocks stop at their last row's key: half the tiles of the full grid.

Compulsory traffic: Q, K, V read once and O written once, ``itemsize x heads x (n d + m (d + dv)
+ n dv)`` bytes; the kernel reads K and V once per query tile, ``ceil(n / block_q)`` times, which
the L2 cache mostly absorbs. Shared memory: ``4 block_k (d + dv + block_q)`` bytes per block
(32 KiB for the defaults with d = dv = 64).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32

from .gpu.device import current_backend
from .checks import block_threads, ceil_div, positive_int, shared_bytes
from .plan import HostOp, KernelPlan, KernelStep

_ZERO = float32(0.0)
_NEG_INF = float32(-math.inf)
DTYPES = (np.float32, np.float64)
#: K/V tiles aligned to 16 bytes, so the compiler may read four floats of a row at once (ld.shared.v4);
#: the simulator refuses an alignment.
_ALIGN = None if current_backend() == "sim" else 16


@functools.lru_cache(maxsize=None)
def _attention_flash_kernel(block_q: int, block_k: int, d: int, dv: int):
    """The kernel for ``block_q`` rows (threads) per block, ``block_k`` keys per tile, head sizes d and dv."""

    @cuda.jit
    def attention_flash_kernel(Q, K, V, O, scale, causal):
        sK = cuda.shared.array((block_k, d), float32, alignment=_ALIGN)
        sV = cuda.shared.array((block_k, dv), float32, alignment=_ALIGN)
        sS = cuda.shared.array((block_k, block_q), float32)  # sS[j, t]: thread t's score for key j
        q = cuda.local.array(d, float32)
        acc = cuda.local.array(dv, float32)
        tid = cuda.threadIdx.x
        head = cuda.blockIdx.y
        row0 = cuda.blockIdx.x * block_q
        row = row0 + tid
        n = Q.shape[1]
        m = K.shape[1]
        live = row < n
        for k in range(d):
            q[k] = float32(Q[head, row, k]) * scale if live else _ZERO
        for c in range(dv):
            acc[c] = _ZERO
        m_i = _NEG_INF  # running max of this row's scores
        l_i = _ZERO     # running sum of exp(score - m_i)
        kv_end = min(m, row0 + block_q) if causal else m
        for kv0 in range(0, kv_end, block_k):
            for e in range(tid, block_k * d, block_q):  # consecutive threads: consecutive columns
                r = e // d
                c = e - r * d
                sK[r, c] = float32(K[head, kv0 + r, c]) if kv0 + r < m else _ZERO
            for e in range(tid, block_k * dv, block_q):
                r = e // dv
                c = e - r * dv
                sV[r, c] = float32(V[head, kv0 + r, c]) if kv0 + r < m else _ZERO
            cuda.syncthreads()
            tile_max = _NEG_INF
            for j in range(block_k):
                dot = _ZERO
                for k in range(d):
                    dot += q[k] * sK[j, k]
                key = kv0 + j
                if key >= m or (causal and key > row):
                    dot = _NEG_INF
                sS[j, tid] = dot
                tile_max = max(tile_max, dot)
            if tile_max > _NEG_INF:  # some key of this tile is visible to this row
                m_new = max(m_i, tile_max)
                correction = math.exp(m_i - m_new)  # 0 on the first visible tile (m_i = -inf)
                l_i *= correction
                for c in range(dv):
                    acc[c] *= correction
                for j in range(block_k):
                    p = math.exp(sS[j, tid] - m_new)  # 0 for masked keys
                    l_i += p
                    for c in range(dv):
                        acc[c] += p * sV[j, c]
                m_i = m_new
            cuda.syncthreads()  # the tiles are consumed before the next ones overwrite them
        if live:
            for c in range(dv):
                O[head, row, c] = acc[c] / l_i

    return attention_flash_kernel


def _as_heads(name: str, a: object, dtype: np.dtype | None) -> np.ndarray:
    """``a`` as a C-contiguous (heads, rows, cols) array of float32 or float64 (``dtype`` if given)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype not in DTYPES:
        raise TypeError(f"{name} must have dtype float32 or float64, got {a.dtype}")
    if dtype is not None and a.dtype != dtype:
        raise TypeError(f"Q, K and V need one dtype, got {dtype} and {a.dtype} ({name})")
    if a.ndim < 2:
        raise ValueError(f"{name} must have shape (..., rows, head size), got {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {a.shape}")
    return np.ascontiguousarray(a.reshape(-1, *a.shape[-2:]))


@HostOp
def attention_flash(Q: np.ndarray, K: np.ndarray, V: np.ndarray, causal: bool = False, block_q: int = 128,
                    block_k: int = 32) -> KernelPlan:
    """``softmax(Q K^T / sqrt(d)) V`` per head: Q (..., n, d), K (..., m, d), V (..., m, dv) -> O (..., n, dv).

    float32 or float64 inputs (one dtype), float32 arithmetic, O in the inputs' dtype. A grid of
    ``ceil(n / block_q)`` x heads blocks of ``block_q`` threads; ``block_k`` keys per shared tile.
    """
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    q3 = _as_heads("Q", Q, None)
    k3 = _as_heads("K", K, q3.dtype)
    v3 = _as_heads("V", V, q3.dtype)
    lead = Q.shape[:-2]
    if K.shape[:-2] != lead or V.shape[:-2] != lead:
        raise ValueError(f"Q, K and V need the same leading (batch, head) dimensions, got {Q.shape}, {K.shape}, "
                         f"{V.shape}")
    (heads, n, d), (_, m, dv) = q3.shape, v3.shape
    if k3.shape[2] != d:
        raise ValueError(f"Q and K need the same head size d, got Q {Q.shape} and K {K.shape}")
    if k3.shape[1] != m:
        raise ValueError(f"K and V need one row per key, got K {K.shape} and V {V.shape}")
    block_q = positive_int("block_q", block_q)
    block_k = positive_int("block_k", block_k)
    block_threads("block_q", block_q)
    shared_bytes(f"block_q={block_q}, block_k={block_k} with d={d}, dv={dv}", 4 * block_k * (d + dv + block_q))
    O = np.empty((heads, n, dv), dtype=q3.dtype)
    first = min(n, m)  # causal rows 0..first-1 see i + 1 keys, the rest see all m
    unmasked = first * (first + 1) // 2 + (n - first) * m if causal else n * m
    tiles = ceil_div(n, block_q)
    key_rows = 0  # K and V rows each block reads: whole tiles up to its last key, clipped at m
    for t in range(tiles):
        kv_end = min(m, (t + 1) * block_q) if causal else m
        key_rows += min(m, ceil_div(kv_end, block_k) * block_k)
    item = q3.dtype.itemsize
    step = KernelStep(_attention_flash_kernel(block_q, block_k, d, dv), (tiles, heads), (block_q,),
                      (q3, k3, v3, O, np.float32(1.0 / math.sqrt(d)), bool(causal)))
    return KernelPlan("attention_flash", (step,), O, flops=heads * 2 * (d + dv) * unmasked,
                      modeled_bytes=item * heads * (n * d + key_rows * (d + dv) + n * dv),
                      shape=(*lead, n, dv), compulsory_bytes=item * heads * (n * d + m * (d + dv) + n * dv))
