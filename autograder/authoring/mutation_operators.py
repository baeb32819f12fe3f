"""The mutation operators of ``mlsys course mutate``: each maps a node of an answer cell's syntax tree to
the single edits it allows there.

Two families. The *syntactic* operators (:data:`AST_OPERATORS`) make the classic one-token mutants:
an operator or comparison swapped, a constant or bound off by one, a statement dropped. They rarely
make the mistakes students make, so a lab's tests can kill all of them and still pass plausible wrong
answers. The *semantic* operators (:data:`SEMANTIC_OPERATORS`) make those mistakes: the caller's array
updated in place, the global RNG instead of the generator passed in, another rounding mode, a narrower
dtype, objects keyed by name instead of identity, a documented default changed, sign handling dropped,
a loop's exit checked one statement early or late.
"""

from __future__ import annotations

import ast
import copy
import re
from typing import Callable, Iterator

#: An edit: the operator's name and a function that takes the node (of a fresh copy of the tree)
#: and returns what replaces it (the node itself, changed in place, or another one).
Edit = tuple[str, Callable[[ast.AST], ast.AST]]

_ARITHMETIC = {ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.Div,), ast.Div: (ast.Mult, ast.FloorDiv),
               ast.FloorDiv: (ast.Div,), ast.Mod: (ast.FloorDiv,), ast.Pow: (ast.Mult,)}
_COMPARISONS = {ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE), ast.Gt: (ast.GtE, ast.Lt),
                ast.GtE: (ast.Gt, ast.LtE), ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.Is: (ast.IsNot,),
                ast.IsNot: (ast.Is,), ast.In: (ast.NotIn,), ast.NotIn: (ast.In,)}
_MIN_MAX = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum",
            "amin": "amax", "amax": "amin", "argmin": "argmax", "argmax": "argmin"}
_DTYPES = {"float64": "float32", "float32": "float64", "int64": "int32", "int32": "int64"}
_DROPPABLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Raise, ast.Assert, ast.Delete,
              ast.Break, ast.Continue)


def _with(node: ast.AST, **fields) -> ast.AST:
    for name, value in fields.items():
        setattr(node, name, value)
    return node


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _int(value: int) -> ast.expr:
    """An int literal; a negative one as ``-n`` so that ast.unparse parenthesizes it where needed."""
    return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


def _plus(expr: ast.expr, k: int) -> ast.expr:
    """``expr + 1`` or ``expr - 1``; folded into the literal when ``expr`` is an int literal."""
    if _is_int(expr):
        return _int(expr.value + k)
    return ast.BinOp(expr, ast.Add() if k > 0 else ast.Sub(), ast.Constant(1))


def _as_load(target: ast.expr) -> ast.expr:
    loaded = copy.deepcopy(target)
    loaded.ctx = ast.Load()
    return loaded


def _arithmetic(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, (ast.BinOp, ast.AugAssign)):
        for new in _ARITHMETIC.get(type(node.op), ()):
            yield "arithmetic", lambda n, new=new: _with(n, op=new())


def _comparison(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for new in _COMPARISONS[type(op)]:
                yield "comparison", lambda n, i=i, new=new: _with(n, ops=[*n.ops[:i], new(), *n.ops[i + 1:]])


def _boolean(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.BoolOp):
        yield "boolean", lambda n: _with(n, op=ast.Or() if isinstance(n.op, ast.And) else ast.And())
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not removed", lambda n: n.operand


def _constant(node: ast.AST) -> Iterator[Edit]:
    if _is_int(node):
        for k in (1, -1):
            yield "constant", lambda n, k=k: _int(n.value + k)


def _bounds(node: ast.AST) -> Iterator[Edit]:
    """Slice bounds ±1 or dropped; ``range`` bounds ±1."""
    if isinstance(node, ast.Slice):
        for bound in ("lower", "upper"):
            if getattr(node, bound) is not None:
                for k in (1, -1):
                    yield "slice", lambda n, bound=bound, k=k: _with(n, **{bound: _plus(getattr(n, bound), k)})
                yield "slice", lambda n, bound=bound: _with(n, **{bound: None})
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        for i, arg in enumerate(node.args[:2]):
            if not isinstance(arg, ast.Starred):
                for k in (1, -1):
                    yield "range", lambda n, i=i, k=k: _with(n, args=[*n.args[:i], _plus(n.args[i], k), *n.args[i + 1:]])


def _calls(node: ast.AST) -> Iterator[Edit]:
    """The first two positional arguments swapped; ``min`` for ``max`` and the like."""
    if not isinstance(node, ast.Call):
        return
    if len(node.args) >= 2 and not any(isinstance(arg, ast.Starred) for arg in node.args[:2]):
        yield "swap arguments", lambda n: _with(n, args=[n.args[1], n.args[0], *n.args[2:]])
    func = node.func
    if isinstance(func, ast.Name) and func.id in _MIN_MAX:
        yield "min/max", lambda n: _with(n, func=ast.Name(_MIN_MAX[n.func.id], ast.Load()))
    if isinstance(func, ast.Attribute) and func.attr in _MIN_MAX:
        yield "min/max", lambda n: _with(n, func=_with(n.func, attr=_MIN_MAX[n.func.attr]))


def _statement(node: ast.AST) -> Iterator[Edit]:
    """A simple statement replaced by ``pass``."""
    if isinstance(node, _DROPPABLE) and not (isinstance(node, ast.AnnAssign) and node.value is None):
        yield "drop statement", lambda n: ast.Pass()


def _in_place(node: ast.AST) -> Iterator[Edit]:
    """``x.copy()`` for ``x``; ``x += y`` for ``x = x + y`` and back."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy"
            and not node.args and not node.keywords):
        yield "copy dropped", lambda n: n.func.value
    if isinstance(node, ast.AugAssign):
        yield "in-place", lambda n: ast.Assign([n.target], ast.BinOp(_as_load(n.target), n.op, n.value))
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp)
            and ast.unparse(node.targets[0]) == ast.unparse(node.value.left)):
        yield "in-place", lambda n: ast.AugAssign(n.targets[0], n.value.op, n.value.right)


def _dtype(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.Attribute) and node.attr in _DTYPES:
        yield "dtype", lambda n: _with(n, attr=_DTYPES[n.attr])
    if isinstance(node, ast.Constant) and node.value in _DTYPES and isinstance(node.value, str):
        yield "dtype", lambda n: ast.Constant(_DTYPES[n.value])


#: The syntactic operators: each maps a node to the edits it allows there.
AST_OPERATORS = (_arithmetic, _comparison, _boolean, _constant, _bounds, _calls, _statement, _in_place, _dtype)



# ---- semantic operators: the mistakes students make ---------------------------------------------------

_LOAD, _STORE = ast.Load(), ast.Store()


def _name(node: ast.expr) -> str:
    """The dotted name of a call's function (``np.round``, ``rng.permutation``), as written."""
    return ast.unparse(node)


def _np(function: str, *args: ast.expr, **keywords: ast.expr) -> ast.Call:
    """``np.<function>(*args, **keywords)``: the labs import numpy as np."""
    return ast.Call(ast.Attribute(ast.Name("np", _LOAD), function, _LOAD), list(args),
                    [ast.keyword(key, value) for key, value in keywords.items()])


def _call_of(node: ast.AST, names: set[str] | dict, arity: int = 1) -> bool:
    """``node`` calls one of ``names`` with exactly ``arity`` positional arguments and no keywords."""
    return (isinstance(node, ast.Call) and _name(node.func) in names and len(node.args) == arity
            and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args))


def _parameters(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = func.args
    return {arg.arg for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if arg is not None}


def _own_statements(func: ast.AST) -> list[tuple[list, int]]:
    """(block, index) of every statement in a function's body and its nested blocks, in source order;
    the bodies of nested functions and classes are their own."""
    found = []

    def visit(block: list) -> None:
        for index, statement in enumerate(block):
            found.append((block, index))
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    visit(inner)
            for handler in getattr(statement, "handlers", []):
                visit(handler.body)
    visit(func.body)
    return found


def _rewrite(func: ast.AST, k: int, change: Callable[[ast.stmt], ast.stmt]) -> ast.AST:
    """``func`` with its ``k``-th own statement replaced by ``change(statement)``."""
    block, index = _own_statements(func)[k]
    block[index] = change(block[index])
    return func


def _reads(expr: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(expr))


def _argument_in_place(node: ast.AST) -> Iterator[Edit]:
    """A parameter rebound to arithmetic on itself (``p = p - lr * g``, ``m = b1 * m + (1 - b1) * g``)
    written into the caller's array instead (``p[...] = ...``); a copy of an argument dropped (``np.copy(x)``, ``np.array(x)``,
    ``copy.deepcopy(x)``, ``list(x)``, ``dict(x)`` for ``x``)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        parameters = _parameters(node)
        for k, (block, index) in enumerate(_own_statements(node)):
            s = block[index]
            if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                    and s.targets[0].id in parameters and isinstance(s.value, ast.BinOp)
                    and _reads(s.value, s.targets[0].id)):
                yield "argument in place", lambda n, k=k: _rewrite(n, k, lambda s: ast.Assign(
                    [ast.Subscript(ast.Name(s.targets[0].id, _LOAD), ast.Constant(Ellipsis), _STORE)], s.value))
    if _call_of(node, {"np.copy", "np.array", "copy.copy", "copy.deepcopy", "list", "dict"}) \
            and isinstance(node.args[0], (ast.Name, ast.Attribute)):
        yield "copy dropped", lambda n: n.args[0]


#: Methods of numpy's Generator and their namesakes in the global ``np.random`` module.
_GENERATOR_METHODS = {"permutation": "permutation", "shuffle": "shuffle", "choice": "choice", "random": "random",
                      "integers": "randint", "normal": "normal", "standard_normal": "standard_normal",
                      "uniform": "uniform", "exponential": "exponential", "poisson": "poisson",
                      "binomial": "binomial", "multinomial": "multinomial", "gamma": "gamma", "beta": "beta",
                      "geometric": "geometric", "lognormal": "lognormal", "dirichlet": "dirichlet"}
_SEEDED = {"np.random.default_rng", "numpy.random.default_rng", "np.random.RandomState", "random.Random"}


def _global_rng(node: ast.AST) -> Iterator[Edit]:
    """A draw from the generator passed in (``rng.permutation(n)``) made from NumPy's global RNG instead
    (``np.random.permutation(n)``); a generator made without its seed (``np.random.default_rng()``)."""
    if not isinstance(node, ast.Call):
        return
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _GENERATOR_METHODS:
        receiver = _name(func.value)
        if re.search(r"rng|gen|random_state", receiver, re.IGNORECASE) and receiver not in ("np.random", "random"):
            yield "global RNG", lambda n: _with(n, func=ast.Attribute(
                ast.Attribute(ast.Name("np", _LOAD), "random", _LOAD), _GENERATOR_METHODS[n.func.attr], _LOAD))
    if _name(func) in _SEEDED and (node.args or node.keywords):
        yield "seed dropped", lambda n: _with(n, args=[], keywords=[])


_ROUND_HALF_EVEN = {"np.round", "np.around", "np.rint", "numpy.round", "numpy.around", "numpy.rint", "round"}
_FLOOR_TRUNC = {"np.floor": "trunc", "np.trunc": "floor", "numpy.floor": "trunc", "numpy.trunc": "floor",
                "math.floor": "trunc", "math.trunc": "floor"}
_CEIL = {"np.ceil", "numpy.ceil", "math.ceil"}


def _rounding(node: ast.AST) -> Iterator[Edit]:
    """Round half to even (``np.round``, ``np.rint``, ``round``) made half up, half away from zero or a
    truncation; ``floor`` and ``trunc`` swapped (they differ below zero); ``ceil(x)`` as ``floor(x) + 1``
    (wrong on integers)."""
    if _call_of(node, _ROUND_HALF_EVEN):
        as_int = (lambda e: ast.Call(ast.Name("int", _LOAD), [e], [])) if _name(node.func) == "round" else (lambda e: e)
        half = lambda x: ast.BinOp(x, ast.Add(), ast.Constant(0.5))
        yield "rounding", lambda n: as_int(_np("floor", half(n.args[0])))
        yield "rounding", lambda n: as_int(_np("copysign", _np("floor", half(_np("abs", n.args[0]))),
                                               copy.deepcopy(n.args[0])))
        yield "rounding", lambda n: as_int(_np("trunc", n.args[0]))
    if _call_of(node, _FLOOR_TRUNC):
        yield "rounding", lambda n: _with(n, func=_with(n.func, attr=_FLOOR_TRUNC[_name(n.func)]))
    if _call_of(node, _CEIL):
        yield "rounding", lambda n: ast.BinOp(_with(n, func=_with(n.func, attr="floor")), ast.Add(), ast.Constant(1))


#: A dtype and the narrower one a student might accumulate in (FP64 -> FP32 and the like are AST_OPERATORS').
_NARROWER = {"float32": "float16", "int32": "float32"}
_ALLOCATORS = {f"{module}.{f}" for module in ("np", "numpy") for f in ("zeros", "empty", "ones", "zeros_like", "empty_like", "ones_like")}


def _narrowed_dtype(node: ast.AST) -> Iterator[Edit]:
    """A dtype narrowed (``np.float32`` -> ``np.float16``, ``np.int32`` -> ``np.float32``, ``float(x)`` ->
    ``np.float32(x)``); an ``astype`` dropped; a ``dtype=`` argument dropped (numpy's default instead) or
    made float32 (``dtype=x.dtype``); an accumulator allocated without a dtype allocated in float32."""
    if isinstance(node, ast.Attribute) and node.attr in _NARROWER and _name(node.value) in ("np", "numpy"):
        yield "narrowed dtype", lambda n: _with(n, attr=_NARROWER[n.attr])
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _NARROWER:
        yield "narrowed dtype", lambda n: ast.Constant(_NARROWER[n.value])
    if not isinstance(node, ast.Call):
        return
    if isinstance(node.func, ast.Attribute) and node.func.attr == "astype" and node.args:
        yield "astype dropped", lambda n: n.func.value
    float32 = ast.Attribute(ast.Name("np", _LOAD), "float32", _LOAD)
    dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
    if dtype is not None:
        yield "dtype dropped", lambda n: _with(n, keywords=[k for k in n.keywords if k.arg != "dtype"])
        if _name(dtype) not in ("np.float32", "np.float64", "np.float16", "'float32'", "'float64'"):
            yield "narrowed dtype", lambda n: _with(n, keywords=[
                ast.keyword("dtype", float32) if k.arg == "dtype" else k for k in n.keywords])
    elif _call_of(node, _ALLOCATORS):
        yield "narrowed dtype", lambda n: _with(n, keywords=[ast.keyword("dtype", float32)])
    if _call_of(node, {"float"}):
        yield "narrowed dtype", lambda n: _with(n, func=float32)


def _identity_key(node: ast.AST) -> Iterator[Edit]:
    """Objects told apart by identity (``id(node)``, ``a is b``) told apart by their name or printed
    form instead (``getattr(node, "name", repr(node))``, ``a == b``): wrong when many share a name."""
    if _call_of(node, {"id"}):
        yield "identity key", lambda n: ast.Call(ast.Name("getattr", _LOAD), [
            n.args[0], ast.Constant("name"), ast.Call(ast.Name("repr", _LOAD), [copy.deepcopy(n.args[0])], [])], [])
        yield "identity key", lambda n: ast.Call(ast.Name("repr", _LOAD), [n.args[0]], [])
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) \
            and not any(isinstance(side, ast.Constant) for side in (node.left, *node.comparators)):
        yield "identity key", lambda n: _with(n, ops=[ast.Eq() if isinstance(n.ops[0], ast.Is) else ast.NotEq()])


def _default_constants(func: ast.AST) -> list[ast.Constant]:
    """The float and bool literals in a function's default values, in source order."""
    defaults = [*func.args.defaults, *(d for d in func.args.kw_defaults if d is not None)]
    return [c for d in defaults for c in ast.walk(d)
            if isinstance(c, ast.Constant) and type(c.value) in (float, bool)]


def _set_default(func: ast.AST, k: int, value) -> ast.AST:
    _default_constants(func)[k].value = value
    return func


def _changed_defaults(value):
    """Plausible wrong defaults: a bool flipped; a decay rate in [0.5, 1) with ten times less or more of a
    gap to 1 (``0.9`` -> ``0.99``, ``0.999`` -> ``0.99``); ``0.0`` as ``0.1``; any other float ten times
    larger or smaller."""
    if type(value) is bool:
        return [not value]
    decay = 0.5 <= value < 1
    if value == 0:
        changed = [0.1]
    elif decay:
        gap = float(f"{1 - value:.12g}")
        changed = [1 - gap / 10, 1 - gap * 10]
    else:
        changed = [value * 10, value / 10]
    rounded = [float(f"{v:.12g}") for v in changed]  # 1e-5 / 10 is 1e-06, not 1.0000000000000002e-06
    return [v for v in rounded if v != value and not (decay and v <= 0)]


def _documented_default(node: ast.AST) -> Iterator[Edit]:
    """A documented default changed (see :func:`_changed_defaults`): ``eps=1e-8`` -> ``1e-7``, ``beta=0.9``
    -> ``0.99``, a flag flipped. Int defaults are the ``constant`` operator's."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        for k, constant in enumerate(_default_constants(node)):
            for value in _changed_defaults(constant.value):
                yield "default changed", lambda n, k=k, value=value: _set_default(n, k, value)


def _sign_dropped(node: ast.AST) -> Iterator[Edit]:
    """Sign handling dropped: ``copysign(a, b)`` as ``a``, ``signbit(x)`` as ``x < 0`` (wrong for -0.0 and
    NaN), ``abs(x)`` as ``x``, ``np.sign(x)`` as ones, a negation ``-x`` as ``x``."""
    if _call_of(node, {"np.copysign", "numpy.copysign", "math.copysign"}, arity=2):
        yield "sign dropped", lambda n: n.args[0]
    if _call_of(node, {"np.signbit", "numpy.signbit"}):
        yield "sign dropped", lambda n: ast.Compare(n.args[0], [ast.Lt()], [ast.Constant(0)])
    if _call_of(node, {"abs", "np.abs", "np.absolute", "np.fabs", "numpy.abs", "math.fabs"}):
        yield "sign dropped", lambda n: n.args[0]
    if _call_of(node, {"np.sign", "numpy.sign"}):
        yield "sign dropped", lambda n: _np("ones_like", n.args[0])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant):
        yield "sign dropped", lambda n: n.operand


_EXITS = (ast.Break, ast.Continue, ast.Return)


def _is_exit(statement: ast.stmt, bare: bool) -> bool:
    """An exit (``break``, ``continue``, ``return``), or a guard ``if c: ...; <exit>`` without ``else``."""
    if isinstance(statement, ast.If):
        return not statement.orelse and isinstance(statement.body[-1], _EXITS)
    return bare and isinstance(statement, _EXITS)


def _moved(node: ast.AST, k: int, step: int) -> ast.AST:
    body = node.body
    body[k], body[k + step] = body[k + step], body[k]
    return node


def _exit_moved(node: ast.AST) -> Iterator[Edit]:
    """A loop's or function's exit checked one statement later or earlier (a guard ``if c: break`` after
    the work of the iteration instead of before it); ``break`` and ``continue`` swapped."""
    if isinstance(node, ast.Break):
        yield "exit moved", lambda n: ast.Continue()
    if isinstance(node, ast.Continue):
        yield "exit moved", lambda n: ast.Break()
    if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    loop = isinstance(node, (ast.For, ast.While))
    body = node.body
    first = 0 if loop or not (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)) else 1
    for k in range(first, len(body)):
        if _is_exit(body[k], bare=loop):
            if k + 1 < len(body):
                yield "exit moved", lambda n, k=k: _moved(n, k, 1)
            if k > first:
                yield "exit moved", lambda n, k=k: _moved(n, k, -1)


#: The semantic operators: the mistakes students make, beside :data:`AST_OPERATORS`.
SEMANTIC_OPERATORS = (_argument_in_place, _global_rng, _rounding, _narrowed_dtype, _identity_key,
                      _documented_default, _sign_dropped, _exit_moved)
#: Operator families by the name ``mlsys course mutate --operators`` takes.
FAMILIES = {"ast": AST_OPERATORS, "semantic": SEMANTIC_OPERATORS}
