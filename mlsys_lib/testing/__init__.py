"""Helpers for the labs' tests: the reference guard, numpy oracles for strided views, tolerances,
exact result types, inputs left unmodified, randomness from the given generator, bit-exact comparison,
what an answer's code calls, and the cache traffic of its loops."""

from .exact import FLOATS, INTEGERS, exactly, int_tuple
from .guard import ReferenceUsedError, reference_guard, reference_parts
from .inputs import arrays_in, assert_unaliased, frozen
from .oracles import assert_close, numpy_view, shares_storage
from .randomness import assert_identical, deterministic, global_rng_untouched, identical
from .static_checks import assert_loops_only, called_functions
from .traffic import count_misses

__all__ = ["ReferenceUsedError", "reference_guard", "reference_parts", "numpy_view", "shares_storage", "assert_close", "assert_loops_only",
           "exactly", "int_tuple", "INTEGERS", "FLOATS", "frozen", "assert_unaliased", "arrays_in",
           "deterministic", "global_rng_untouched", "assert_identical", "identical", "called_functions",
           "count_misses"]
