"""Feedback preprocessing: what a student may see of the tests that graded them."""

from __future__ import annotations

from nbconvert.preprocessors import Preprocessor

HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"


class HideHiddenTestTracebacks(Preprocessor):
    """Reduce the error output of a cell holding hidden tests to ``ExceptionName: message``.

    A traceback quotes the failing line, which for a hidden test is hidden-test source. Runs before
    nbgrader's ``ClearHiddenTests`` (which removes the hidden region from the cell's source).
    """

    enabled = True  # nbconvert preprocessors are off unless enabled

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and HIDDEN_BEGIN in cell.source:
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources
