"""`mlsys course check`'s static rule: no graded test cell ends in an expression, whose value plain
nbgrader would read as the cell's partial credit."""

import nbformat
import pytest

from autograder.course import trailing_expression_cells
from autograder.paths import SOLUTIONS, lab_names


def _notebook(tmp_path, cells):
    notebook = nbformat.v4.new_notebook()
    for number, (source, grade, solution) in enumerate(cells):
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade": grade, "solution": solution, "grade_id": f"c{number}",
                                     "locked": grade, "schema_version": 3, **({"points": 1} if grade else {})}
        notebook.cells.append(cell)
    path = tmp_path / "n.ipynb"
    nbformat.write(notebook, path)
    return path


def test_trailing_expressions_of_test_cells_are_found(tmp_path):
    path = _notebook(tmp_path, [
        ("x = 1\n_check(x)", True, False),        # a helper's return value is displayed: flagged
        ("x = 1\nx", True, False),                # a bare name: flagged
        ("%time x = 1\n0.5", True, False),        # magics are read as IPython runs them
        ("_check(1)\nprint('passed')", True, False),
        ("assert _check(1) is None", True, False),
        ("_ = _check(1)", True, False),
        ("", True, False),
        ("def f():\n    return 1\nf()", False, True),  # an answer cell: not a test
        ("1 + 1", False, False),                  # an ordinary cell: not graded
    ])
    assert trailing_expression_cells(path) == ["c0", "c1", "c2"]


@pytest.mark.parametrize("lab", lab_names())
def test_no_lab_test_cell_ends_in_an_expression(lab):
    assert trailing_expression_cells(SOLUTIONS / lab / f"{lab}.ipynb") == []
