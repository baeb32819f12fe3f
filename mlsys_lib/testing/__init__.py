"""Helpers for the labs' tests: the reference guard, numpy oracles for strided views, tolerances,
exact result types, inputs left unmodified, randomness from the given generator, bit-exact comparison,
what an answer's code calls, and the cache traffic of its loops."""

from .exact import FLOATS, INTEGERS, exactly, int_tuple
from .guard import ReferenceUsedError, reference_guard, reference_parts
from .inputs import arrays_in, assert_unaliased, frozen
from .oracles import assert_close, numpy_view, shares_storage
from .randomness import assert_identical, deterministic, global_rng_untouched, identical
from .static_checks import assert_loops_only, called_functions

__all__ = ["ReferenceUsedError", "reference_guard", "reference_parts", "numpy_view", "shares_storage", "assert_close", "assert_loops_only",
           "exactly", "int_tuple", "INTEGERS", "FLOATS", "frozen", "assert_unaliased", "arrays_in",
           "deterministic", "global_rng_untouched", "assert_identical", "identical", "called_functions",
           "count_misses"]


def __getattr__(name: str):
    """``count_misses`` is imported on first use: it needs the tensor layer, hence Numba, and this package is
    imported by every simulated rank of a collectives test (a reference_guard travels with the job), where
    importing Numba made each launch 0.3 s slower."""
    if name == "count_misses":
        from .traffic import count_misses
        return count_misses
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
