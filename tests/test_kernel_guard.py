"""The grading kernel frees what a cell that ran out of memory held, and the cell still counts as failed."""

import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_notebook

from autograder.config import GRADING_KERNEL
from autograder.run.nbgrader_run import grading_environment

HOG = """\
import builtins, weakref

class Block:
    pass

def hog():
    blocks = [Block()]
    builtins.first_block = weakref.ref(blocks[0])  # outlives the cell, does not keep the block alive
    raise MemoryError("pretend the address space is full")

hog()
"""


def _run(cells, root, tmp_path, allow_errors=True):
    notebook = new_notebook(cells=[new_code_cell(source) for source in cells])
    with grading_environment(root):
        NotebookClient(notebook, kernel_name=GRADING_KERNEL, timeout=60, allow_errors=allow_errors,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    return notebook


def _errors(cell):
    return [output.ename for output in cell.outputs if output.output_type == "error"]


def test_memory_error_frees_the_frames_but_the_cell_still_fails(course_root, tmp_path):
    notebook = _run([HOG, "import gc; gc.collect()\nassert builtins.first_block() is None, 'still held'",
                     "print(sorted(n for n in dir() if not n.startswith('_')))"], course_root, tmp_path)
    hog, freed, names = notebook.cells
    assert _errors(hog) == ["MemoryError"]
    assert _errors(freed) == [], freed.outputs
    for name in ("autograder", "sandbox", "kernel", "memory"):  # the hook (autograder.sandbox.kernel.memory) binds no name
        assert name not in names.outputs[0]["text"], "the hook must not appear in the student's namespace"


def test_the_cell_that_ran_out_of_memory_still_replies_error(course_root, tmp_path):
    with pytest.raises(CellExecutionError, match="MemoryError"):  # nbclient raises on an "error" reply
        _run([HOG], course_root, tmp_path, allow_errors=False)


def test_other_errors_keep_their_traceback(course_root, tmp_path):
    cells = [HOG.replace("MemoryError", "ValueError"), "import sys\nassert sys.last_traceback is not None"]
    _, kept = _run(cells, course_root, tmp_path).cells
    assert _errors(kept) == [], kept.outputs
