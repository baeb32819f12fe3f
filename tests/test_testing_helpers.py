"""The helpers the labs' tests rely on: reference guard, static checks, numpy oracle."""

import numpy as np
import pytest
from numba import njit

from mlsys_lib.testing import (ReferenceUsedError, assert_identical, assert_loops_only, assert_unaliased, called_functions,
                               count_misses, deterministic, frozen, identical, numpy_view, reference_guard,
                               reference_parts)


def reference(x):
    return x + 1


class Thing:
    def method(self):
        return "real"

    @property
    def prop(self):
        return "real"


def test_guard_catches_aliases_and_restores():
    alias = reference  # imported under another name before the guard
    with reference_guard(reference):
        with pytest.raises(ReferenceUsedError, match="test_testing_helpers.reference"):
            alias(1)
    assert alias(1) == 2 and reference(1) == 2


def test_guard_methods_properties_and_closures():
    def outer():
        k = 10

        def inner(x):
            return x + k
        return inner

    inner = outer()
    with reference_guard(Thing.method, Thing.prop, inner):
        for call in (lambda: Thing().method(), lambda: Thing().prop, lambda: inner(1)):
            with pytest.raises(ReferenceUsedError):
                call()
    assert Thing().method() == "real" and Thing().prop == "real" and inner(1) == 11


def test_guard_restores_after_an_error_inside():
    with pytest.raises(KeyError):
        with reference_guard(reference):
            raise KeyError("boom")
    assert reference(1) == 2


def _notebook(source):
    """The functions a notebook's cells define, in a namespace of their own (as a kernel's user namespace)."""
    namespace = {}
    exec(compile(source, "<notebook>", "exec"), namespace)
    return namespace


def test_reference_parts_grade_b_on_the_reference_a_and_restore():
    nb = _notebook("def part(x):\n    return x - 1  # the student's wrong part\n"
                   "def whole(x):\n    return 10 * part(x)\n")
    wrong_part = nb["part"]
    assert nb["whole"](1) == 0
    with reference_parts(nb["whole"], part=reference):
        assert nb["whole"](1) == 20, "the whole is graded on the reference part"
        with reference_guard(reference):  # a direct call of the reference stays caught
            assert nb["whole"](1) == 20
            with pytest.raises(ReferenceUsedError):
                reference(1)
    assert nb["part"] is wrong_part and nb["whole"](1) == 0


def test_reference_parts_restore_after_an_error_and_remove_what_was_absent():
    nb = _notebook("def whole(x):\n    return helper(x)\n")
    with pytest.raises(ZeroDivisionError):
        with reference_parts(nb["whole"], helper=reference):
            assert nb["whole"](1) == 2
            1 / 0
    assert "helper" not in nb
    with pytest.raises(TypeError, match="Python function"):
        with reference_parts(len, helper=reference):
            pass


def test_guard_refuses_compiled_kernels():
    kernel = njit(lambda x: x)
    with pytest.raises(TypeError, match="plain Python functions"):
        with reference_guard(kernel):
            pass


def _loops(A, B):
    C = np.zeros((A.shape[0], B.shape[1]))
    for i in range(A.shape[0]):
        for k in range(A.shape[1]):
            for j in range(B.shape[1]):
                C[i, j] += A[i, k] * B[k, j]
    return C


def _operator(A, B):
    return A @ B


def _dot(A, B):
    return np.dot(A, B)


def _nested(A, B):
    def helper():
        return np.matmul(A, B)
    return helper()


def test_assert_loops_only():
    assert_loops_only(njit(_loops))
    with pytest.raises(AssertionError, match="@njit"):
        assert_loops_only(_loops)
    for cheat, what in [(_operator, "@ operator"), (_dot, "dot"), (_nested, "matmul")]:
        with pytest.raises(AssertionError, match=what):
            assert_loops_only(njit(cheat))


# An answer's helpers, as a notebook defines them: globals of this module, compiled or not.
_block_product = njit(_operator)
_honest_block = njit(_loops)


def _calls_helper(A, B):
    return _block_product(A, B)


def _calls_honest_helper(A, B):
    return _honest_block(A, B)


def _calls_helper_of_helper(A, B):
    return _calls_helper(A, B)


def _ping(A, B, depth):  # _ping and _pong call each other: a cycle
    return _loops(A, B) if depth == 0 else _pong(A, B, depth - 1)


def _pong(A, B, depth):
    return _ping(A, B, depth)


def _closing_over(helper):
    def answer(A, B):
        return helper(A, B)
    return answer


def _renamed_dot(A, B):
    return _d(A, B)


_d = np.dot


def _library_kernel(A, B):
    C = np.zeros((A.shape[0], B.shape[1]))
    _reordered_kernel(A, B, C)
    return C


from mlsys_lib.tensor.matmul import _reordered_kernel  # noqa: E402  (a library kernel, loops and all)


def test_assert_loops_only_follows_the_functions_the_answer_calls():
    assert_loops_only(njit(_calls_honest_helper))
    assert_loops_only(njit(_ping))  # the cycle ends
    assert_loops_only(njit(_closing_over(_honest_block)))
    for cheat, what in [(_calls_helper, "calls _operator, which uses the @ operator"),
                        (_calls_helper_of_helper, "calls _operator, which uses the @ operator"),
                        (_closing_over(_block_product), "calls _operator, which uses the @ operator"),
                        (_closing_over(_dot), "calls _dot, which calls dot"),
                        (_renamed_dot, "calls _d, numpy's dot"),
                        (_library_kernel, "the library's mlsys_lib.tensor.matmul._reordered_kernel")]:
        with pytest.raises(AssertionError, match=what):
            assert_loops_only(njit(cheat))
    names = {f.__name__ for f in called_functions(njit(_calls_helper_of_helper))}
    assert names == {"_calls_helper_of_helper", "_calls_helper", "_operator"}
    assert {f.__name__ for f in called_functions(_ping)} == {"_ping", "_pong", "_loops"}


# ---- counted cache traffic ---------------------------------------------------------------------------

def _ikj(A, B, tile):
    m, n = A.shape
    p = B.shape[1]
    C = np.zeros((m, p), dtype=A.dtype)
    for i in range(m):
        for k in range(n):
            for j in range(p):
                C[i, j] += A[i, k] * B[k, j]
    return C


def _ijk(A, B, tile):
    m, n = A.shape
    p = B.shape[1]
    C = np.zeros((m, p), dtype=A.dtype)
    for i in range(m):
        for j in range(p):
            for k in range(n):
                C[i, j] += A[i, k] * B[k, j]
    return C


@njit
def _tile_step(A, B, C, i0, k0, j0, tile):
    for i in range(i0, min(i0 + tile, A.shape[0])):
        for k in range(k0, min(k0 + tile, A.shape[1])):
            for j in range(j0, min(j0 + tile, B.shape[1])):
                C[i, j] += A[i, k] * B[k, j]


@njit
def _tiled(A, B, tile):
    m, n = A.shape
    p = B.shape[1]
    C = np.zeros((m, p), dtype=A.dtype)
    for i0 in range(0, m, tile):
        for k0 in range(0, n, tile):
            for j0 in range(0, p, tile):
                _tile_step(A, B, C, i0, k0, j0, tile)
    return C


def _tiled_rows(A, B, tile):  # the inner loop on slices of a row: C[i, j0:j1] += A[i, k] * B[k, j0:j1]
    m, n = A.shape
    p = B.shape[1]
    C = np.zeros((m, p), dtype=A.dtype)
    for i0 in range(0, m, tile):
        for k0 in range(0, n, tile):
            for j0 in range(0, p, tile):
                for i in range(i0, min(i0 + tile, m)):
                    for k in range(k0, min(k0 + tile, n)):
                        C[i, j0:j0 + tile] += A[i, k] * B[k, j0:j0 + tile]
    return C


def _ikj_rows(A, B, tile):
    C = np.zeros((A.shape[0], B.shape[1]), dtype=A.dtype)
    for i in range(A.shape[0]):
        for k in range(A.shape[1]):
            C[i, :] += A[i, k] * B[k, :]
    return C


def test_count_misses_against_the_closed_forms_of_tiled_and_untiled_matmul():
    rng = np.random.default_rng(0)
    m, n, p, tile, line = 24, 16, 32, 8, 8  # 64-byte lines hold 8 float64; the 2 KiB cache 32 lines
    A, B = rng.standard_normal((m, n)), rng.standard_normal((n, p))
    A0, B0 = A.copy(), B.copy()
    tiled = count_misses(_tiled, A, B, tile, cache_bytes=2048)  # its helper runs as Python and is counted
    assert tiled.total_misses <= 3 * m * n * p // (tile * line)  # one tile of A, B and C per step at most
    assert tiled.accesses == 4 * m * n * p  # each multiply-add reads A, B and C and writes C
    rows = count_misses(_tiled_rows, A, B, tile, cache_bytes=2048)  # slices and arithmetic are counted too
    assert n * p // line <= rows.misses["B"] and rows.total_misses <= 3 * m * n * p // (tile * line)
    for untiled in (_ikj, _ijk, _ikj_rows):  # all of B for every row of A
        cache = count_misses(untiled, A, B, tile, cache_bytes=2048)
        assert cache.misses["B"] >= m * n * p // line
    roomy = count_misses(_ikj, A, B, tile, cache_bytes=1 << 20)  # everything fits: each line once
    assert roomy.misses == {"A": m * n // line, "B": n * p // line, "new1": m * p // line}
    assert np.array_equal(A, A0) and np.array_equal(B, B0)  # the counted run works on copies
    assert _tiled.py_func.__globals__["_tile_step"] is _tile_step and _tiled.py_func.__globals__["np"] is np


def _views_and_slices(x):
    row = x[2]  # a view: nothing read yet
    x[0, :4] = 1.0  # writes 4 elements of line 0
    total = (x[1, :] * 2.0).sum() + row[3]  # reads 8 elements of line 1, then one of line 2
    view = x[3, :]
    view += 1.0  # reads and writes the 8 elements of line 3
    return total + np.zeros_like(x)[0, 0]


def test_count_misses_counts_what_views_slices_and_arithmetic_touch_and_names_new_arrays():
    x = np.zeros((4, 8))  # each row is one 64-byte line
    cache = count_misses(_views_and_slices, x, cache_bytes=4096)
    assert cache.accesses == 4 + 8 + 1 + 16 + 1 and cache.misses == {"x": 4, "new1": 1}
    with pytest.raises(ValueError, match="cannot hold one"):
        count_misses(_views_and_slices, x, cache_bytes=32)


def _fails_midway(x):
    np.zeros(1)[0] = x[0, 0]
    raise RuntimeError("inside the answer")


def test_count_misses_puts_numpy_back_when_the_answer_raises():
    with pytest.raises(RuntimeError, match="inside the answer"):
        count_misses(njit(_fails_midway), np.zeros((2, 2)), cache_bytes=4096)
    assert _fails_midway.__globals__["np"] is np


class Strided:
    def __init__(self, storage, shape, strides, offset):
        self.storage, self.shape, self.strides, self.offset = storage, shape, strides, offset


def test_numpy_view_reads_by_the_stride_formula():
    storage = np.arange(20.0)
    view = numpy_view(Strided(storage, (3, 2), (-4, 3), 9))
    for i in range(3):
        for j in range(2):
            assert view[i, j] == storage[9 - 4 * i + 3 * j]
    with pytest.raises(ValueError):
        numpy_view(Strided(storage, (3, 2), (4, 3), 9))  # reaches position 20: out of bounds


def test_exact_types_refuse_subclasses_that_always_agree():
    import numpy as np

    from mlsys_lib.testing import INTEGERS, exactly, int_tuple

    class Yes(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    class YesTuple(tuple):
        def __eq__(self, other):
            return True

        __hash__ = tuple.__hash__

    assert Yes(0) == 5 and YesTuple() == (1, 2)  # what a comparison alone would accept
    for fake in (Yes(0), True, 3.0):
        with pytest.raises(AssertionError, match="must be int"):
            exactly(fake, *INTEGERS)
    assert exactly(np.int64(4), *INTEGERS) == 4
    with pytest.raises(AssertionError, match="must be tuple"):
        int_tuple(YesTuple((1,)))
    with pytest.raises(AssertionError, match=r"the result\[1\] must be int"):
        int_tuple((1, Yes(2)))
    plain = int_tuple((np.int64(3), 1))
    assert plain == (3, 1) and all(type(v) is int for v in plain)


# ---- frozen inputs, aliasing -------------------------------------------------------------------------

def _sgd_in_place(param, grad, lr):
    param -= lr * grad
    return param


def _sgd(param, grad, lr):
    return param - lr * grad


def _clip_in_place(values, low):
    np.maximum(values, low, out=values)
    return values


def _set_first(state):
    state["m"][0] = 1.0
    return state


@njit
def _njit_fill(x):
    x[0] = 1.0
    return x


def test_frozen_names_the_input_written_and_restores_writeability():
    theta, g = np.arange(3.0), np.ones(3)
    with frozen(param=theta, grad=g):
        new = _sgd(theta, g, 0.1)
    assert np.array_equal(new, np.arange(3.0) - 0.1) and theta.flags.writeable and g.flags.writeable
    with pytest.raises(AssertionError, match=r"input 'param' at `param -= lr \* grad`"):
        with frozen(grad=g, param=theta):
            _sgd_in_place(theta, g, 0.1)
    assert np.array_equal(theta, np.arange(3.0)) and theta.flags.writeable  # nothing written, writeable again
    with pytest.raises(AssertionError, match="input 'values'"):
        with frozen(values=theta):
            _clip_in_place(theta, 1.0)
    with pytest.raises(AssertionError, match="input 'state'"):  # arrays inside a dict, by subscript
        with frozen(state={"m": theta, "v": g}):
            _set_first({"m": theta, "v": g})


def test_frozen_catches_numba_writes_and_keeps_other_errors():
    x = np.zeros(2)
    with pytest.raises(AssertionError, match="writes into"):
        with frozen(x=x):
            _njit_fill(x)
    with pytest.raises(KeyError):  # an unrelated error passes through unchanged
        with frozen(x=x):
            {}["missing"]
    readonly = np.zeros(2)
    readonly.flags.writeable = False
    with frozen(x=readonly):
        pass
    assert not readonly.flags.writeable  # an array read-only before stays so


def test_frozen_restores_a_view_named_before_its_base():
    p = np.ones((3, 4))
    q = p[:2]  # the draft's rows as a view of the target's, named first
    with frozen(q=q, p=p):
        assert not (q.flags.writeable or p.flags.writeable)
    assert q.flags.writeable and p.flags.writeable


class Slotted:
    __slots__ = ("storage", "shape")

    def __init__(self, storage, shape):
        self.storage, self.shape = storage, shape


def test_frozen_reaches_arrays_held_by_objects():
    a = Strided(np.arange(6.0), (2, 3), (3, 1), 0)
    with pytest.raises(AssertionError, match="input 'a'"):
        with frozen(a=a):
            a.storage[0] = 5.0
    b = Slotted(np.arange(3.0), (3,))  # mlsys_lib.tensor.NDArray keeps its storage in a slot
    with pytest.raises(AssertionError, match="input 'b'"):
        with frozen(b=b):
            b.storage[1] = 0.0
    from mlsys_lib.tensor import NDArray
    c = NDArray.make(np.arange(4.0), (2, 2), (2, 1), 0)
    with pytest.raises(AssertionError, match="input 'c'"):
        with frozen(c=c):
            c.storage[0] = 1.0


def test_assert_unaliased():
    x = np.arange(6.0)
    assert_unaliased(x.copy(), x=x)
    assert_unaliased((x + 1, [x * 2]), x=x)
    for alias in (x, x[2:], x.reshape(2, 3), (x.copy(), x[::2]), {"w": x.T}):
        with pytest.raises(AssertionError, match="shares memory with the input 'x'"):
            assert_unaliased(alias, x=x)


# ---- randomness, bit-exact comparison ----------------------------------------------------------------

def test_assert_identical_sees_signed_zeros_nan_payloads_and_dtypes():
    assert_identical([np.array([np.nan, -0.0]), 1.5, {"k": (1, "a")}], [np.array([np.nan, -0.0]), 1.5, {"k": (1, "a")}])
    quiet, payload = np.array([np.nan]), np.array([0x7FF8000000000001], dtype=np.uint64).view(np.float64)
    for a, b, where in [(np.array([0.0]), np.array([-0.0]), "element 0"), (quiet, payload, "element 0"),
                        (np.zeros(2, np.float32), np.zeros(2), "float32"), (0.0, -0.0, "0.0"),
                        (np.float32(1), 1.0, "float32 vs float"), ([1, 2], [1, 2, 3], "length"), (1, True, "int vs bool")]:
        assert not identical(a, b)
        with pytest.raises(AssertionError, match=where):
            assert_identical(a, b)


def _shuffle_given(rng):
    return rng.permutation(8)


def _shuffle_global(rng):
    return np.random.permutation(8)


def _shuffle_reseeded(rng):
    return np.random.default_rng(0).permutation(8)


def test_deterministic():
    assert np.array_equal(deterministic(_shuffle_given), np.random.default_rng(0).permutation(8))
    with pytest.raises(AssertionError, match="global RNG"):
        deterministic(_shuffle_global)
    with pytest.raises(AssertionError, match="same for seeds 0 and 1"):
        deterministic(_shuffle_reseeded)
    deterministic(_shuffle_reseeded, seed_matters=False)
    import random
    with pytest.raises(AssertionError, match="`random` module"):
        deterministic(lambda rng: random.random(), seed_matters=False)


@pytest.mark.parametrize("module", ["mlsys_lib.testing", "mlsys_lib.distributed"])
def test_what_simulated_ranks_import_leaves_numba_unimported(module):
    # Every simulated rank of a collectives test imports mlsys_lib.testing (its reference_guard travels
    # with the job): pulling Numba in there made each of Lab 7's launches 0.3 s slower, its tests 8x.
    # Lab 11's ranks import mlsys_lib.distributed, which imported Numba through the memory planner:
    # its wrong-answer fixtures took 5x as long.
    import subprocess
    import sys
    code = f"import sys, {module}; print('numba' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
