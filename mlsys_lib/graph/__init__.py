"""Graph-level optimization: a dataflow IR, rewrite passes, and automated substitution discovery.

* **IR** (:mod:`.ir`, :mod:`.ops`): immutable :class:`Graph` of :class:`Node` (op, inputs, attributes,
  inferred shape and dtype), built with :class:`GraphBuilder` or captured from an autodiff
  define-then-run graph (:func:`from_autodiff`); :func:`evaluate` runs it in numpy;
  :func:`format_graph` prints it, :func:`draw_graph` draws it.
* **Passes**, each ``Graph -> Graph`` returning a new graph, or the same object when nothing changed:
  :func:`constant_fold`, :func:`simplify`, :func:`cse`, :func:`dce`, :func:`fold_conv_batch_norm`,
  :func:`fuse_elementwise`; :class:`PassManager` runs them to a fixed point.
* **Rewrite rules** (:mod:`.pattern`): :class:`Rule` ``source -> target`` templates, :func:`rewrite`.
* **Cost model** (:mod:`.cost`): per-op FLOPs and bytes on a roofline plus launch overhead.
* **Substitution discovery** (:mod:`.discovery`, :mod:`.verify`): enumerate, fingerprint, prune,
  verify (TASO-style), with counts per stage; :func:`verify_rule` for any rule, on the random
  inputs of :func:`random_inputs` (``±10**u``, ``u`` uniform in [-3, 3]).
* **Search** (:mod:`.search`): :func:`greedy_optimize` and TASO's :func:`backtracking_optimize` (factor α).
"""

from .capture import from_autodiff
from .conv_bn import fold_conv_batch_norm
from .cost import CostModel, OpCost, node_flops_bytes, traffic
from .discovery import Discovery, Substitution, discover, enumerate_graphs
from .evaluate import evaluate
from .fusion import fuse_elementwise
from .generate import random_graph
from .ir import Graph, GraphBuilder, Node, format_graph, make_node
from .ops import OPS, OpDef, conv2d_reference
from .pass_manager import INFERENCE_PASSES, PassManager, PassStats
from .passes import SIMPLIFICATIONS, constant_fold, cse, dce, simplify
from .pattern import Rule, apply_rule, parse_template, rewrite
from .search import SearchResult, backtracking_optimize, greedy_optimize
from .show import draw_graph
from .verify import Verdict, random_inputs, verify_rule

__all__ = [
    "Graph", "Node", "GraphBuilder", "make_node", "OPS", "OpDef", "conv2d_reference",
    "evaluate", "format_graph", "draw_graph", "from_autodiff", "random_graph",
    "constant_fold", "simplify", "SIMPLIFICATIONS", "cse", "dce", "fold_conv_batch_norm", "fuse_elementwise",
    "PassManager", "PassStats", "INFERENCE_PASSES",
    "Rule", "parse_template", "rewrite", "apply_rule",
    "CostModel", "OpCost", "node_flops_bytes", "traffic",
    "discover", "Discovery", "Substitution", "enumerate_graphs", "verify_rule", "Verdict", "random_inputs",
    "greedy_optimize", "backtracking_optimize", "SearchResult",
]
