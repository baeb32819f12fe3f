"""The kernel guard (autograder.sandbox.kernel): honest notebooks raise no flag; tampering is flagged and undone.

Each scenario runs in a real IPython kernel started the way the launcher starts it: the guard's
start-up line, history off, and the write end of a report pipe whose lines the test reads. Every
attack cell is followed by a *test cell* whose digest the guard was given, written so that the
student's wrong answer passes it only if the attack works. Without the guard, several of these tests
are fooled (checked in an unguarded kernel), so each check here can fail.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import pytest
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from autograder.paths import REPO
from autograder.sandbox.kernel import exec_line

PINNED = ["numpy", "numpy.testing", "mlsys_lib.testing", "mlsys_lib.tensor"]
SECRET = "SECRET-HIDDEN-TEST-7f3a"


def digest(source: str) -> str:
    """How the host names a test cell to the guard."""
    return hashlib.sha256(source.strip().encode()).hexdigest()


@dataclass
class Reply:
    status: str  # "ok" or "error"
    count: int  # the cell's execution count
    output: str  # streams and error messages


class Kernel:
    """An ipykernel with the guard's start-up line (or without, ``guarded=False``) and its report pipe."""

    def __init__(self, tests: list[str] = (), guarded: bool = True, pinned: list[str] = PINNED):
        self.folder = tempfile.mkdtemp(prefix="guard-")  # short: it holds the kernel's Unix sockets
        connection, _ = write_connection_file(os.path.join(self.folder, "kernel.json"), transport="ipc",
                                              ip=os.path.join(self.folder, "socket"))
        read_end, write_end = os.pipe()
        command = [sys.executable, "-m", "ipykernel_launcher", "-f", connection, "--HistoryManager.enabled=False"]
        if guarded:
            command.append(f"--IPKernelApp.exec_lines={exec_line(write_end, [digest(t) for t in tests], pinned)}")
        env = {**os.environ, "PYTHONPATH": str(REPO), "IPYTHONDIR": os.path.join(self.folder, "ipython")}
        env.pop("MPLBACKEND", None)  # the kernel's own inline backend, which registers a callback
        self.process = subprocess.Popen(command, pass_fds=[write_end], cwd=self.folder, env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(write_end)
        self.received = bytearray()
        self.reader = threading.Thread(target=self._read_reports, args=(read_end,), daemon=True)
        self.reader.start()
        self.client = BlockingKernelClient(connection_file=connection)
        self.client.load_connection_file()
        self.client.start_channels()
        self._wait_until_ready(deadline=time.monotonic() + 90)

    def _wait_until_ready(self, deadline: float) -> None:
        """A kernel_info reply, and a message on IOPub (so the first cell's output is not missed)."""
        while True:
            request = self.client.kernel_info()
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"the kernel exited with status {self.process.returncode}")
                if time.monotonic() > deadline:
                    raise RuntimeError("the kernel did not start")
                try:
                    if self.client.get_shell_msg(timeout=1)["parent_header"].get("msg_id") == request:
                        break
                except queue.Empty:
                    continue
            try:
                self.client.get_iopub_msg(timeout=1)
                return
            except queue.Empty:
                continue

    def _read_reports(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while data := pipe.read(65536):
                self.received += data

    def run(self, code: str) -> Reply:
        output = []

        def collect(message):
            content = message["content"]
            if message["msg_type"] == "stream":
                output.append(content["text"])
            elif message["msg_type"] == "error":
                output.append(f"{content['ename']}: {content['evalue']}")

        reply = self.client.execute_interactive(code, output_hook=collect, timeout=120)["content"]
        return Reply(reply["status"], reply["execution_count"], "".join(output))

    def reports(self) -> list[dict]:
        """The report lines so far (a line is written whole, before the cell it reports on ends)."""
        return [json.loads(line) for line in bytes(self.received).decode().splitlines()]

    def close(self) -> None:
        self.client.stop_channels()
        self.process.kill()
        self.process.wait()
        self.reader.join(timeout=5)
        shutil.rmtree(self.folder, ignore_errors=True)


# -- an honest notebook ---------------------------------------------------------------------------

HONEST_TEST = """\
import numpy as np
assert np.allclose(np.arange(3) * 2, [0, 2, 4])
print('visible tests passed')"""
HONEST = [
    """\
import numpy as np
from numba import njit

@njit
def axpy(a, x, y):
    return a * x + y

print(axpy(2.0, np.arange(3.0), np.ones(3)))""",
    """\
import collections, dataclasses, enum, functools, inspect, logging, typing, warnings
Point = collections.namedtuple('Point', 'x y')

class Pair(typing.NamedTuple):
    a: int
    b: int

class Color(enum.Enum):
    RED = 1

@dataclasses.dataclass(frozen=True)
class Shape:
    dims: tuple
    strides: list = dataclasses.field(default_factory=list)

@functools.lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def f(a, b=2, *, c=3):
    return a

warnings.warn('a warning from a cell')
logging.getLogger('lab').warning('a log line')
print(Point(1, 2), Pair(1, 2), Color.RED, Shape((2, 3)), fib(40), inspect.signature(f), id(f) > 0)""",
    """\
import traceback
try:
    [][1]
except IndexError as error:
    print('caught', repr(error))
    traceback.print_exc()""",
    """\
import numpy as np
import mlsys_lib.tensor as T
x = np.random.default_rng(0).standard_normal((4, 4))
np.testing.assert_allclose(x @ np.eye(4), x)
print(T.compact_strides((2, 3)), np.linalg.norm(x) > 0)""",
    """\
with open('helper.py', 'w') as f:
    f.write('def triple(x):\\n    return 3 * x\\n')
import helper
import threading
worker = threading.Thread(target=lambda: helper.triple(2))
worker.start()
worker.join()""",
    "raise ValueError('an honest mistake')",
    HONEST_TEST,
    "%timeit -n 2 -r 1 sum(range(10))",
    "%%capture captured\nprint('captured')",
    "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()",
    "print('done')",
]


@pytest.fixture(scope="module")
def honest():
    """The honest cells' replies, the reports, and the history databases the kernel wrote (none)."""
    kernel = Kernel(tests=[HONEST_TEST])
    try:
        replies = [kernel.run(cell) for cell in HONEST]
        yield replies, kernel.reports(), glob.glob(os.path.join(kernel.folder, "**", "*.sqlite"), recursive=True)
    finally:
        kernel.close()


def test_an_honest_notebook_raises_no_flag(honest):
    replies, reports, _ = honest
    assert [r.status for r in replies] == ["ok"] * 5 + ["error"] + ["ok"] * 5, [r.output for r in replies]
    assert reports[0]["event"] == "ready"
    assert [r for r in reports if r["event"] not in ("ready", "cell")] == []
    cells = [r for r in reports if r["event"] == "cell"]
    assert [c["count"] for c in cells] == [r.count for r in replies]
    assert [c["test"] for c in cells] == [cell == HONEST_TEST for cell in HONEST]
    assert [c.get("sha") for c in cells if c["test"]] == [digest(HONEST_TEST)]


def test_no_history_is_written_to_disk(honest):
    """``--HistoryManager.enabled=False``: the inputs, hidden tests included, reach no database."""
    _, _, databases = honest
    assert databases == []


# -- attacks --------------------------------------------------------------------------------------

WRONG_ANSWER = """\
import numpy as np

def double(x):
    return np.asarray(x) * 1.0  # wrong: the exercise asks for 2 * x

def double_list(x):
    return [2 * v for v in x][:1]  # wrong: loses items
"""
T_ALLCLOSE = "import numpy as np\nassert np.allclose(double([0.0, 1.0, 2.0]), [0.0, 2.0, 4.0]), 'double is wrong'"
T_LEN = "assert len(double_list([1, 2, 3])) == 3, 'double_list lost items'"
T_TUPLE = "assert tuple(double([0.0, 1.0, 2.0])) == (0.0, 2.0, 4.0), 'double is wrong'"
T_ASSERT = "assert double(2.0) == 4.0, 'double is wrong'"
T_TRACE = "result = double(3.0)\nexpected = 6.0\nassert result == expected, 'double is wrong'"
T_REFERENCE = """\
import mlsys_lib.tensor as T
from mlsys_lib.testing import reference_guard

with reference_guard(T.compact_strides):
    assert tuple(compact_strides((2, 3))) == (3, 1)"""
T_PEEK = "expected = (0.0, 2.0, 4.0)\nassert tuple(double_peek([0.0, 1.0, 2.0])) == expected"
T_STATE = """\
import sys
import numpy as np

assert not np.allclose([1.0], [2.0]) and sys.gettrace() is None
assert 'sneaky' not in get_ipython().magics_manager.magics['line']
print('state ok')"""
T_SECRET = f"# {SECRET}\nassert double(1.0) == 2.0, 'double is wrong'"
T_OUTPUT = f"result = double(1.0)\n'{SECRET}: ' + str(result)  # the cell's value goes to Out and _"
PAYLOAD = base64.b64encode(b"import numpy\nnumpy.allclose = lambda *a, **k: True\n").decode()


@dataclass
class Attack:
    name: str
    cell: str  # the attack: flags are attributed to this cell
    test: str  # the test cell run right after it
    flags: tuple[tuple[str, int | None], ...]  # (text in the flag, its line in the attack cell, or None)
    test_fails: bool = True  # the guard restored the state, so the wrong answer fails the test
    fools: bool = False  # without the guard, the test passes (checked in an unguarded kernel)


ATTACKS = [
    Attack("caller's frame", """\
import sys

def double_peek(x):
    return sys._getframe(1).f_locals['expected']""", T_PEEK, (("calls sys._getframe", 4),), test_fails=False),
    Attack("inspect.currentframe", "import inspect\nframe = inspect.currentframe()", T_STATE,
           (("calls sys._getframe", 2),), test_fails=False),
    Attack("numpy patched", "import numpy as np\nnp.allclose = lambda *a, **k: True", T_ALLCLOSE,
           (("changed numpy.allclose", None),), fools=True),
    Attack("numpy proxied", """\
import sys, types, numpy

class Proxy(types.ModuleType):
    def __getattr__(self, name):
        return getattr(numpy, name)

proxy = Proxy('numpy')
proxy.allclose = lambda *a, **k: True
sys.modules['numpy'] = proxy""", T_ALLCLOSE, (("replaced sys.modules['numpy']", None),)),
    Attack("builtins patched", """\
import builtins
builtins.len = lambda x, _len=len: 3 if type(x) is list and x == [2] else _len(x)""",
           T_LEN, (("changed builtins.len", None),), fools=True),
    Attack("builtin shadowed", "tuple = lambda x: (0.0, 2.0, 4.0)", T_TUPLE, (("shadows the builtin tuple", None),),
           fools=True),
    Attack("trace function", """\
import sys

def tracer(frame, event, arg):  # makes the test's expected value whatever the answer gave
    if 'ipykernel_' in frame.f_code.co_filename and 'expected' in frame.f_globals:
        frame.f_globals['expected'] = frame.f_globals.get('result')
    return tracer

sys.settrace(tracer)""", T_TRACE, (("calls sys.settrace", 8), ("left a trace function set", None)), fools=True),
    Attack("gc.get_referrers", "import gc, numpy as np\nholders = gc.get_referrers(np.allclose)", T_STATE,
           (("calls gc.get_referrers", 2),), test_fails=False),
    Attack("ctypes", "import ctypes\nraw = ctypes.string_at(id(holders), 8)", T_STATE,
           (("uses ctypes (ctypes.string_at)", 2), ("holds ctypes in its globals", None)), test_fails=False),
    Attack("exec of base64", f"import base64\nexec(base64.b64decode('{PAYLOAD}'))", T_ALLCLOSE,
           (("runs code built at run time", 2), ("changed numpy.allclose", None))),
    Attack("meta-path finder", """\
import contextlib, importlib.abc, importlib.machinery, sys, types

class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == 'mlsys_lib.testing':
            return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.reference_guard = lambda *references: contextlib.nullcontext()
        return module

    def exec_module(self, module):
        pass

sys.meta_path.insert(0, Finder())
del sys.modules['mlsys_lib.testing']
import mlsys_lib.tensor as T
compact_strides = T.compact_strides  # the reference itself""",
           T_REFERENCE, (("added a Finder to sys.meta_path", None), ("replaced sys.modules['mlsys_lib.testing']", None))),
    Attack("AST transformer", """\
import ast

class NoAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()

get_ipython().ast_transformers.append(NoAsserts())""",
           T_ASSERT, (("added a NoAsserts to the shell's ast_transformers", None),)),
    Attack("line magic", """\
from IPython.core.magic import register_line_magic

@register_line_magic
def sneaky(line):
    return line""", T_STATE, (("added the line magic %sneaky", None),), test_fails=False),
    Attack("shell replies ok", """\
shell = get_ipython()
real_run_code = shell.run_code

async def run_code(code, result=None, *, async_=False):
    return await real_run_code(code, None, async_=async_)  # the failure is never recorded

shell.run_code = run_code
shell.showtraceback = lambda *args, **kwargs: None""",
           T_ASSERT, (("replaced the method run_code of the shell", None),
                      ("replaced the method showtraceback of the shell", None)), fools=True),
    Attack("library __code__ swapped", """\
import mlsys_lib.testing.guard as guard
guard._raising_code.__code__ = (lambda func: func.__code__).__code__
import mlsys_lib.tensor as T
compact_strides = T.compact_strides  # the reference itself""",
           T_REFERENCE, (("sets __code__ of mlsys_lib.testing.guard._raising_code", 2),
                         ("changed __code__ of mlsys_lib.testing.guard._raising_code", None)), fools=True),
    Attack("code.replace", "import mlsys_lib.tensor as T\nclone = T.compact_strides.__code__.replace(co_name='clone')",
           T_STATE, (("reads the code of the library function mlsys_lib.tensor.strides.compact_strides", 2),
                     ("builds a code object", 2)), test_fails=False),
    Attack("reference cloned", """\
import types
import mlsys_lib.tensor as T
compact_strides = types.FunctionType(T.compact_strides.__code__, T.compact_strides.__globals__)""",
           T_REFERENCE, (("builds a function from a code object", 3),), test_fails=False),
    Attack("audit hook", "import sys\nsys.addaudithook(lambda event, args: None)\nprint('added?')", T_STATE,
           (("adds an audit hook (refused)", 2),), test_fails=False),
    Attack("test cell run by a cell", f"get_ipython().run_cell({T_STATE!r})", T_STATE,
           (("compiles a test cell's source itself", 1),), test_fails=False),
    Attack("guard's module patched", """\
import autograder.sandbox.kernel.guard as guard, builtins, sys
guard._getframe = guard._FRAME_HELPERS = guard._FORMATTERS = None
guard._Guard._flag = guard._Guard._on_frame_read = None
real_isinstance, builtins.isinstance = builtins.isinstance, (lambda *args: False)
sys._getframe(0)
builtins.isinstance = real_isinstance""", T_STATE, (("calls sys._getframe", 5),), test_fails=False),
]
ATTACK_IDS = [attack.name for attack in ATTACKS]
HISTORY = """\
import linecache, sys
shell = get_ipython()
print(In, _ih, _i, _ii, _iii, Out, _oh, _, __, ___)
print({name: value for name, value in globals().items() if name.startswith('_i')})
print(linecache.cache, shell.history_manager.input_hist_raw, shell.history_manager.db_input_cache)
print(shell.history_manager.exceptions, shell.last_execution_result.info)
print(hasattr(sys, 'last_traceback'), shell._last_traceback)"""
THREAD = """\
import threading, time, numpy

def keep_patching():
    while True:
        numpy.allclose = lambda *a, **k: True
        time.sleep(0.001)

threading.Thread(target=keep_patching, daemon=True).start()"""
TESTS = [T_ALLCLOSE, T_LEN, T_TUPLE, T_ASSERT, T_TRACE, T_REFERENCE, T_PEEK, T_STATE, T_OUTPUT, T_SECRET]


@pytest.fixture(scope="module")
def attacked():
    """One guarded kernel: each attack and its test in turn, then history, a thread, a flood of flags."""
    kernel = Kernel(tests=TESTS)
    try:
        results = {"wrong answer": kernel.run(WRONG_ANSWER)}
        for attack in ATTACKS:
            results[attack.name] = (kernel.run(attack.cell), kernel.run(attack.test))
        results["history"] = (kernel.run(T_OUTPUT), kernel.run(T_SECRET), kernel.run(HISTORY))
        results["thread"] = (kernel.run(THREAD), kernel.run(T_ALLCLOSE))
        results["reports before the flood"] = kernel.reports()
        results["flood"] = kernel.run("import sys\n" + "sys._getframe()\n" * 3000)
        time.sleep(0.5)
        results["reports"] = kernel.reports()
        results["raw"] = bytes(kernel.received)
        yield results
    finally:
        kernel.close()


@pytest.mark.parametrize("attack", ATTACKS, ids=ATTACK_IDS)
def test_an_attack_is_flagged_at_its_cell_and_undone_before_the_test(attacked, attack):
    attack_reply, test_reply = attacked[attack.name]
    assert attack_reply.status == "ok", attack_reply.output
    flags = [f for f in attacked["reports before the flood"] if f["event"] == "flag" and f["count"] == attack_reply.count]
    for text, line in attack.flags:
        assert [f["line"] for f in flags if text in f["what"]] == [line], f"{text!r} at line {line}: {flags}"
    if attack.test_fails:
        assert test_reply.status == "error", f"the test was fooled: {test_reply.output}"
    else:
        assert test_reply.status == "ok", test_reply.output


def test_attacks_fool_the_tests_without_the_guard():
    """The same attacks against an unguarded kernel pass the wrong answer: the checks above can fail."""
    # these stay active and would fail (a shadowed tuple) or fool (a tracer, a patched shell) the tests after them
    last = {"builtin shadowed": 1, "trace function": 2, "shell replies ok": 3}
    fooling = sorted((attack for attack in ATTACKS if attack.fools), key=lambda attack: last.get(attack.name, 0))
    kernel = Kernel(guarded=False)
    try:
        kernel.run("import " + ", ".join(PINNED))  # loaded before the student's cells, as the guard does
        kernel.run(WRONG_ANSWER)
        fooled = {attack.name: (kernel.run(attack.cell), kernel.run(attack.test))[1].status for attack in fooling}
        kernel.run(T_OUTPUT)
        kernel.run(T_SECRET)
        history = kernel.run(HISTORY)
    finally:
        kernel.close()
    assert fooled == {attack.name: "ok" for attack in fooling}
    assert SECRET in history.output


def test_a_test_cell_leaves_no_trace_for_later_cells(attacked):
    output_test, secret_test, history = attacked["history"]
    assert (output_test.status, secret_test.status, history.status) == ("ok", "error", "ok"), history.output
    assert SECRET not in history.output
    assert "False None" in history.output  # no sys.last_traceback, no saved traceback of the shell
    cells = [r for r in attacked["reports"] if r["event"] == "cell"]
    assert [c["test"] for c in cells if c["count"] == secret_test.count] == [True]


def test_a_thread_of_notebook_code_still_running_is_reported(attacked):
    start, _ = attacked["thread"]
    flags = [f for f in attacked["reports before the flood"] if "still running" in f.get("what", "")]
    assert [(f["count"], f["line"]) for f in flags] == [(start.count, 3)]  # where its code is


def test_reports_are_bounded(attacked):
    assert attacked["reports"][-1] == {"event": "truncated"}
    assert len(attacked["raw"]) <= 256 * 1024
    assert max(len(line) for line in attacked["raw"].splitlines()) < 2048
    flood = [f for f in attacked["reports"] if f["event"] == "flag" and f["count"] == attacked["flood"].count]
    assert len({f["line"] for f in flood}) == len(flood) > 1000  # one flag per line, each once


def test_the_memory_hook_is_installed_too():
    kernel = Kernel(tests=[], pinned=[])
    try:
        kernel.run("import weakref\nclass Block:\n    pass\n\ndef hog():\n    global first_block\n"
                   "    block = Block()\n    first_block = weakref.ref(block)\n    raise MemoryError('pretend')\n\nhog()")
        freed = kernel.run("import gc\ngc.collect()\nprint(first_block() is None)")
        names = kernel.run("print(sorted(n for n in dir() if not n.startswith('_')))")
    finally:
        kernel.close()
    assert freed.output.strip() == "True"
    assert "guard" not in names.output and "kernel" not in names.output, names.output


def test_the_start_up_line_is_checked_and_binds_nothing():
    line = exec_line(7, ["a" * 64], ["numpy", "mlsys_lib.testing"])
    assert line == "__import__('autograder.sandbox.kernel').sandbox.kernel.install(7, ['" + "a" * 64 + "'], ['numpy', 'mlsys_lib.testing'])"
    for bad in [("7", [], []), (7, ["'); import os; ('"], []), (7, [], ["numpy; import os"]), (-1, [], [])]:
        with pytest.raises(ValueError):
            exec_line(*bad)
