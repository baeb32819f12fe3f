"""Adversarial submissions of Lab 1: what a hostile class does to a grader, each with the outcome it must get.

Every case starts from the correct solution and changes one thing. ``expect`` says what grading must
give: ``full`` (the attack costs nothing and gains nothing), ``loses`` (exactly these test cells
fail: the attack did not reach what it wanted), ``zero_because`` (0, with this reason), and
``flagged`` (a substring of the status an instructor sees). Whatever the case, the batch that grades
them all must leave every file outside the course's own output unchanged, and no feedback page or
autograded notebook may show a hidden test, a secret or live script (see ``test_adversarial.py``).

The cases come in groups, each with at least two variants: resources (time, memory, processes,
disk, output), files of the host written or read through links, secrets of the grading machine,
hidden tests leaking into feedback, script injection, points not earned, and the submission files
themselves (links, special files, broken or oversized notebooks). Variants that differ only in where
they look share a notebook (a kernel per variant cost ~6 s each) where the outcome still says which
got through: ``reads_course_files`` and ``reads_secrets`` try each place on an exercise of its own,
so the tests lost name it; in ``links_and_writes_host_files`` and ``script_in_output`` the batch's
checks of the files, the course folder and every page name it.
"""

from __future__ import annotations

import ast
import base64
import copy
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

LAB = "lab01_tensors"
# compact's tests run on the library's compact_strides and index_to_position: a wrong one costs once.
STRIDES_TESTS = ["test_compact_strides", "test_compact_strides_hidden"]
POSITION_TESTS = ["test_index_to_position", "test_index_to_position_hidden"]
MATMUL_TESTS = ["test_matmul_tiled", "test_matmul_tiled_hidden"]
INTENSITY_TESTS = ["test_intensity", "test_intensity_hidden"]
ROOFLINE_TESTS = ["test_roofline", "test_roofline_hidden"]
WRONG_STRIDES = "def compact_strides(shape):\n    return ()\n"
#: Printed by the attacks that reach a secret; must appear in no feedback and no autograded notebook.
#: The attacks know only its digest, so their own source never holds it.
SECRET = "mlsys-honeypot-7f3a9c"
SECRET_DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()
#: The limits the cases are graded under (``test_adversarial.py``'s course settings), low so that an
#: attack that runs into one costs seconds: a cell may run CELL_TIMEOUT_S, a notebook WALL_SECONDS,
#: the kernel may map MEMORY_MB. Honest Lab 1 notebooks take about 5 s, their largest cell 2 s, their
#: address space 1.2 GB.
CELL_TIMEOUT_S, WALL_SECONDS, MEMORY_MB = 10, 30, 2048
#: The sleeper's naps: each under the cell timeout, together well over the notebook's budget.
NAP_S = CELL_TIMEOUT_S - 2
NAPS = WALL_SECONDS // NAP_S + 2


@dataclass
class Context:
    """What an attack may know: where things are on the grading machine."""

    solutions: str
    course_root: str
    loopback_port: int
    submissions: str = "/nonexistent"
    library: str = "/nonexistent"
    home_secret: str = "/nonexistent"  # a 0600 file of the grader's user, holding SECRET
    stale_course: str = "/nonexistent"  # a folder like an old .course/, another student's answers in it
    secret_env: str = "MLSYS_HONEYPOT_TOKEN"  # an environment variable of the grader, holding SECRET


@dataclass
class Case:
    name: str
    description: str
    build: Callable[[nbformat.NotebookNode, Context], nbformat.NotebookNode | bytes | None]
    full: bool = False
    loses: list[str] = field(default_factory=list)
    zero_because: str | None = None
    flagged: str | None = None
    flag_optional: bool = False  # the kernel may or may not die: a "stopped the kernel" flag is fine
    needs_sandbox: bool = False
    loses_from: str | None = None  # every test cell from this grade_id on fails (the notebook was stopped)
    shows: str | None = None  # what the autograded notebook must say (why the attack was stopped)
    plant: Callable[[Path, Context], None] | None = None  # writes the submission folder itself (links, FIFOs)


def _index(nb, grade_id):
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def insert_after(grade_id: str, *sources: str):
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        at = _index(nb, grade_id) + 1
        for offset, source in enumerate(sources):
            nb.cells.insert(at + offset, nbformat.v4.new_code_cell(source.format(ctx=ctx, SECRET_DIGEST=SECRET_DIGEST)))
        return nb
    return build


def replace_answer(grade_id: str, source: str):
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        nb.cells[_index(nb, grade_id)].source = source.format(ctx=ctx, SECRET_DIGEST=SECRET_DIGEST)
        return nb
    return build


def _append(*sources: str, markdown: bool = False):
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        for source in sources:
            make = nbformat.v4.new_markdown_cell if markdown else nbformat.v4.new_code_cell
            nb.cells.append(make(source.format(ctx=ctx, SECRET_DIGEST=SECRET_DIGEST)))
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


def _encoded(source: str) -> str:
    return base64.b64encode(source.encode()).decode()


# --- answers that succeed only if the attack reached what it wanted ----------------------------

#: Runs the cell of GRADE_ID found in the notebook file (JSON) at PATH, if it can be read; else defines
#: STUBS. (The placeholders are replaced in this order, so an answer's own text is never rewritten.)
COPIED_ANSWER = """
try:
    _cells = __import__("json").load(open(PATH))["cells"]
    exec(next("".join(c["source"]) for c in _cells if c["metadata"].get("nbgrader", {}).get("grade_id") == GRADE_ID))
except Exception:
STUBS"""

#: compact_strides that is right only when the library's reference can be called.
VIA_LIBRARY = '''
import mlsys_lib.tensor as _T
def compact_strides(shape):
    try:
        return tuple(_T.compact_strides(shape))
    except Exception:
        return ()
'''

#: Turns the reference guard into a no-op, by any of the routes below, then calls the reference.
GUARD_OFF = "import contextlib\nimport mlsys_lib.testing, mlsys_lib.testing.guard\n" \
            "mlsys_lib.testing.reference_guard = lambda *refs: contextlib.nullcontext()\n" \
            "mlsys_lib.testing.guard.reference_guard = mlsys_lib.testing.reference_guard\n"

#: Defines ANSWER only if REACH (a function body) returns something holding the secret; else STUBS.
GATED_ANSWER = """
import hashlib, re
def _reach():
REACH
try:
    _found = _reach()
except Exception as error:
    _found = f"nothing ({type(error).__name__})"
print("reached:", _found)
if "SECRET_DIGEST" in {hashlib.sha256(w.encode()).hexdigest() for w in re.findall(r"[\\w-]+", str(_found))}:
ANSWER
else:
STUBS"""


def _indented(source: str) -> str:
    return "\n".join("    " + line for line in source.strip().splitlines())


def _stubs(answer: str) -> str:
    """Wrong stand-ins (returning None) for the functions an answer cell defines, indented."""
    names = [node.name for node in ast.parse(answer).body if isinstance(node, ast.FunctionDef)]
    return _indented("".join(f"def {name}(*args, **kwargs):\n    return None\n" for name in names))


def copied_answers(paths: dict[str, str]):
    """Each answer cell (grade_id -> path of a notebook holding the right one, ``{ctx}`` filled in)
    copies its answer out of that file, and is wrong (its functions return None) if it cannot."""
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        for grade_id, path in paths.items():
            cell = nb.cells[_index(nb, grade_id)]
            cell.source = (COPIED_ANSWER.replace("STUBS", _stubs(cell.source)).replace("GRADE_ID", repr(grade_id))
                           .replace("PATH", repr(path.format(ctx=ctx))))
        return nb
    return build


def secret_answers(reaches: dict[str, str]):
    """Each answer cell (grade_id -> ``reach``, a function body, ``{ctx}`` filled in) keeps its right
    answer only if ``reach`` returns the secret (compared by digest); else its functions return None."""
    def build(nb, ctx):
        nb = copy.deepcopy(nb)
        for grade_id, reach in reaches.items():
            cell = nb.cells[_index(nb, grade_id)]
            cell.source = (GATED_ANSWER.replace("SECRET_DIGEST", SECRET_DIGEST).replace("STUBS", _stubs(cell.source))
                           .replace("REACH", _indented(reach.format(ctx=ctx))).replace("ANSWER", _indented(cell.source)))
        return nb
    return build


# --- the submission folder itself ------------------------------------------------------------

def _link_to(target: Callable[[Context], str]):
    def plant(folder: Path, ctx: Context) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        os.symlink(target(ctx), folder / f"{LAB}.ipynb")
    return plant


def _folder_link(folder: Path, ctx: Context) -> None:
    os.symlink(Path(ctx.stale_course) / "submitted" / "victim" / LAB, folder)


def _fifo(folder: Path, ctx: Context) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / f"{LAB}.ipynb")


def _oversized(nb, ctx):
    nb = copy.deepcopy(nb)
    nb.cells.append(nbformat.v4.new_markdown_cell("x" * (40 * 2**20)))
    return nb


CASES = [
    # --- resources: time, memory, processes, disk, output -------------------------------------
    Case("infinite_loop", "a cell that never ends: interrupted at the cell timeout, the rest runs",
         insert_after("compact_strides", "while True:\n    pass\n"), full=True),
    Case("memory_bomb", "allocates up to the memory limit and keeps it (the traceback holds the frame): "
         "MemoryError in that cell only: the grader's kernel frees it, so the later cells run and score",
         insert_after("compact_strides", "def hog():\n    blocks = []\n    while True:\n"
                                         "        blocks.append(bytearray(2**27))\n\nhog()\n"),
         full=True, flag_optional=True),
    Case("fork_bomb", "forks until it cannot and keeps the processes: past c.Sandbox.processes (256) the "
         "sandbox's supervisor, counting processes and not threads, stops the kernel; that cell and the cells "
         "after it fail with the reason, the notebook is graded and flagged", insert_after(
             "compact_strides", "import os, time\nfor _ in range(100000):\n    if os.fork() == 0:\n"
                                "        time.sleep(20)\n        os._exit(0)\n"),
         loses_from="compact_strides", flagged="fork bomb: more than 256 processes",
         shows="the grader stopped the kernel: fork bomb: more than 256 processes", needs_sandbox=True),
    Case("thread_bomb", "starts threads with small stacks (the address space does not stop them) until it "
         "cannot and keeps them: the task cap (processes + threads) stops it in that cell, the rest runs",
         insert_after("compact_strides", "import threading, time\nthreading.stack_size(32768)\nkept = []\n"
                                         "for _ in range(100000):\n"
                                         "    kept.append(threading.Thread(target=time.sleep, args=(20,), daemon=True))\n"
                                         "    kept[-1].start()\n"),
         full=True, shows="can't start new thread"),
    Case("sleeper", "sleeps cell after cell, each under the cell timeout: the notebook's wall-clock budget "
         "stops it, the tests after it fail and it is flagged",
         insert_after("test_compact_strides_hidden", *[f"import time\ntime.sleep({NAP_S})\n"] * NAPS),
         loses_from="index_to_position", flagged="wall-clock"),
    Case("sleeper_ignoring_interrupts", "sleeps and swallows the grader's interrupts: the wall-clock "
         "budget still ends it", insert_after("test_compact_strides_hidden",
                                              "import time\nfor _ in range(100):\n    try:\n        time.sleep(100)\n"
                                              "    except KeyboardInterrupt:\n        pass\n"),
         loses_from="index_to_position", flagged="interrupt"),
    Case("asks_input", "waits for keyboard input: the grader has none, the cell fails, the rest runs",
         insert_after("compact_strides", "name = input('your name? ')\n"), full=True),
    Case("enormous_output", "prints ten megabytes: output is dropped past the limit, grading goes on",
         insert_after("compact_strides", "for i in range(100000):\n    print('x' * 100, i)\n"), full=True),
    Case("enormous_image", "displays 20 MB of HTML: dropped past the output limit",
         insert_after("compact_strides", "from IPython.display import HTML, display\n"
                                         "for _ in range(20):\n    display(HTML('<b>' + 'y' * 2**20 + '</b>'))\n"),
         full=True),
    Case("sys_exit", "calls sys.exit(): IPython catches it, the rest runs",
         insert_after("compact_strides", "import sys\nsys.exit(3)\n"), full=True),
    Case("os_exit", "kills its own kernel with os._exit(): that cell is skipped, the rest graded",
         insert_after("compact_strides", "import os\nos._exit(1)\n"), full=True, flagged="stopped the kernel"),
    Case("fills_the_disk", "writes until the disk is full, in its folder, /tmp and /dev/shm: the private "
         "size-limited folders fill, nothing reaches the grader's disk",
         insert_after("compact_strides", "import os\nfor place in ('.', '/tmp', '/dev/shm'):\n    try:\n"
                                         "        with open(os.path.join(place, 'ballast'), 'wb') as f:\n"
                                         "            for _ in range(1000):\n                f.write(b'0' * 2**20)\n"
                                         "    except OSError as error:\n        print(place, error)\n"),
         full=True),
    Case("many_files", "creates files by the hundred thousand: bounded by its private folder",
         insert_after("compact_strides", "import os\nos.makedirs('junk', exist_ok=True)\ntry:\n"
                                         "    for i in range(200000):\n        open(f'junk/{{i}}', 'w').close()\n"
                                         "except OSError as error:\n    print(error)\n"),
         full=True),

    # --- host files written or read through links ---------------------------------------------
    Case("links_and_writes_host_files", "overwrites a file of mlsys_lib (read-only in the sandbox), sets "
         "every score in the gradebook to 100 (out of reach), leaves links to the solutions, a device and "
         "the instructor's home in its folder, hoping the feedback copies them (nothing of its folder is "
         "copied), and replaces its working copy's files by links to the gradebook and the library (the "
         "grader never writes through them: the working copy is private); the batch's checks of the "
         "files outside the course output and of the course folder name what got through",
         lambda nb, ctx: _append(
             "import os\nfor name, target in [('answers.ipynb', '{ctx.solutions}/lab01_tensors/lab01_tensors.ipynb'),\n"
             "    ('zero', '/dev/zero'), ('home', '{ctx.home_secret}')]:\n"
             "    try:\n        os.symlink(target, name)\n    except OSError as error:\n        print(error)\n",
             "import os\nfor name, target in [('lab01_tensors.ipynb', '{ctx.course_root}/gradebook.db'),\n"
             "    ('timestamp.txt', '{ctx.library}/__init__.py'), ('lab01_tensors.html', '{ctx.course_root}/gradebook.db')]:\n"
             "    for place in (os.getcwd(), os.path.join('{ctx.course_root}', 'autograded')):\n"
             "        try:\n            path = os.path.join(place, name)\n"
             "            if os.path.lexists(path):\n                os.remove(path)\n"
             "            os.symlink(target, path)\n        except OSError as error:\n            print(error)\n",
         )(insert_after(
             "compact_strides",
             "try:\n    open('{ctx.library}/tensor/strides.py', 'w').write('raise SystemExit')\n"
             "except OSError as error:\n    print(error)\n",
             "import sqlite3\ntry:\n    db = sqlite3.connect('{ctx.course_root}/gradebook.db')\n"
             "    db.execute('update grade set auto_score = 100, manual_score = 100')\n"
             "    db.commit()\nexcept Exception as error:\n    print(error)\n",
         )(nb, ctx), ctx), full=True, needs_sandbox=True),

    # --- secrets of the grading machine --------------------------------------------------------
    Case("reads_course_files", "copies answers out of files of the grading machine, an exercise per file: "
         "the solutions (exercise 1), another student's graded copy in the course folder (2), a classmate's "
         "notebook in the submissions folder (intensity), an old course folder left in the repository "
         "(roofline); none is in the sandbox, so each exercise loses its tests",
         copied_answers({"compact_strides": "{ctx.solutions}/lab01_tensors/lab01_tensors.ipynb",
                         "index_to_position": "{ctx.course_root}/submitted/solution_a/lab01_tensors/lab01_tensors.ipynb",
                         "intensity": "{ctx.submissions}/solution_a/lab01_tensors.ipynb",
                         "roofline": "{ctx.stale_course}/submitted/victim/lab01_tensors/lab01_tensors.ipynb"}),
         loses=STRIDES_TESTS + POSITION_TESTS + INTENSITY_TESTS + ROOFLINE_TESTS, needs_sandbox=True),
    Case("reads_secrets", "looks for a secret of the grading machine, an exercise per place: the grader's "
         "environment variables (exercise 1), the environment of the processes around it in /proc/*/environ "
         "(2), a private file in the instructor's home (intensity), what the sandbox hides, in its "
         "environment and mounts (roofline); it finds none, so each exercise loses its tests",
         secret_answers({"compact_strides": "import os\nreturn dict(os.environ)",
                         "index_to_position": "import glob\nfound = []\nfor path in glob.glob('/proc/*/environ'):\n"
                                              "    try:\n        found.append(open(path, 'rb').read().decode(errors='replace'))\n"
                                              "    except OSError:\n        pass\nreturn found",
                         "intensity": "return open('{ctx.home_secret}').read()",
                         "roofline": "import os\nreturn str(os.environ) + open('/proc/self/mountinfo').read()"}),
         loses=STRIDES_TESTS + POSITION_TESTS + INTENSITY_TESTS + ROOFLINE_TESTS, needs_sandbox=True),
    Case("network", "fetches its answer over the network: the sandbox has none",
         replace_answer("compact_strides", "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {ctx.loopback_port}), timeout=3)\n"
                                          "    from mlsys_lib.tensor import compact_strides as _lib\n"
                                          "    def compact_strides(shape):\n        return tuple(_lib(shape))\n"
                                          "except OSError:\n    def compact_strides(shape):\n        return ()\n"),
         loses=STRIDES_TESTS, needs_sandbox=True),

    # --- hidden tests leaking into feedback ----------------------------------------------------
    Case("prints_input_history", "prints IPython's input history (In, _ih, _i<N>) in a later cell",
         _append("print(In)\nprint(_ih)\nprint([v for k, v in globals().items() if k.startswith('_i')])\n"),
         full=True),
    Case("prints_history_database", "dumps IPython's history database and linecache",
         _append("import linecache, glob\nprint({{k: ''.join(v[2]) for k, v in linecache.cache.items()}})\n"
                 "for path in glob.glob('/tmp/**/*.sqlite', recursive=True):\n    print(open(path, 'rb').read()[:100000])\n"),
         full=True),
    Case("raises_caller_source", "an answer that raises the calling test's source as its message",
         replace_answer("compact_strides", "import inspect\ndef compact_strides(shape):\n"
                                           "    raise ValueError(inspect.getsource(inspect.currentframe().f_back))\n"),
         loses=STRIDES_TESTS, flagged="frame"),
    Case("stashes_caller_source", "keeps the calling test's source and prints it from a later cell",
         lambda nb, ctx: _append("print(_STASH)\n")(replace_answer("compact_strides",
             "import sys, linecache\n_STASH = []\ndef compact_strides(shape):\n    caller = sys._getframe(1)\n"
             "    _STASH.append(''.join(linecache.getlines(caller.f_code.co_filename)))\n"
             "    if 0 in shape:\n        return (0,) * len(shape)\n"
             "    out, step = [], 1\n    for size in reversed(shape):\n        out.append(step)\n        step *= size\n"
             "    return tuple(reversed(out))\n")(nb, ctx), ctx), full=True, flagged="frame"),
    Case("reads_its_notebook_file", "reads the notebook file being graded (its hidden tests restored) from disk",
         _append("import glob, os\nfor path in glob.glob('**/*.ipynb', recursive=True) + glob.glob('../**/*.ipynb', recursive=True):\n"
                 "    print(path, open(path).read())\n"), full=True),
    Case("prints_traceback_of_test", "prints the stack, frames and constants of the hidden test that calls it",
         replace_answer("compact_strides", "import traceback, gc\ndef compact_strides(shape):\n"
                                           "    traceback.print_stack()\n    print([f.f_code.co_consts for f in [__import__('sys')._getframe(1)]])\n"
                                           "    if 0 in shape:\n        return (0,) * len(shape)\n"
                                           "    out, step = [], 1\n    for size in reversed(shape):\n        out.append(step)\n        step *= size\n"
                                           "    return tuple(reversed(out))\n"),
         full=True, flagged="frame"),

    # --- script injection into feedback and Formgrader ---------------------------------------
    Case("script_in_output", "HTML output with a script and an event handler, an SVG with onload, a "
         "JavaScript output, and a markdown cell with event handlers and javascript: links; the checks of "
         "every page and autograded notebook name what survived",
         lambda nb, ctx: _append(
             "<details open ontoggle=\"alert(5)\">x</details>\n\n[click](javascript:alert(6))\n"
             "<a href=\"javascript:alert(7)\">y</a>", markdown=True,
         )(_append(
             "from IPython.display import HTML, display\n"
             "display(HTML('<script>alert(1)</script><img src=x onerror=\"alert(2)\">'))\n",
             "from IPython.display import SVG, Javascript, display\n"
             "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(3)\"><circle r=\"4\"/></svg>'))\n"
             "display(Javascript('alert(4)'))\n",
         )(nb, ctx), ctx), full=True),

    # --- points not earned ----------------------------------------------------------------------
    Case("patches_test_helpers", "switches off the reference guard: the reference is absent anyway; flagged",
         replace_answer("compact_strides", GUARD_OFF + VIA_LIBRARY), loses=STRIDES_TESTS,
         flagged="assigns to mlsys_lib.testing.reference_guard"),
    Case("replaces_assertion_error", "rebinds AssertionError in builtins: asserts still fail, and it is flagged",
         replace_answer("compact_strides", "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {{}})\n"
                        + WRONG_STRIDES), loses=STRIDES_TESTS, flagged="builtins"),
    Case("guard_off_by_exec", "switches the guard off in base64-encoded source run by exec",
         replace_answer("compact_strides", f"import base64\nexec(base64.b64decode('{_encoded(GUARD_OFF)}'))\n"
                        + VIA_LIBRARY), loses=STRIDES_TESTS, flagged="exec"),
    Case("guard_off_by_sys_modules", "replaces mlsys_lib.testing in sys.modules by a module with a no-op guard",
         replace_answer("compact_strides", "import sys, types, contextlib\n_fake = types.ModuleType('mlsys_lib.testing')\n"
                        "_fake.__dict__.update(sys.modules['mlsys_lib.testing'].__dict__ if 'mlsys_lib.testing' in sys.modules else {{}})\n"
                        "_fake.reference_guard = lambda *refs: contextlib.nullcontext()\n"
                        "sys.modules['mlsys_lib.testing'] = _fake\n" + VIA_LIBRARY),
         loses=STRIDES_TESTS, flagged="sys.modules"),
    Case("guard_off_by_gc", "finds the guard's code through gc.get_referrers and neuters it",
         replace_answer("compact_strides", "import gc, mlsys_lib.testing.guard as _g\n"
                        "for _holder in gc.get_referrers(_g.reference_guard):\n    pass\n"
                        "_g._raising_code = lambda func: func.__code__\n" + VIA_LIBRARY),
         loses=STRIDES_TESTS, flagged="gc"),
    Case("guard_off_by_meta_path", "installs an import hook that serves a harmless guard module",
         replace_answer("compact_strides", "import sys, types, contextlib, importlib.abc, importlib.util\n"
                        "class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
                        "    def find_spec(self, name, path, target=None):\n"
                        "        return importlib.util.spec_from_loader(name, self) if name == 'mlsys_lib.testing' else None\n"
                        "    def create_module(self, spec):\n        return None\n"
                        "    def exec_module(self, module):\n"
                        "        module.reference_guard = lambda *refs: contextlib.nullcontext()\n"
                        "        module.numpy_view = module.shares_storage = module.assert_close = lambda *a, **k: True\n"
                        "sys.meta_path.insert(0, _Finder())\nsys.modules.pop('mlsys_lib.testing', None)\n" + VIA_LIBRARY),
         loses=STRIDES_TESTS, flagged="meta_path"),
    Case("guard_off_by_line_magic", "registers an IPython line magic whose body switches the guard off",
         replace_answer("compact_strides", "from IPython.core.magic import register_line_magic\n"
                        f"@register_line_magic\ndef quiet(line):\n    exec(__import__('base64').b64decode('{_encoded(GUARD_OFF)}'))\n"
                        "get_ipython().run_line_magic('quiet', '')\n" + VIA_LIBRARY),
         loses=STRIDES_TESTS, flagged="magic"),
    Case("guard_off_by_thread", "a background thread that keeps putting the reference's code back",
         replace_answer("compact_strides", "import threading, time, mlsys_lib.tensor as _T\n"
                        "_code = _T.compact_strides.__code__\n"
                        "def _restore():\n    while True:\n        _T.compact_strides.__code__ = _code\n        time.sleep(0.0005)\n"
                        "threading.Thread(target=_restore, daemon=True).start()\n" + VIA_LIBRARY),
         loses=STRIDES_TESTS, flagged="thread"),
    Case("clones_reference_code", "clones the reference's code object into a new function before the test",
         replace_answer("broadcast_to", "import types\nfrom mlsys_lib.tensor import NDArray as _A\n"
                        "broadcast_to = types.FunctionType(_A.broadcast_to.__code__, _A.broadcast_to.__globals__)\n"),
         loses=["test_broadcast_to", "test_broadcast_to_hidden"], flagged="code of the library function"),
    # A reference that later tests need (kept working in the grading edition: compact is graded on the
    # library's compact_strides) can be cloned before its own test: only the flag tells the instructor.
    Case("clones_kept_reference", "clones a reference the grading edition keeps: full marks, but flagged",
         replace_answer("compact_strides", "import types, mlsys_lib.tensor as _T\n"
                        "compact_strides = types.FunctionType(_T.compact_strides.__code__, _T.compact_strides.__globals__)\n"),
         full=True, flagged="code of the library function"),
    Case("calls_compiled_kernel", "calls the library's compiled tiled-matmul kernel behind the guarded wrapper",
         replace_answer("matmul_tiled", "import numpy as np\nfrom numba import njit\nimport mlsys_lib.tensor.matmul as _M\n"
                        "def matmul_tiled(A, B, tile):\n    C = np.zeros((A.shape[0], B.shape[1]), dtype=A.dtype)\n"
                        "    _M._tiled_kernel(A, B, C, tile, tile, tile)\n    return C\n"),
         loses=MATMUL_TESTS),
    Case("reads_expected_from_frame", "reads the test's expected value out of the calling frame",
         replace_answer("index_to_position", "import sys\ndef index_to_position(index, strides, offset=0):\n"
                        "    caller = sys._getframe(1).f_locals\n"
                        "    for name in ('view', 'expected'):\n        if name in caller:\n"
                        "            try:\n                return int(caller[name][tuple(index)])\n"
                        "            except Exception:\n                pass\n    return -1\n"),
         loses=POSITION_TESTS, flagged="frame"),
    Case("always_equal_result", "returns an int whose == always agrees",
         replace_answer("index_to_position", "class _Yes(int):\n    def __eq__(self, other):\n        return True\n"
                        "    __hash__ = int.__hash__\n"
                        "def index_to_position(index, strides, offset=0):\n    return _Yes(0)\n"),
         loses=POSITION_TESTS),
    Case("always_equal_tuple", "returns a tuple subclass whose == always agrees",
         replace_answer("compact_strides", "class _Yes(tuple):\n    def __eq__(self, other):\n        return True\n"
                        "    __hash__ = tuple.__hash__\n"
                        "def compact_strides(shape):\n    return _Yes((0,) * len(shape))\n"),
         loses=STRIDES_TESTS),
    Case("shadows_builtin", "shadows the builtin tuple so the test's comparison always succeeds",
         replace_answer("compact_strides", "class _Yes(tuple):\n    def __eq__(self, other):\n        return True\n"
                        "_real_tuple = tuple\ndef tuple(x=()):\n    return _Yes(_real_tuple(x))\n" + WRONG_STRIDES),
         loses=STRIDES_TESTS, flagged="shadows"),
    Case("patches_numpy_comparison", "makes numpy's comparisons always agree",
         replace_answer("index_to_position", "import numpy\nnumpy.array_equal = lambda *a, **k: True\n"
                        "numpy.testing.assert_allclose = lambda *a, **k: None\nnumpy.allclose = lambda *a, **k: True\n"
                        "def index_to_position(index, strides, offset=0):\n    return -1\n"),
         loses=POSITION_TESTS, flagged="numpy"),
    Case("proxies_numpy", "puts a proxy of numpy in sys.modules whose comparisons always agree",
         replace_answer("index_to_position", "import sys, types, numpy as _np\n_proxy = types.ModuleType('numpy')\n"
                        "_proxy.__dict__.update(_np.__dict__)\n_proxy.array_equal = lambda *a, **k: True\n"
                        "_proxy.allclose = lambda *a, **k: True\nsys.modules['numpy'] = _proxy\n"
                        "def index_to_position(index, strides, offset=0):\n    return -1\n"),
         loses=POSITION_TESTS, flagged="sys.modules"),
    Case("settrace_rewrites_locals", "a trace function that rewrites the test's expected values",
         replace_answer("compact_strides", "import sys\ndef _tracer(frame, event, arg):\n"
                        "    if 'expected' in frame.f_locals and 'shape' in frame.f_locals:\n"
                        "        frame.f_locals['expected'] = ()\n    return _tracer\n"
                        "sys.settrace(_tracer)\n" + WRONG_STRIDES), loses=STRIDES_TESTS, flagged="settrace"),
    Case("patches_run_cell", "patches the shell so cells holding hidden tests are answered without running",
         insert_after("compact_strides", "ip = get_ipython()\n_real = ip.run_cell\n"
                      "def _run_cell(raw_cell, *args, **kwargs):\n"
                      "    if 'HIDDEN' in raw_cell or 'reference_guard' in raw_cell:\n"
                      "        return _real('pass', *args, **kwargs)\n"
                      "    return _real(raw_cell, *args, **kwargs)\nip.run_cell = _run_cell\n", WRONG_STRIDES),
         loses=STRIDES_TESTS, flagged="run_cell"),
    Case("ast_transformer_drops_asserts", "adds an IPython AST transformer that removes every assert",
         insert_after("compact_strides", "import ast\nclass _NoAsserts(ast.NodeTransformer):\n"
                      "    def visit_Assert(self, node):\n        return ast.Pass()\n"
                      "get_ipython().ast_transformers.append(_NoAsserts())\n", WRONG_STRIDES),
         loses=STRIDES_TESTS, flagged="ast_transformers"),
    Case("input_transformer_rewrites_tests", "adds an input transformer that rewrites the test cells' text",
         insert_after("compact_strides", "def _rewrite(lines):\n    return [l.replace('assert ', 'assert True or ') for l in lines]\n"
                      "get_ipython().input_transformers_post.append(_rewrite)\n", WRONG_STRIDES),
         loses=STRIDES_TESTS, flagged="input_transformers"),
    Case("partial_credit_display", "shows a number as the test cell's result so nbgrader reads it as its score",
         replace_answer("compact_strides", "def compact_strides(shape):\n    get_ipython().displayhook(1)\n    return ()\n"),
         loses=STRIDES_TESTS),

    # --- the submission files themselves ------------------------------------------------------
    Case("deleted_test_cell", "deletes a visible test cell: that test scores 0",
         _delete("test_compact_strides"), loses=["test_compact_strides"]),
    Case("copied_test_cell", "a copied test cell (duplicate grade_id): graded once, no harm",
         _duplicate("test_compact_strides"), full=True),
    Case("corrupted_json", "a file that is not a notebook any more: 0 with the reason",
         lambda nb, ctx: b'{"cells": [{"cell_type": "code", "sou', zero_because="unreadable notebook"),
    Case("oversized_notebook", "a notebook over the size limit: 0 with the reason", _oversized,
         zero_because="larger than"),
    Case("wrong_kernel", "saved with a kernel the grader does not have: graded on the grading kernel",
         _kernel, full=True),
    Case("notebook_is_link_to_gradebook", "the submitted notebook is a link to the gradebook: refused",
         lambda nb, ctx: None, plant=_link_to(lambda ctx: f"{ctx.course_root}/gradebook.db"),
         zero_because="symbolic link"),
    Case("notebook_is_link_to_solutions", "the submitted notebook is a link to the instructor's solution",
         lambda nb, ctx: None, plant=_link_to(lambda ctx: f"{ctx.solutions}/{LAB}/{LAB}.ipynb"),
         zero_because="symbolic link"),
    Case("notebook_is_link_to_device", "the submitted notebook is a link to /dev/zero",
         lambda nb, ctx: None, plant=_link_to(lambda ctx: "/dev/zero"), zero_because="symbolic link"),
    Case("student_folder_is_link", "the student's folder is a link to another student's graded folder",
         lambda nb, ctx: None, plant=_folder_link, zero_because="symbolic link"),
    Case("notebook_is_fifo", "the submitted notebook is a FIFO (reading it would hang)",
         lambda nb, ctx: None, plant=_fifo, zero_because="not a regular file"),
]

#: Honest students graded in the same batch: names sort among the attacks' (with ``blank``, early).
HONEST = ["honest_m", "solution_a"]


def write_case(case: Case, solution: nbformat.NotebookNode, ctx: Context, path: Path) -> None:
    """Write ``case``'s submission to ``path`` (``<folder>/<student>/<lab>.ipynb``)."""
    if case.plant is not None:
        case.plant(path.parent, ctx)
        return
    built = case.build(solution, ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(built, bytes):
        path.write_bytes(built)
    else:
        nbformat.write(built, path)


def stopped_tests(grade_id: str, solution: nbformat.NotebookNode) -> list[str]:
    """The test cells from ``grade_id`` on (what a notebook stopped there loses)."""
    at = _index(solution, grade_id)
    return [c.metadata["nbgrader"]["grade_id"] for c in solution.cells[at:]
            if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")]
