"""The eight collectives on numpy arrays: checks, agreement between ranks, then one algorithm.

Each function turns the user's arrays into a flat working buffer cut into p blocks (``blocks``),
checks that every rank called the same collective with matching arguments (an untraced all-gather of
small descriptions; a mismatch raises :class:`CollectiveMismatchError` on every rank), and runs the
chosen algorithm (``ring``, ``tree``, ``naive`` or ``pairwise``) in place. ``ALGORITHMS`` lists which algorithm
implements which collective; the first one listed is the default. ``iall_reduce``, ``ireduce_scatter`` and
``iall_gather`` check and agree at once and return the ring's schedule and the result, for ``lane``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .blocks import as_array, block, bounds_from_sizes, even_bounds, split_sizes
from .errors import CollectiveMismatchError
from .naive import Naive
from .ops import check_op
from .pairwise import Pairwise
from .ring import Ring, Steps
from .tree import Tree

if TYPE_CHECKING:
    from .messages import GroupView

_RING = Ring()
_IMPLEMENTATIONS: dict[str, object] = {"ring": _RING, "tree": Tree(), "naive": Naive(), "pairwise": Pairwise()}
Prepared = tuple[np.ndarray, list[int], Callable[[], np.ndarray]]  # working buffer, its block bounds, the result
Schedule = tuple[Steps, Callable[[], np.ndarray]]  # a non-blocking collective: its steps, then its result
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "broadcast": ("tree", "ring", "naive"),
    "reduce": ("tree", "ring", "naive"),
    "scatter": ("tree", "naive"),
    "gather": ("tree", "naive"),
    "all_gather": ("ring", "tree", "naive"),
    "reduce_scatter": ("ring", "tree", "naive"),
    "all_reduce": ("ring", "tree", "naive"),
    "all_to_all": ("pairwise", "ring"),
}


def _algorithm(name: str, algorithm: str) -> Callable[..., None]:
    if algorithm not in ALGORITHMS[name]:
        raise ValueError(f"{name} has no algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS[name])}")
    return getattr(_IMPLEMENTATIONS[algorithm], name)


def _check_root(g: GroupView, root: int) -> int:
    if not isinstance(root, (int, np.integer)) or not 0 <= root < g.world_size:
        raise ValueError(f"root must be a rank in 0..{g.world_size - 1}, got {root!r}")
    return int(root)


def _agree(g: GroupView, name: str, algorithm: str, root: int | None, op: str | None, meta: Any) -> list[Any]:
    """All-gather (collective, algorithm, root, op, meta) and check the first four agree; return the metas."""
    calls = g.all_gather_object((name, algorithm, root, op, meta))
    _require_same("collectives out of step", "collective", [call[0] for call in calls])
    for i, label in enumerate(("algorithm", "root", "op"), start=1):
        _require_same(name, label, [call[i] for call in calls])
    return [call[4] for call in calls]


def _require_same(name: str, label: str, values: Sequence[Any]) -> None:
    if any(v != values[0] for v in values):
        listing = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise CollectiveMismatchError(f"{name}: the ranks disagree on the {label} ({listing})")


def _describe(x: np.ndarray) -> tuple[str, tuple[int, ...]]:
    return (str(x.dtype), tuple(x.shape))


def _flat_copy(x: np.ndarray) -> np.ndarray:
    return np.array(x, order="C", copy=True).reshape(-1)


def _reduction_input(g: GroupView, name: str, x: Any, op: str, algorithm: str,
                     root: int | None) -> np.ndarray:
    """Check a reduction's input (same dtype and shape on every rank) and return it as-is."""
    x = as_array(x, "x")
    check_op(op, x.dtype)
    metas = _agree(g, name, algorithm, root, op, _describe(x))
    _require_same(name, "dtype", [m[0] for m in metas])
    _require_same(name, "shape", [m[1] for m in metas])
    return x


def _finish_mean(buf: np.ndarray, op: str, p: int) -> None:
    if op == "mean":
        buf /= p


def _all_reduce_buffer(g: GroupView, name: str, x: Any, op: str, algorithm: str) -> Prepared:
    x = _reduction_input(g, name, x, op, algorithm, None)
    buf = _flat_copy(x)

    def result() -> np.ndarray:
        _finish_mean(buf, op, g.world_size)
        return buf.reshape(x.shape)
    return buf, even_bounds(buf.size, g.world_size), result


def all_reduce(g: GroupView, x: Any, op: str = "sum", algorithm: str = "ring") -> np.ndarray:
    """``op`` over every rank's ``x`` (same shape and dtype), returned on every rank."""
    run = _algorithm("all_reduce", algorithm)
    buf, bounds, result = _all_reduce_buffer(g, "all_reduce", x, op, algorithm)
    run(g, buf, bounds, op)
    return result()


def iall_reduce(g: GroupView, x: Any, op: str = "sum") -> Schedule:
    """The ring all-reduce as a schedule (steps, result) for the communication lane."""
    buf, bounds, result = _all_reduce_buffer(g, "iall_reduce", x, op, "ring")
    return _RING.all_reduce_steps(g, buf, bounds, op), result


def reduce(g: GroupView, x: Any, root: int = 0, op: str = "sum", algorithm: str = "tree") -> np.ndarray | None:
    """``op`` over every rank's ``x`` at ``root``; None on the other ranks."""
    run = _algorithm("reduce", algorithm)
    root = _check_root(g, root)
    x = _reduction_input(g, "reduce", x, op, algorithm, root)
    buf = _flat_copy(x)
    run(g, buf, even_bounds(buf.size, g.world_size), root, op)
    if g.rank != root:
        return None
    _finish_mean(buf, op, g.world_size)
    return buf.reshape(x.shape)


def _reduce_scatter_buffer(g: GroupView, name: str, x: Any, op: str, algorithm: str) -> Prepared:
    x = _reduction_input(g, name, x, op, algorithm, None)
    if x.ndim == 0:
        raise ValueError(f"{name} splits x along axis 0: x must have at least one dimension")
    rows = split_sizes(x.shape[0], g.world_size)
    row_size = int(np.prod(x.shape[1:]))
    bounds = bounds_from_sizes([k * row_size for k in rows])
    buf = _flat_copy(x)

    def result() -> np.ndarray:
        mine = block(buf, bounds, g.rank)
        _finish_mean(mine, op, g.world_size)
        return mine.reshape((rows[g.rank], *x.shape[1:])).copy()
    return buf, bounds, result


def reduce_scatter(g: GroupView, x: Any, op: str = "sum", algorithm: str = "ring") -> np.ndarray:
    """Rank i gets part i (``np.array_split`` along axis 0) of ``op`` over every rank's ``x``."""
    run = _algorithm("reduce_scatter", algorithm)
    buf, bounds, result = _reduce_scatter_buffer(g, "reduce_scatter", x, op, algorithm)
    run(g, buf, bounds, op)
    return result()


def ireduce_scatter(g: GroupView, x: Any, op: str = "sum") -> Schedule:
    """The ring reduce-scatter as a schedule (steps, result) for the communication lane."""
    buf, bounds, result = _reduce_scatter_buffer(g, "ireduce_scatter", x, op, "ring")
    return _RING.reduce_scatter_steps(g, buf, bounds, op), result


def broadcast(g: GroupView, x: Any, root: int = 0, algorithm: str = "tree") -> np.ndarray:
    """The root's ``x`` on every rank; a non-root's ``x`` (None or an array) is filled in place."""
    run = _algorithm("broadcast", algorithm)
    root = _check_root(g, root)
    if g.rank == root and x is None:
        raise TypeError(f"broadcast: the root (rank {root}) must pass an array, got None")
    if x is not None:
        x = as_array(x, "x")
    metas = _agree(g, "broadcast", algorithm, root, None, None if x is None else _describe(x))
    dtype, shape = metas[root]
    wrong = {r: m for r, m in enumerate(metas) if m is not None and m != metas[root]}
    if wrong:
        listing = ", ".join(f"rank {r}: {m}" for r, m in wrong.items())
        raise CollectiveMismatchError(f"broadcast: the root (rank {root}) sends {metas[root]}, "
                                      f"but these ranks pass arrays that do not match ({listing})")
    buf = _flat_copy(x) if g.rank == root else np.empty(int(np.prod(shape)), dtype)
    run(g, buf, even_bounds(buf.size, g.world_size), root)
    result = buf.reshape(shape)
    if g.rank != root and x is not None:
        x[...] = result
        return x
    return result


def scatter(g: GroupView, x: Any, root: int = 0, algorithm: str = "tree") -> np.ndarray:
    """Rank i gets chunk i of the root's ``x`` (a list of p arrays, or an array cut along axis 0)."""
    run = _algorithm("scatter", algorithm)
    root = _check_root(g, root)
    p = g.world_size
    chunks: list[np.ndarray] = []
    if g.rank == root:
        if isinstance(x, (list, tuple)):
            chunks = [as_array(c, "each chunk") for c in x]
        else:
            whole = as_array(x, "x")
            if whole.ndim == 0:
                raise ValueError("scatter: x must have at least one dimension (it is split along axis 0)")
            chunks = np.array_split(whole, p)
        if len(chunks) != p:
            raise ValueError(f"scatter: the root must pass {p} chunks (one per rank), got {len(chunks)}")
        if len({c.dtype for c in chunks}) > 1:
            raise TypeError(f"scatter: the chunks must share a dtype, got {[str(c.dtype) for c in chunks]}")
    meta = (str(chunks[0].dtype), [c.shape for c in chunks]) if g.rank == root else None
    dtype, shapes = _agree(g, "scatter", algorithm, root, None, meta)[root]
    bounds = bounds_from_sizes([int(np.prod(s)) for s in shapes])
    if g.rank == root:
        buf = np.concatenate([c.reshape(-1) for c in chunks])
    else:
        buf = np.empty(bounds[-1], dtype)
    run(g, buf, bounds, root)
    return block(buf, bounds, g.rank).reshape(shapes[g.rank]).copy()


def _gather_input(g: GroupView, name: str, x: Any, algorithm: str,
                  root: int | None) -> tuple[np.ndarray, list[int], tuple[int, ...]]:
    """The working buffer (this rank's block filled), bounds, and result shape of a gather."""
    x = np.atleast_1d(as_array(x, "x"))
    metas = _agree(g, name, algorithm, root, None, _describe(x))
    _require_same(name, "dtype", [m[0] for m in metas])
    _require_same(name, "shape after axis 0", [m[1][1:] for m in metas])
    bounds = bounds_from_sizes([int(np.prod(m[1])) for m in metas])
    buf = np.empty(bounds[-1], x.dtype)
    block(buf, bounds, g.rank)[:] = x.reshape(-1)
    return buf, bounds, (sum(m[1][0] for m in metas), *x.shape[1:])


def gather(g: GroupView, x: Any, root: int = 0, algorithm: str = "tree") -> np.ndarray | None:
    """Every rank's ``x`` concatenated along axis 0 in rank order, at ``root``; None elsewhere."""
    run = _algorithm("gather", algorithm)
    root = _check_root(g, root)
    buf, bounds, shape = _gather_input(g, "gather", x, algorithm, root)
    run(g, buf, bounds, root)
    return buf.reshape(shape) if g.rank == root else None


def all_gather(g: GroupView, x: Any, algorithm: str = "ring") -> np.ndarray:
    """Every rank's ``x`` concatenated along axis 0 in rank order, on every rank."""
    run = _algorithm("all_gather", algorithm)
    buf, bounds, shape = _gather_input(g, "all_gather", x, algorithm, None)
    run(g, buf, bounds)
    return buf.reshape(shape)


def iall_gather(g: GroupView, x: Any) -> Schedule:
    """The ring all-gather as a schedule (steps, result) for the communication lane."""
    buf, bounds, shape = _gather_input(g, "iall_gather", x, "ring", None)
    return _RING.all_gather_steps(g, buf, bounds), lambda: buf.reshape(shape)


def all_to_all(g: GroupView, chunks: Any, algorithm: str = "pairwise") -> list[np.ndarray]:
    """Chunk j of this rank goes to rank j; returns the p chunks received (index i: from rank i).

    ``chunks``: a list of p arrays of one dtype (the same on every rank) and any shapes, so the
    sizes may differ for every pair of ranks (the ranks learn them in the untraced agreement step).
    """
    run = _algorithm("all_to_all", algorithm)
    p, r = g.world_size, g.rank
    if not isinstance(chunks, (list, tuple)):
        raise TypeError(f"all_to_all: chunks must be a list of {p} arrays (chunk j goes to rank j), "
                        f"got {type(chunks).__name__}")
    if len(chunks) != p:
        raise ValueError(f"all_to_all: pass {p} chunks (one per rank, chunk j goes to rank j), got {len(chunks)}")
    chunks = [as_array(c, "each chunk") for c in chunks]
    if len({c.dtype for c in chunks}) > 1:
        raise TypeError(f"all_to_all: the chunks must share a dtype, got {[str(c.dtype) for c in chunks]}")
    metas = _agree(g, "all_to_all", algorithm, None, None, (str(chunks[0].dtype), [c.shape for c in chunks]))
    _require_same("all_to_all", "dtype", [m[0] for m in metas])
    incoming = [metas[src][1][r] for src in range(p)]
    send_bounds = bounds_from_sizes([c.size for c in chunks])
    recv_bounds = bounds_from_sizes([int(np.prod(s)) for s in incoming])
    send = np.concatenate([c.reshape(-1) for c in chunks])
    recv = np.empty(recv_bounds[-1], send.dtype)
    block(recv, recv_bounds, r)[:] = block(send, send_bounds, r)
    run(g, send, send_bounds, recv, recv_bounds)
    return [block(recv, recv_bounds, src).reshape(shape) for src, shape in enumerate(incoming)]
