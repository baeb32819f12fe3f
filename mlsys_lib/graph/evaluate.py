"""evaluate: run a graph in numpy, the reference every pass and rewrite is checked against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .ir import Graph
from .ops import OPS


def evaluate(graph: Graph, feeds: Mapping[str, Any], outputs: Sequence[str] | None = None) -> list[np.ndarray]:
    """The values of ``outputs`` (default: the graph's outputs, in order) given a value for every input node.

    feeds: input name -> array of that input's shape (cast to its dtype). Only the nodes the outputs
    depend on are computed. ValueError naming the input for a missing feed or a wrong shape, and for
    a feed that names no input node.
    """
    outputs = graph.outputs if outputs is None else tuple(outputs)
    for name in feeds:
        if name not in graph or graph[name].op != "input":
            raise ValueError(f"evaluate: feed {name!r} is not an input node of the graph; inputs: {list(graph.inputs)}")
    for name in outputs:
        if name not in graph:
            raise ValueError(f"evaluate: output {name!r} is not a node of the graph")
    needed = graph.ancestors(outputs)
    values: dict[str, np.ndarray] = {}
    for node in graph:
        if node.name not in needed:
            continue
        if node.op == "input":
            values[node.name] = _checked_feed(node.name, node.shape, node.dtype, feeds)
        else:
            result = OPS[node.op].compute(node.attrs, *[values[i] for i in node.inputs])
            values[node.name] = np.asarray(result, dtype=node.dtype)
    return [values[name] for name in outputs]


def _checked_feed(name: str, shape: tuple[int, ...], dtype: np.dtype, feeds: Mapping[str, Any]) -> np.ndarray:
    if name not in feeds:
        raise ValueError(f"evaluate: input {name!r} (shape {shape}) was not fed")
    value = np.asarray(feeds[name])
    if value.shape != shape:
        raise ValueError(f"evaluate: input {name!r} expects shape {shape}, was fed shape {value.shape}")
    return value.astype(dtype, copy=False)
