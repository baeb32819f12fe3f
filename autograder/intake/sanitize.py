"""What students do to notebooks, caught before nbgrader sees them: repaired, or flagged.

A student who copies a cell duplicates its nbgrader ``grade_id``. nbgrader's own DeduplicateIds
then empties the copy's metadata to ``{}``, which its CheckCellMetadata reads as an outdated format
and fails the whole notebook ("nbgrader update ."): the student would score 0. Here the copies are
demoted to plain cells *before* nbgrader runs (the last occurrence keeps the grade_id, as nbgrader
would keep it), so they still run but are not graded twice.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat


class UnreadableSubmission(ValueError):
    """The file is not a notebook nbgrader can read; the message says why."""


def read_submission(path: Path) -> nbformat.NotebookNode:
    """Read a submitted notebook, raising :class:`UnreadableSubmission` with a short reason."""
    try:
        return nbformat.read(path, as_version=4)
    except Exception as error:  # corrupted JSON, wrong schema, binary junk: all the same to a grader
        first_line = (str(error).splitlines() or [""])[0][:120]
        raise UnreadableSubmission(f"unreadable notebook ({type(error).__name__}: {first_line})") from None


def demote_duplicate_cells(notebook: nbformat.NotebookNode) -> list[str]:
    """Strip nbgrader metadata from every earlier copy of a grade_id; return the ids that had copies."""
    seen: set[str] = set()
    duplicated = []
    for cell in reversed(notebook.cells):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id is None:
            continue
        if grade_id in seen:
            del cell.metadata["nbgrader"]
            duplicated.append(grade_id)
        seen.add(grade_id)
    return sorted(set(duplicated))


#: Names the test cells import (``mlsys_lib.testing``'s, kept equal to its ``__all__`` by a test); a student's
#: code that rebinds or patches them tampers with grading.
TEST_HELPERS = frozenset({
    "ReferenceUsedError", "reference_guard", "reference_parts", "numpy_view", "shares_storage", "assert_close",
    "assert_loops_only", "called_functions", "count_misses", "exactly", "int_tuple", "INTEGERS", "FLOATS",
    "frozen", "assert_unaliased", "arrays_in", "deterministic", "global_rng_untouched", "assert_identical",
    "identical"})
#: Modules whose attributes a student's code must not assign to.
PROTECTED_ROOTS = frozenset({"mlsys_lib", "builtins", "np", "numpy", "sys", "importlib", "nbgrader"})


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def tamper_flags(notebook: nbformat.NotebookNode) -> list[str]:
    """Reasons to flag a submission: code outside the test cells that rebinds the test helpers,
    assigns into protected modules (``mlsys_lib.testing.x = ...``, ``builtins.x = ...``,
    ``np.testing.x = ...``) or swaps a function's ``__code__``. Static: what the code says, not does."""
    trees = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            try:
                trees.append((index, ast.parse(cell.source)))
            except SyntaxError:
                continue
    protected = set(PROTECTED_ROOTS)  # and every name a protected module is imported under
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                protected |= {a.asname or a.name.split(".")[0] for a in node.names
                              if a.name.split(".")[0] in PROTECTED_ROOTS}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PROTECTED_ROOTS:
                protected |= {a.asname or a.name for a in node.names if a.name not in TEST_HELPERS}
    flags = []
    for index, tree in trees:
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in TEST_HELPERS:
                flags.append(f"cell {index} redefines the test helper {node.name}")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("setattr", "delattr") \
                    and node.args and _root_name(node.args[0]) in protected:
                flags.append(f"cell {index} calls {node.func.id} on {_root_name(node.args[0])}")
            for target in targets:
                if isinstance(target, ast.Name) and target.id in TEST_HELPERS:
                    flags.append(f"cell {index} rebinds the test helper {target.id}")
                elif isinstance(target, ast.Attribute) and (target.attr == "__code__"
                                                             or _root_name(target) in protected):
                    flags.append(f"cell {index} assigns to {ast.unparse(target)}")
    return flags
