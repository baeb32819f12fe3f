"""Helpers for the labs' tests: the reference guard, numpy oracles for strided views, tolerances,
exact result types."""

from .exact import FLOATS, INTEGERS, exactly, int_tuple
from .guard import ReferenceUsedError, reference_guard, reference_parts
from .oracles import assert_close, numpy_view, shares_storage
from .static_checks import assert_loops_only

__all__ = ["ReferenceUsedError", "reference_guard", "reference_parts", "numpy_view", "shares_storage", "assert_close", "assert_loops_only",
           "exactly", "int_tuple", "INTEGERS", "FLOATS"]
