"""Adversarial submissions of Lab 1: what real classes do to a grader, each with the outcome it must get.

Every case starts from the correct solution and changes one thing. ``expect`` says what grading must
give: ``full`` (the attack costs nothing and gains nothing), ``loses`` (exactly these test cells
fail: the attack did not reach what it wanted), ``zero_because`` (0, with this reason), and
``flagged`` (a substring of the status an instructor sees).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

import nbformat

LAB = "lab01_tensors"
STRIDES_TESTS = ["test_compact_strides", "test_compact_strides_hidden", "test_compact", "test_compact_hidden"]
WRONG_STRIDES = "def compact_strides(shape):\n    return ()\n"


@dataclass
class Context:
    """What an attack may know: where things are on the grading machine."""

    solutions: str
    course_root: str
    loopback_port: int


@dataclass
class Case:
    name: str
    description: str
    build: Callable[[nbformat.NotebookNode, Context], nbformat.NotebookNode | bytes]
    full: bool = False
    loses: list[str] = field(default_factory=list)
    zero_because: str | None = None
    flagged: str | None = None
    flag_optional: bool = False  # the kernel may or may not die: a "stopped the kernel" flag is fine
    needs_sandbox: bool = False


def _index(nb, grade_id):
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def insert_after(grade_id: str, source: str):
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        nb.cells.insert(_index(nb, grade_id) + 1, nbformat.v4.new_code_cell(source.format(ctx=ctx)))
        return nb
    return build


def replace_answer(grade_id: str, source: str):
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        nb.cells[_index(nb, grade_id)].source = source.format(ctx=ctx)
        return nb
    return build


def _delete(grade_id):
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        del nb.cells[_index(nb, grade_id)]
        return nb
    return build


def _duplicate(grade_id):
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        i = _index(nb, grade_id)
        nb.cells.insert(i + 1, copy.deepcopy(nb.cells[i]))
        return nb
    return build


def _kernel(nb, ctx):
    nb = copy.deepcopy(nb)
    nb.metadata.kernelspec = {"name": "julia-1.9", "display_name": "Julia 1.9", "language": "julia"}
    return nb


def _append(source):
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        nb.cells.append(nbformat.v4.new_code_cell(source))
        return nb
    return build


CHEAT_FROM_FILE = '''
try:
    _cells = __import__("json").load(open({path!r}))["cells"]
    exec(next("".join(c["source"]) for c in _cells if "def compact_strides" in "".join(c["source"])))
except Exception:
    def compact_strides(shape):
        return ()
'''

CASES = [
    Case("infinite_loop", "a cell that never ends: interrupted at the cell timeout, the rest runs",
         insert_after("compact_strides", "while True:\n    pass\n"), full=True),
    Case("memory_bomb", "allocates up to the memory limit and keeps it (the traceback holds the frame): "
         "MemoryError in that cell only: the grader's kernel frees it, so the later cells run and score",
         insert_after("compact_strides", "def hog():\n    blocks = []\n    while True:\n"
                                         "        blocks.append(bytearray(2**27))\n\nhog()\n"),
         full=True, flag_optional=True),
    Case("fork_bomb", "forks until it cannot and keeps the processes: the limit stops it; later cells may "
         "fail for want of processes, the grader goes on", insert_after(
             "compact_strides", "import os, time\nfor _ in range(100000):\n    if os.fork() == 0:\n"
                                "        time.sleep(20)\n        os._exit(0)\n"), flag_optional=True),
    Case("reads_solutions", "copies the answer out of solutions/: the folder is empty in the sandbox",
         replace_answer("compact_strides", CHEAT_FROM_FILE.replace("{path!r}", "'{ctx.solutions}/lab01_tensors/lab01_tensors.ipynb'")),
         loses=STRIDES_TESTS, needs_sandbox=True),
    Case("reads_other_student", "copies another student's answer: the course folder is hidden",
         replace_answer("compact_strides", CHEAT_FROM_FILE.replace(
             "{path!r}", "'{ctx.course_root}/submitted/solution/lab01_tensors/lab01_tensors.ipynb'")),
         loses=STRIDES_TESTS, needs_sandbox=True),
    Case("writes_gradebook", "sets every score in the gradebook to 100: the gradebook is out of reach",
         insert_after("compact_strides", "import sqlite3\ntry:\n    db = sqlite3.connect('{ctx.course_root}/gradebook.db')\n"
                                         "    db.execute('update grade set auto_score = 100, manual_score = 100')\n"
                                         "    db.commit()\nexcept Exception as error:\n    print(error)\n"),
         full=True, needs_sandbox=True),
    Case("network", "fetches its answer over the network: the sandbox has none",
         replace_answer("compact_strides", "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {ctx.loopback_port}), timeout=3)\n"
                                          "    from mlsys_lib.tensor import compact_strides as _lib\n"
                                          "    def compact_strides(shape):\n        return tuple(_lib(shape))\n"
                                          "except OSError:\n    def compact_strides(shape):\n        return ()\n"),
         loses=STRIDES_TESTS, needs_sandbox=True),
    Case("deleted_test_cell", "deletes a visible test cell: that test scores 0",
         _delete("test_compact_strides"), loses=["test_compact_strides"]),
    Case("copied_test_cell", "a copied test cell (duplicate grade_id): graded once, no harm",
         _duplicate("test_compact_strides"), full=True),
    Case("corrupted_json", "a file that is not a notebook any more: 0 with the reason",
         lambda nb, ctx: b'{"cells": [{"cell_type": "code", "sou', zero_because="unreadable notebook"),
    Case("wrong_kernel", "saved with a kernel the grader does not have: graded on the grading kernel",
         _kernel, full=True),
    Case("asks_input", "waits for keyboard input: the grader has none, the cell fails, the rest runs",
         insert_after("compact_strides", "name = input('your name? ')\n"), full=True),
    Case("enormous_output", "prints ten megabytes: output is truncated, grading goes on",
         insert_after("compact_strides", "for i in range(100000):\n    print('x' * 100, i)\n"), full=True),
    Case("sys_exit", "calls sys.exit(): IPython catches it, the rest runs",
         insert_after("compact_strides", "import sys\nsys.exit(3)\n"), full=True),
    Case("os_exit", "kills its own kernel with os._exit(): that cell is skipped, the rest graded",
         insert_after("compact_strides", "import os\nos._exit(1)\n"), full=True, flagged="stopped the kernel"),
    Case("patches_test_helpers", "switches off the reference guard: flagged for the instructor",
         replace_answer("compact_strides", "import contextlib\nimport mlsys_lib.testing\n"
                                          "mlsys_lib.testing.reference_guard = lambda *refs: contextlib.nullcontext()\n"
                                          "from mlsys_lib.tensor import compact_strides\n"),
         flagged="assigns to mlsys_lib.testing.reference_guard"),
    Case("replaces_assertion_error", "rebinds AssertionError in builtins: asserts still fail, and it is flagged",
         replace_answer("compact_strides", "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {{}})\n"
                        + WRONG_STRIDES), loses=STRIDES_TESTS, flagged="assigns to builtins.AssertionError"),
]


def write_case(case: Case, solution: nbformat.NotebookNode, ctx: Context, path) -> None:
    """Write ``case``'s submission to ``path``."""
    built = case.build(solution, ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(built, bytes):
        path.write_bytes(built)
    else:
        nbformat.write(built, path)
