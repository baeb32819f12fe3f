"""A training graph for memory planning: ops that read and write named tensors of known byte sizes.

Only what memory planning needs is kept: which op reads and writes which tensor, how many bytes each
tensor takes, what kind of tensor it is, and which tensors must outlive the training step. Nothing is
computed. :class:`TrainingGraphBuilder` takes the *forward* ops with the tensors each op's backward
reads (``saves``) and appends the *backward* ops, the way reverse-mode autodiff would run them.

Tensor kinds:

* ``"input"`` (a batch of data or labels) and ``"parameter"``: graph inputs, present before step 0;
* ``"activation"``: written by a forward op; ``"gradient"``: written by a backward op.

Persistent tensors (parameters, parameter gradients, the loss) stay live until the last step: the
optimizer reads them after the graph has run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

KINDS = ("input", "parameter", "activation", "gradient")
GRAPH_INPUT_KINDS = ("input", "parameter")


@dataclass(frozen=True)
class OpNode:
    """One op: it reads ``inputs`` and writes ``outputs`` (tensor names).

    inplace: an input whose buffer the op's single output may take over, if that input is not needed
    afterwards (e.g. ``relu`` on a linear layer's output, ``relu``'s backward on its incoming gradient).
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    inplace: str | None = None


@dataclass(frozen=True)
class TrainingGraph:
    """Ops (in a valid execution order), byte size and kind of every tensor, and the persistent tensors."""

    ops: tuple[OpNode, ...]
    sizes: Mapping[str, int]
    kinds: Mapping[str, str]
    persistent: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        _check_tensors(self.sizes, self.kinds, self.persistent)
        _check_ops(self.ops, self.sizes, self.kinds)

    @property
    def inputs(self) -> list[str]:
        """The tensors no op writes (data and parameters), present before the first step."""
        return [name for name, kind in self.kinds.items() if kind in GRAPH_INPUT_KINDS]

    def op(self, name: str) -> OpNode:
        for node in self.ops:
            if node.name == name:
                return node
        raise KeyError(f"no op named {name!r} in the graph")


def _check_tensors(sizes: Mapping[str, int], kinds: Mapping[str, str], persistent: Iterable[str]) -> None:
    for name, size in sizes.items():
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"tensor {name!r}: size must be an int number of bytes, got {size!r}")
        if size < 0:
            raise ValueError(f"tensor {name!r}: size must be >= 0 bytes, got {size}")
    if set(kinds) != set(sizes):
        raise ValueError(f"every tensor needs a size and a kind; only sized: {sorted(set(sizes) - set(kinds))}, "
                         f"only kinded: {sorted(set(kinds) - set(sizes))}")
    for name, kind in kinds.items():
        if kind not in KINDS:
            raise ValueError(f"tensor {name!r}: unknown kind {kind!r}, expected one of {KINDS}")
    unknown = set(persistent) - set(sizes)
    if unknown:
        raise ValueError(f"persistent tensors that are not in the graph: {sorted(unknown)}")


def _check_ops(ops: Sequence[OpNode], sizes: Mapping[str, int], kinds: Mapping[str, str]) -> None:
    """Names unique, tensors known, each written once and only by ops, every read tensor written somewhere."""
    names: set[str] = set()
    writer: dict[str, str] = {}
    for node in ops:
        if node.name in names:
            raise ValueError(f"two ops are named {node.name!r}")
        names.add(node.name)
        for t in (*node.inputs, *node.outputs):
            if t not in sizes:
                raise ValueError(f"op {node.name!r} names tensor {t!r}, which has no size")
        for t in node.outputs:
            if kinds[t] in GRAPH_INPUT_KINDS:
                raise ValueError(f"op {node.name!r} writes {t!r}, a graph input ({kinds[t]})")
            if t in writer:
                raise ValueError(f"tensor {t!r} is written by two ops, {writer[t]!r} and {node.name!r}")
            writer[t] = node.name
        if node.inplace is not None:
            if node.inplace not in node.inputs or len(node.outputs) != 1:
                raise ValueError(f"op {node.name!r}: inplace={node.inplace!r} must name one of its inputs "
                                 f"{node.inputs}, and the op must have a single output")
            if sizes[node.outputs[0]] > sizes[node.inplace]:
                raise ValueError(f"op {node.name!r}: output {node.outputs[0]!r} ({sizes[node.outputs[0]]} B) "
                                 f"does not fit in the buffer of {node.inplace!r} ({sizes[node.inplace]} B)")
    for node in ops:
        for t in node.inputs:
            if kinds[t] not in GRAPH_INPUT_KINDS and t not in writer:
                raise ValueError(f"op {node.name!r} uses {t!r} before any definition: no op writes it "
                                 f"and it is not a graph input")


@dataclass(frozen=True)
class _ForwardOp:
    name: str
    inputs: tuple[str, ...]
    saves: tuple[str, ...]
    inplace: str | None
    elementwise: bool


class TrainingGraphBuilder:
    """Record forward ops; :meth:`build` appends the backward pass and returns the :class:`TrainingGraph`.

    Example (a one-layer classifier on a batch of 32, in float32)::

        b = TrainingGraphBuilder(bytes_per_element=4)
        x, y = b.input("x", (32, 784)), b.input("y", (32,))
        W = b.parameter("W", (784, 10))
        logits = b.op("logits", [x, W], (32, 10), saves=[x, W])
        b.op("loss", [logits, y], (), saves=[logits, y])
        graph = b.build("loss")
    """

    def __init__(self, bytes_per_element: int = 4):
        if bytes_per_element <= 0:
            raise ValueError(f"bytes_per_element must be positive, got {bytes_per_element}")
        self.bytes_per_element = bytes_per_element
        self._sizes: dict[str, int] = {}
        self._kinds: dict[str, str] = {}
        self._forward: list[_ForwardOp] = []

    def _tensor(self, name: str, shape: Sequence[int], kind: str) -> str:
        if name in self._sizes:
            raise ValueError(f"tensor {name!r} is defined twice")
        if any(int(d) < 0 for d in shape):
            raise ValueError(f"tensor {name!r}: negative dimension in shape {tuple(shape)}")
        self._sizes[name] = math.prod(int(d) for d in shape) * self.bytes_per_element
        self._kinds[name] = kind
        return name

    def input(self, name: str, shape: Sequence[int]) -> str:
        """A batch of data (or labels): no gradient, freed after its last use."""
        return self._tensor(name, shape, "input")

    def parameter(self, name: str, shape: Sequence[int]) -> str:
        """A trainable tensor: persistent, and its gradient ``d<name>`` is persistent too."""
        return self._tensor(name, shape, "parameter")

    def op(self, name: str, inputs: Sequence[str], shape: Sequence[int], saves: Sequence[str] = (),
           inplace: str | None = None, elementwise: bool = False) -> str:
        """A forward op writing the tensor ``name`` of ``shape``; returns ``name``.

        saves: the tensors its backward reads (some of ``inputs``, or ``name`` itself).
        inplace: an input this op may overwrite. elementwise: its backward may overwrite the incoming gradient.
        """
        for t in (*inputs, *(s for s in saves if s != name)):
            if t not in self._sizes:
                raise ValueError(f"op {name!r} uses {t!r} before its definition")
        self._tensor(name, shape, "activation")
        self._forward.append(_ForwardOp(name, tuple(inputs), tuple(saves), inplace, elementwise))
        return name

    def build(self, loss: str) -> TrainingGraph:
        """The forward ops in the order given, then their backward ops in reverse, seeded at ``loss``."""
        if loss not in {f.name for f in self._forward}:
            raise ValueError(f"loss {loss!r} is not the output of a forward op")
        sizes, kinds = dict(self._sizes), dict(self._kinds)
        ops = [OpNode(f.name, f.inputs, (f.name,), f.inplace) for f in self._forward]
        ops += _backward_ops(self._forward, loss, sizes, kinds)
        params = [t for t, k in kinds.items() if k == "parameter"]
        persistent = frozenset(params + [f"d{p}" for p in params if f"d{p}" in sizes] + [loss])
        return TrainingGraph(tuple(ops), sizes, kinds, persistent)


def _backward_ops(forward: Sequence[_ForwardOp], loss: str, sizes: dict[str, int],
                  kinds: dict[str, str]) -> list[OpNode]:
    """Reverse mode over the forward ops: one backward op each, plus a sum where a tensor has several consumers.

    The backward op of ``f`` reads the gradient of f's output and the tensors f saved, and writes a
    partial gradient for each of f's inputs that needs one. A tensor read by n > 1 ops gets n partials
    ``d<t>@<op>``; once the last of them is written, an ``accumulate`` op sums them into ``d<t>``.
    Ops the loss does not depend on get no backward op.
    """
    reachable = _reaches_loss(forward, loss)
    needs_grad = {t for t, k in kinds.items() if k != "input"}
    consumers: dict[str, int] = {}
    for f in forward:
        if f.name in reachable:
            for t in set(f.inputs) & needs_grad:
                consumers[t] = consumers.get(t, 0) + 1
    partials: dict[str, list[str]] = {t: [] for t in consumers}
    ops: list[OpNode] = []

    def gradient(name: str, like: str) -> str:
        sizes[name], kinds[name] = sizes[like], "gradient"
        return name

    for f in reversed(forward):
        if f.name not in reachable:
            continue
        outputs, complete = [], []
        for t in dict.fromkeys(f.inputs):  # an input read twice by f gets one partial
            if t not in needs_grad:
                continue
            if consumers[t] == 1:
                outputs.append(gradient(f"d{t}", t))
                continue
            outputs.append(gradient(f"d{t}@{f.name}", t))
            partials[t].append(outputs[-1])
            if len(partials[t]) == consumers[t]:
                complete.append(t)
        grad_in = () if f.name == loss else (f"d{f.name}",)
        inplace = grad_in[0] if f.elementwise and grad_in and len(outputs) == 1 else None
        ops.append(OpNode(f"grad_{f.name}", grad_in + f.saves, tuple(outputs), inplace))
        for t in complete:
            ops.append(OpNode(f"accumulate_d{t}", tuple(partials[t]), (gradient(f"d{t}", t),), partials[t][0]))
    return ops


def _reaches_loss(forward: Sequence[_ForwardOp], loss: str) -> set[str]:
    """Forward ops whose output the loss depends on (only they get a backward op)."""
    needed, reachable = {loss}, set()
    for f in reversed(forward):
        if f.name in needed:
            reachable.add(f.name)
            needed.update(f.inputs)
    return reachable
