"""The kernel guard: reports tampering with grading from inside the notebook, and undoes what it can.

A graded notebook runs in one IPython kernel: the student's cells, then the instructor's test cells
(visible and hidden), in the same process and namespace, so student code can reach everything the
tests rely on. :func:`install`, run by the kernel's start-up line before any cell, adds two things.

**An audit hook** (PEP 578: once added it cannot be removed). It reports operations done *directly by
notebook code* (a cell, a string a cell ran, a file it wrote: any code outside the Python installation,
its packages, ``mlsys_lib`` and ``autograder``; test cells excepted) that honest lab code has no use for:

- reading frames, hence the test's locals: ``sys._getframe``, ``sys._current_frames``, a traceback's,
  generator's or coroutine's frame (also through ``inspect``/``traceback``/``pdb``, except
  ``traceback`` printing an exception the cell caught);
- ``sys.settrace``, ``sys.setprofile``, ``sys.addaudithook`` (also refused), its own
  ``sys.unraisablehook`` being called;
- ``gc.get_referrers``, ``gc.get_referents``, ``gc.get_objects``; the ``ctypes.*`` events, and a first
  import of ``ctypes``;
- code surgery: building code objects (``code.replace``) or functions from them, setting a function's
  ``__code__``/``__defaults__``/``__kwdefaults__``, reading the ``__code__`` of a library function,
  changing the ``__class__`` of an object that is not the notebook's own;
- running code built at run time (``exec``, ``eval``, ``compile``), ``marshal.loads``, ``pickle.find_class``.

Library code doing the same on its own behalf (``collections.namedtuple``, ``warnings``, numba,
IPython's tracebacks) is not reported: only the frame that raised the event is judged.

**A checkpoint at every cell.** IPython compiles each cell's text (``ast.parse``, an audited
``compile``) before running it; there the hook reports a ``cell`` event, restores what the tests rely
on to its state at start-up and reports what the cell before changed: the entries of ``builtins``;
the pinned modules (``sys.modules``, module and class dicts; a library function's code and defaults,
wherever notebook code set them); ``sys.meta_path``, ``sys.path_hooks``, the functions of ``sys``;
trace and profile functions; the IPython shell (methods replaced on the shell or kernel object, AST
and input transformers, event callbacks, magics, namespaces, the classes of shell and kernel); the
user namespace's ``__builtins__``. What libraries change on their own (a submodule loaded lazily,
ipykernel's ``input``, a magic loaded on first use, matplotlib's callback) is accepted: a change is
undone when it touches a public name or a callable, or brings in the notebook's own code. It also
reports threads of notebook code still running, and ctypes held in the notebook's globals (numpy has
loaded ctypes, so ``import ctypes`` raises no event). Before a *test cell* (its source's digest is one
of ``test_cells``) it removes the globals that shadow a builtin name and wipes the test's source from
the input history; at the next checkpoint it wipes its outputs, its ``linecache`` entry and the saved
tracebacks, so that no later cell can read a hidden test. A cell run from inside a cell (``%%capture``)
is part of that cell; cells compiled by notebook code otherwise (a patched shell) are reported.

Reports are JSON lines written to ``report_fd``, a pipe read by a supervisor outside the sandbox::

    {"event": "ready", "pid": 12}
    {"event": "cell", "count": 7, "test": true, "sha": "ab12..."}
    {"event": "flag", "count": 6, "line": 3, "what": "calls sys._getframe (reads a caller's frame)"}

``count`` is the execution count of the cell whose code did it (for a change found at a checkpoint,
the cell that ran before it); ``line`` the line in that cell, when known. Each flag is reported once;
lines stay under 2 KB, all of them under 256 KB, then one ``{"event": "truncated"}``.

**What it cannot promise.** Student code runs in the same process, so with enough effort it can
defeat any of this: ``ctypes.cast`` and calls through ``ctypes.pythonapi`` raise no audit event on
Python 3.11, nor do assignments to class or module attributes (found only at the next checkpoint);
a thread can undo a restoration right after it; input transformers and ``pre_run_cell`` callbacks
see a test cell before its checkpoint; a test cell's own globals stay in the namespace; objects whose
``__eq__`` always agrees are for the tests to defeat (``tuple(result) == ...``); the report pipe can be
written to or closed. The design is to *report*, not to prevent: the first step of most attacks is an
audited operation, and the supervisor treats a flag, a test cell without its ``cell`` event, a
missing ``ready`` or a pipe closed early as a reason for a human to look. Removing a shadowing global
can change what a student's own function means (it then sees the builtin); that is reported too.

How the guard protects itself: :func:`install` runs this file a second time into a private module
that is in no ``sys.modules`` and whose builtins are a private copy, and everything the hook calls
after start-up is bound at import time (``from sys import _getframe``...) or read through the C
descriptors of ``type``. Rebinding ``builtins.len``, ``sys._getframe`` or a global of this module
therefore changes nothing the running guard uses; reaching the guard itself takes ``gc`` or frames,
which are reported first. What the checkpoint drops is released only after the hook returns, so a
student's ``__del__`` never runs inside the guard. The pinned modules are imported at install; the
state to restore is taken at the first cell's checkpoint, when the kernel has finished starting and
no notebook code has run yet.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import linecache
import os
import site
import sys
import sysconfig
import threading
from _json import encode_basestring_ascii as _json_string
from _thread import get_ident as _thread_id
from functools import partial
from hashlib import sha256
from operator import is_
from os import write as _write
from sys import _getframe
from sys import getprofile as _getprofile
from sys import gettrace as _gettrace
from sys import setprofile as _setprofile
from sys import settrace as _settrace
from types import FunctionType, MethodType, ModuleType

#: Most bytes of reports per kernel; then one ``truncated`` event and silence.
REPORT_LIMIT = 256 * 1024
#: Characters of a flag's text: with JSON's escapes a line stays under 2 KB (and under PIPE_BUF,
#: so it reaches the pipe whole).
WHAT_LIMIT = 300

_MISSING = object()

# Read through ``type``'s own descriptors: a metaclass of the student's cannot intercept these.
_class_dict = type.__dict__["__dict__"].__get__
_class_mro = type.__dict__["__mro__"].__get__
_class_module = type.__dict__["__module__"].__get__
_class_name = type.__dict__["__qualname__"].__get__
_class_flags = type.__dict__["__flags__"].__get__
_set_class_attribute = type.__setattr__
_delete_class_attribute = type.__delattr__
_instance_attribute = object.__getattribute__
_set_instance_attribute = object.__setattr__
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: builtin and extension types nobody can patch

_sys_namespace = vars(sys)
_threading_namespace = vars(threading)
_linecache_namespace = vars(linecache)
_enumerate_threads = threading.enumerate
_import_module = importlib.import_module

#: Members whose reading hands out a frame, and with it the locals of whatever runs there.
_FRAME_MEMBERS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
#: Function attributes whose assignment changes what the function does (``__globals__`` is read-only).
_FUNCTION_STATE = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
#: Descriptors in class dicts that wrap functions.
_WRAPPERS = (staticmethod, classmethod, property)
#: The ctypes audit events of CPython 3.11.
_CTYPES_EVENTS = frozenset({
    "ctypes.addressof", "ctypes.call_function", "ctypes.cdata", "ctypes.cdata/buffer",
    "ctypes.create_string_buffer", "ctypes.create_unicode_buffer", "ctypes.dlopen", "ctypes.dlsym",
    "ctypes.dlsym/handle", "ctypes.get_errno", "ctypes.get_last_error", "ctypes.set_errno",
    "ctypes.set_exception", "ctypes.set_last_error", "ctypes.string_at", "ctypes.wstring_at",
})
#: Standard modules that read frames for their caller: a frame they read, the cell calling them read.
_FRAME_HELPERS = ("inspect", "traceback", "pdb", "bdb")
#: ``traceback`` functions that only format an exception: printing a caught exception is honest.
_FORMATTERS = frozenset({"print_exc", "format_exc", "print_exception", "format_exception",
                         "format_exception_only", "print_tb", "format_tb", "extract_tb", "print_last"})
#: Shell attributes that must stay the objects they were at start-up.
_SHELL_ATTRIBUTES = ("InteractiveTB", "SyntaxTB", "compile", "events", "magics_manager", "history_manager",
                     "displayhook", "display_pub", "display_trap", "builtin_trap", "user_ns", "user_module",
                     "input_transformer_manager", "kernel")
#: Entries of ``sys`` that are data yet decide what ``import`` returns.
_IMPORT_SYSTEM = frozenset({"modules", "meta_path", "path_hooks", "path_importer_cache"})
_STRINGS = frozenset({str})


class _Refused(RuntimeError):
    """Raised from the hook to refuse an operation (``sys.addaudithook`` then silently adds nothing)."""


def _encode(fields: tuple) -> str:
    """One JSON line from ``(key, value)`` pairs whose values are None, bool, int or str."""
    parts = []
    for key, value in fields:
        if value is None or type(value) is bool:
            text = "null" if value is None else ("true" if value else "false")
        elif type(value) is int:
            text = int.__repr__(value)
        else:
            text = _json_string(value)
        parts.append(f'"{key}": {text}')
    return "{" + ", ".join(parts) + "}\n"


def _digest(text) -> str | None:
    """The digest the host gives a cell (sha256 of its stripped source), or None for a non-string."""
    if type(text) is bytes:
        text = text.decode("utf-8", "replace")
    return sha256(text.strip().encode()).hexdigest() if type(text) is str else None


def _safe_text(value) -> str:
    """``value`` if it is a plain string (formatting anything else could run its code), else ``?``."""
    return value if type(value) is str else "?"


def _checked(key: str, value) -> bool:
    """Whether an entry of a module's or class's dict is compared at every cell: public names and
    everything callable. A library's private data (``_cache``, ``_active``) changes as it runs; a
    change to it is undone only when the new value is the notebook's own code."""
    return not key.startswith("_") or callable(value) or type(value) in _WRAPPERS


def _every_entry(key: str, value) -> bool:
    """Tables IPython never changes (event callbacks, the kernel's message handlers): all compared."""
    return True


def _no_entry(key: str, value) -> bool:
    """Magics tables: IPython replaces a lazily registered magic by its implementation on first use,
    so a change is undone only when the new value is the notebook's own code."""
    return False


def _checked_in_builtins(key: str, value) -> bool:
    """Every builtin but ``input``, which ipykernel swaps for its own at every request."""
    return key != "input"


def _checked_in_sys(key: str, value) -> bool:
    """The functions and hooks of ``sys`` and its import tables (not ``sys.last_type`` and such,
    the last error, which IPython sets)."""
    return key in _IMPORT_SYSTEM or (callable(value) and not key.startswith("last_"))


def _is_class(value) -> bool:
    """``isinstance(value, type)`` without consulting ``value.__class__`` (which could run its code)."""
    return issubclass(type(value), type)


def _ctypes_objects() -> tuple[frozenset, frozenset]:
    """The ids of ctypes and its functions and objects, and the files of its modules (ctypes is
    already loaded: numpy imports it)."""
    ctypes = sys.modules.get("ctypes")
    if ctypes is None:
        return frozenset(), frozenset()
    ids = {id(ctypes)} | {id(value) for value in vars(ctypes).values()
                          if callable(value) or _class_module(type(value)) == "ctypes"}
    files = {_safe_text(vars(module).get("__file__")) for name, module in list(sys.modules.items())
             if name == "ctypes" or name.startswith("ctypes.")}
    return frozenset(ids), frozenset(files)


def _library_folders() -> tuple[str, ...]:
    """Folders whose code is not the notebook's: Python's installation and packages, ``mlsys_lib``,
    ``autograder`` (each as given and resolved, with a trailing separator)."""
    paths = sysconfig.get_paths()
    folders = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"], sys.prefix,
               sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages(),
               os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}  # autograder/
    spec = importlib.util.find_spec("mlsys_lib")
    if spec is not None and spec.submodule_search_locations:
        folders.update(spec.submodule_search_locations)
    return tuple(sorted({os.path.join(form, "") for folder in folders
                         for form in (os.path.abspath(folder), os.path.realpath(folder))}))


def _pin_modules(names: list[str]) -> tuple[dict[str, ModuleType], list[str]]:
    """Import ``names``; return them with their parent packages and the submodules already imported
    (by name), and the import errors. Exports a module loads lazily (a module ``__getattr__``) are
    loaded now, unless they are submodules, so that they are pinned with the rest."""
    errors = []
    for name in names:
        try:
            module = _import_module(name)
        except Exception as error:
            errors.append(f"cannot import the pinned module {name} ({type(error).__name__})")
            continue
        namespace = vars(module)
        if "__getattr__" in namespace:
            for attribute in list(namespace.get("__all__", ())):
                if type(attribute) is str and attribute not in namespace:
                    try:
                        if importlib.util.find_spec(f"{name}.{attribute}") is None:
                            getattr(module, attribute)
                    except Exception:
                        continue
    wanted = {".".join(name.split(".")[:end]) for name in names for end in range(1, name.count(".") + 2)}
    packages = tuple(f"{name}." for name in names)
    modules = {name: module for name, module in list(sys.modules.items())
               if isinstance(module, ModuleType) and (name in wanted or name.startswith(packages))}
    return modules, errors


class _Namespace:
    """A dict the tests rely on (a module's, a class's, ``builtins``, a magics table), as it was at the
    first cell, with how to put entries back."""

    def __init__(self, label: str, live, owner: type | None = None, checked=_checked):
        self.label = label  # "numpy." or "class numpy.ma.MaskedArray."
        self.live = live  # the dict itself, or a class's mappingproxy
        self.owner = owner  # the class whose dict ``live`` is; None for a plain dict
        self.checked = checked  # predicate (key, pristine value) -> compare this entry
        self.pristine = dict(live)

    def put(self, key: str, value) -> None:
        if self.owner is None:
            self.live[key] = value
        else:
            _set_class_attribute(self.owner, key, value)

    def remove(self, key: str) -> None:
        if self.owner is None:
            del self.live[key]
        else:
            _delete_class_attribute(self.owner, key)


class _Guard:
    """The audit hook's state, the state the tests rely on, and the checkpoint run at every cell."""

    def __init__(self, report_fd: int, test_cells: list[str], pinned: list[str]):
        from IPython import get_ipython

        self.fd = report_fd
        self.written = 0
        self.truncated = False
        self.reported: set[tuple] = set()
        self.busy: set[int] = set()  # threads inside the hook: their own events are not judged
        self.dropped: list = []  # what a checkpoint replaced, released after the hook returns
        self.failures = 0
        self.test_digests = frozenset(test_cells)
        self.test_files: set[str] = set()  # cell files of test cells: code there is the instructor's
        self.finished_tests: list[str] = []  # their files, outputs still to wipe at the next checkpoint
        self.current: int | None = None  # execution count of the cell running now
        self.shadow_origins: dict[str, int | None] = {}

        self.library = _library_folders()
        self.trust: dict[str, bool] = {}
        stdlib = sysconfig.get_paths()["stdlib"]
        self.frame_helpers = frozenset(os.path.join(stdlib, f"{name}.py") for name in _FRAME_HELPERS)
        self.import_machinery = frozenset({"<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>",
                                           importlib.__file__})

        self.pinned, self.setup_errors = _pin_modules(pinned)
        self.modules = [(name, module, type(module)) for name, module in self.pinned.items()]
        self.shell = shell = get_ipython()
        self.filename_counts = shell.compile._filename_map  # cell file -> execution count (IPython's)
        probe = shell.compile.get_code_name("", "", 0)
        self.cell_prefix = os.path.join(os.path.dirname(probe), "") if os.sep in probe else "<ipython-input-"
        self.user_ns = shell.user_ns
        self.builtin_names = frozenset(name for name in vars(builtins) if not name.startswith("_"))
        self.builtin_values = {name: vars(builtins)[name] for name in self.builtin_names}
        self.originals: dict[tuple[int, str], tuple] = {}  # (id(function), name) -> (function, name, value)
        interactiveshell = sys.modules["IPython.core.interactiveshell"]
        self.result_classes = (interactiveshell.ExecutionResult, interactiveshell.ExecutionInfo)
        self.ctypes_ids, self.ctypes_files = _ctypes_objects()
        self.ctypes_seen: set[int] = set()
        self.snapshot_taken = False
        self.handlers = self._handlers()

    # -- what is pristine -------------------------------------------------------------------------

    def _take_snapshot(self) -> None:
        """Record the state the tests rely on, at the first cell's checkpoint: the kernel has finished
        starting (ipykernel sets ``sys.excepthook`` after the start-up line) and no notebook code has run."""
        self.snapshot_taken = True
        self.initial_ns = dict(self.user_ns)
        self.namespaces = self._namespaces(self.pinned)
        self.lists = self._lists()
        self.instances = self._instances()
        self.threads = {id(thread): thread for thread in _enumerate_threads()}

    def _namespaces(self, modules: dict[str, ModuleType]) -> list[_Namespace]:
        """builtins, sys, the pinned modules and their classes, the shell's classes, magics and handlers."""
        shell = self.shell
        namespaces = [_Namespace("builtins.", vars(builtins), checked=_checked_in_builtins),
                      _Namespace("sys.", _sys_namespace, checked=_checked_in_sys)]
        classes = {}
        for name, module in modules.items():
            namespaces.append(_Namespace(f"{name}.", vars(module)))
            for value in list(vars(module).values()):
                if _is_class(value) and _safe_text(_class_module(value)) == name:
                    classes[id(value)] = value
        for kind in (type(shell), type(shell.kernel), type(shell.compile), type(shell.history_manager),
                     type(shell.input_transformer_manager), type(shell.events), type(shell.magics_manager),
                     type(shell.displayhook), *self.result_classes):
            for cls in _class_mro(kind):
                classes[id(cls)] = cls
        for cls in classes.values():
            if not _class_flags(cls) & _IMMUTABLE_TYPE:
                label = f"class {_safe_text(_class_module(cls))}.{_safe_text(_class_name(cls))}."
                namespaces.append(_Namespace(label, _class_dict(cls), owner=cls))
        tables = [("the shell's event callbacks: ", shell.events.callbacks),
                  ("the magics tables: ", shell.magics_manager.magics),
                  ("the kernel's shell_handlers: ", shell.kernel.shell_handlers),
                  ("the kernel's control_handlers: ", shell.kernel.control_handlers)]
        namespaces += [_Namespace(label, table, checked=_every_entry) for label, table in tables]
        namespaces += [_Namespace(f"the {kind} magic %", table, checked=_no_entry)
                       for kind, table in shell.magics_manager.magics.items()]
        return namespaces

    def _lists(self) -> list[tuple]:
        """Lists whose entries decide how cells are parsed, run and imported from:
        (label, a function returning the list in use, its entries at start-up)."""
        shell = self.shell
        manager = shell.input_transformer_manager
        lists = [("sys.meta_path", partial(_sys_namespace.get, "meta_path")),
                 ("sys.path_hooks", partial(_sys_namespace.get, "path_hooks")),
                 ("the shell's ast_transformers", partial(getattr, shell, "ast_transformers")),
                 ("the shell's input_transformers_post", partial(getattr, shell, "input_transformers_post")),
                 ("the shell's input_transformers_cleanup", partial(getattr, manager, "cleanup_transforms")),
                 ("the shell's line_transforms", partial(getattr, manager, "line_transforms")),
                 ("the shell's token_transformers", partial(getattr, manager, "token_transformers"))]
        lists += [(f"the shell's {event} callbacks", partial(shell.events.callbacks.get, event))
                  for event in shell.events.callbacks]
        return [(label, current, list(current())) for label, current in lists]

    def _instances(self) -> list[tuple]:
        """The shell, kernel and compiler: (object, label, {attribute: value}, method names, instance overrides).

        An instance attribute named like a method of its class (``shell.run_cell = ...``) replaces the
        method for that object; the attributes listed must stay the objects they are."""
        shell = self.shell
        watched = [(shell, "the shell", {name: getattr(shell, name) for name in _SHELL_ATTRIBUTES}),
                   (shell.kernel, "the kernel", {}),
                   (shell.compile, "the shell's compiler", {"_filename_map": self.filename_counts}),
                   (shell.events, "the shell's events", {"callbacks": shell.events.callbacks}),
                   (shell.magics_manager, "the magics manager", {"magics": shell.magics_manager.magics})]
        instances = []
        for owner, label, attributes in watched:
            methods = frozenset(key for cls in _class_mro(type(owner)) for key, value in _class_dict(cls).items()
                                if type(value) in (FunctionType, *_WRAPPERS))
            state = _instance_attribute(owner, "__dict__")
            overrides = {key: value for key, value in state.items() if key in methods}
            instances.append((owner, label, attributes, methods, overrides))
        return instances

    # -- reporting --------------------------------------------------------------------------------

    def _report(self, fields: tuple) -> None:
        """Write one report line; after REPORT_LIMIT bytes, one ``truncated`` event and nothing more."""
        if self.truncated:
            return
        line = _encode(fields)
        if self.written + len(line) > REPORT_LIMIT - 32:
            self.truncated = True
            line = _encode((("event", "truncated"),))
        data = line.encode()
        self.written += len(data)
        try:
            _write(self.fd, data)
        except OSError:
            pass

    def _flag(self, count, line, what: str) -> None:
        """Report ``what`` once per cell and line."""
        key = (what, count, line)
        if key not in self.reported and not self.truncated:
            self.reported.add(key)
            self._report((("event", "flag"), ("count", count), ("line", line), ("what", what[:WHAT_LIMIT])))

    def _flag_at(self, frame, what: str) -> None:
        """Report ``what`` at the cell and line where ``frame`` runs (or the cell that called it)."""
        while frame is not None:
            filename = frame.f_code.co_filename
            count = self.filename_counts.get(filename) if type(filename) is str else None
            if type(count) is int:
                self._flag(count, frame.f_lineno, what)
                return
            frame = frame.f_back
        self._flag(self.current, None, what)

    # -- whose code is it -------------------------------------------------------------------------

    def _notebook_file(self, filename) -> bool:
        """Whether code from ``filename`` is the notebook's (a cell, a string it ran, a file it wrote)."""
        if type(filename) is not str:
            return True
        known = self.trust.get(filename)
        if known is None:
            known = not (filename.startswith(self.library) or filename.startswith("<frozen "))
            if len(self.trust) < 10_000:
                self.trust[filename] = known
        return known

    def _student_frame(self, frame) -> bool:
        """Whether ``frame`` runs notebook code that is not a test cell's."""
        filename = frame.f_code.co_filename
        return self._notebook_file(filename) and filename not in self.test_files

    def _culprit(self, frame, through: frozenset = frozenset()):
        """The frame of student code responsible for an event raised in ``frame`` (the first frame out
        of the files ``through``, which act for their caller), or None when library code is."""
        while frame is not None and frame.f_code.co_filename in through:
            frame = frame.f_back
        return frame if frame is not None and self._student_frame(frame) else None

    def _notebook_code(self, function: FunctionType) -> bool:
        return self._notebook_file(function.__code__.co_filename)

    def _made_by_notebook(self, value) -> bool:
        """Whether what ``value`` does is notebook code: a function (method, partial) written in a
        cell, a module from a notebook file, or an object or class with a method written in one."""
        if type(value) is MethodType:
            value = value.__func__
        if type(value) is partial:
            value = value.func
        if type(value) is FunctionType:
            return self._notebook_code(value)
        if type(value) is ModuleType:
            filename = vars(value).get("__file__")
            return filename is not None and self._notebook_file(filename)
        for cls in _class_mro(value if _is_class(value) else type(value)):
            if _safe_text(_class_module(cls)) == "__main__":
                return True
            for member in _class_dict(cls).values():
                if type(member) in _WRAPPERS:
                    member = member.fget if type(member) is property else member.__func__
                if type(member) is FunctionType and self._notebook_code(member):
                    return True
        return False

    def _function_name(self, function: FunctionType) -> str:
        return f"{_safe_text(function.__module__)}.{_safe_text(function.__qualname__)}"

    def _definition(self, function: FunctionType) -> tuple[int | None, int]:
        """The cell (execution count, or the current cell's if unknown) and line defining ``function``."""
        code = function.__code__
        count = self.filename_counts.get(code.co_filename) if type(code.co_filename) is str else None
        return (count if type(count) is int else self.current), code.co_firstlineno

    # -- the audit hook ---------------------------------------------------------------------------

    def hook(self):
        """The audit hook: dispatch the events of interest; never raise by accident, never recurse."""
        handlers_get = self.handlers.get
        busy = self.busy
        dropped = self.dropped

        def audit(event, args):
            handler = handlers_get(event)
            if handler is None:
                return
            thread = _thread_id()
            if thread in busy:  # an event of the guard's own work (its _getframe, its restoring)
                return
            busy.add(thread)
            try:
                handler(args, _getframe(1))
            except _Refused:
                raise
            except Exception:  # e.g. at the recursion limit: counted, reported at the next cell
                self.failures += 1
            finally:
                busy.discard(thread)
            if dropped:
                dropped.clear()

        return audit

    def _handlers(self) -> dict:
        """Event name -> method(args, frame) judging it."""
        simple = {
            "sys.settrace": "calls sys.settrace (a trace function sees and can change every frame)",
            "sys.setprofile": "calls sys.setprofile (a profile function sees every call)",
            "gc.get_referrers": "calls gc.get_referrers (reaches objects it was not given)",
            "gc.get_referents": "calls gc.get_referents (reaches objects it was not given)",
            "gc.get_objects": "calls gc.get_objects (reaches every object)",
            "code.__new__": "builds a code object (code.replace or types.CodeType)",
            "function.__new__": "builds a function from a code object (types.FunctionType)",
            "marshal.loads": "loads marshalled code (marshal.loads)",
            "exec": "runs code built at run time (exec, eval or compile)",
        }
        handlers = {event: partial(self._on_simple, what) for event, what in simple.items()}
        handlers.update({event: partial(self._on_ctypes, f"uses ctypes ({event}): reads or writes memory directly")
                         for event in _CTYPES_EVENTS})
        handlers.update({"compile": self._on_compile, "sys._getframe": self._on_frame_function,
                         "sys._current_frames": self._on_frame_function, "object.__getattr__": self._on_getattr,
                         "object.__setattr__": self._on_setattr, "sys.addaudithook": self._on_addaudithook,
                         "pickle.find_class": self._on_find_class, "sys.unraisablehook": self._on_unraisablehook,
                         "import": self._on_import})
        return handlers

    def _on_simple(self, what: str, args, frame) -> None:
        culprit = self._culprit(frame)
        if culprit is not None:
            self._flag_at(culprit, what)

    def _on_ctypes(self, what: str, args, frame) -> None:
        culprit = self._culprit(frame, through=self.ctypes_files)  # ctypes.string_at & co. are Python wrappers
        if culprit is not None:
            self._flag_at(culprit, what)

    def _on_frame_function(self, args, frame) -> None:
        name = "sys._getframe (reads a caller's frame)" if args else "sys._current_frames (reads every thread's frame)"
        self._on_frame_read(frame, f"calls {name}")

    def _on_frame_read(self, frame, what: str) -> None:
        """A frame handed out: judge the code that asked, looking through inspect/traceback/pdb."""
        entry = None
        while frame is not None and frame.f_code.co_filename in self.frame_helpers:
            entry = frame.f_code.co_name
            frame = frame.f_back
        if entry not in _FORMATTERS and frame is not None and self._student_frame(frame):
            self._flag_at(frame, what)

    def _on_getattr(self, args, frame) -> None:
        target, name = args
        if name in _FRAME_MEMBERS:
            kind = _safe_text(_class_name(type(target)))
            self._on_frame_read(frame, f"reads {kind}.{name} (a frame, and its locals)")
        elif name == "__code__" and type(target) is FunctionType:
            culprit = self._culprit(frame)
            if culprit is not None and not self._notebook_code(target):
                self._flag_at(culprit, f"reads the code of the library function {self._function_name(target)}")

    def _on_setattr(self, args, frame) -> None:
        target, name, _ = args
        if type(target) is FunctionType and name in _FUNCTION_STATE:
            culprit = self._culprit(frame)
            if culprit is not None:
                self._remember_original(target, name)
                self._flag_at(culprit, f"sets {name} of {self._function_name(target)}")
        elif name == "__class__":
            culprit = self._culprit(frame)
            if culprit is not None and not self._made_by_notebook(type(target)):
                self._flag_at(culprit, f"changes the class of a {_safe_text(_class_name(type(target)))} object")

    def _on_addaudithook(self, args, frame) -> None:
        culprit = self._culprit(frame)
        if culprit is not None:
            self._flag_at(culprit, "adds an audit hook (refused)")
            raise _Refused("audit hooks are reserved for the grader")

    def _on_find_class(self, args, frame) -> None:
        culprit = self._culprit(frame)
        if culprit is not None:
            module, name = args
            self._flag_at(culprit, f"unpickles (pickle.find_class of {_safe_text(module)}.{_safe_text(name)})")

    def _on_unraisablehook(self, args, frame) -> None:
        """Python calls ``sys.unraisablehook``: report it if it is the notebook's own function."""
        hook = args[0]
        if type(hook) is FunctionType and self._notebook_code(hook) and hook.__code__.co_filename not in self.test_files:
            self._flag(*self._definition(hook), "installed its own sys.unraisablehook (it sees dying objects)")

    def _on_import(self, args, frame) -> None:
        if args[0] in ("ctypes", "_ctypes"):
            culprit = self._culprit(frame, through=self.import_machinery)
            if culprit is not None:
                self._flag_at(culprit, "imports ctypes (reads and writes memory directly)")

    def _on_compile(self, args, frame) -> None:
        source, filename = args
        cell = type(filename) is str and filename.startswith(self.cell_prefix) and type(source) in (str, bytes)
        if cell and not self._student_frame(frame):  # IPython compiling a cell's text
            self._on_cell_compiled(source, filename, frame)
        else:
            self._on_simple("runs code built at run time (exec, eval or compile)", args, frame)

    def _remember_original(self, function: FunctionType, name: str) -> None:
        """Before notebook code first changes a library function's code or defaults, keep what it
        was (library code changing its own functions, as the reference guard does, is left alone)."""
        key = (id(function), name)
        if key not in self.originals and not self._notebook_code(function):
            self.originals[key] = (function, name, getattr(function, name))

    # -- the checkpoint ---------------------------------------------------------------------------

    def _on_cell_compiled(self, source, filename: str, frame) -> None:
        """IPython compiles a cell: run the checkpoint, unless notebook code is compiling it."""
        digest = _digest(source)
        outer = None
        while frame is not None:
            if self._notebook_file(frame.f_code.co_filename):
                outer = frame
            frame = frame.f_back
        if outer is not None:  # run from notebook code: a cell magic (%%capture), or a patched shell
            if digest in self.test_digests:
                self._flag_at(outer, "compiles a test cell's source itself")
            if outer.f_code.co_name == "<module>":
                return
            self._flag_at(outer, "runs cells through notebook code (a patched shell)")
        self._checkpoint(filename, digest)

    def _checkpoint(self, filename: str, digest: str) -> None:
        """Report the cell, undo what the cell before changed, and prepare a test cell."""
        count = self.filename_counts.get(filename)
        count = count if type(count) is int else None
        previous, self.current = self.current, count
        test = digest in self.test_digests
        self._report((("event", "cell"), ("count", count), ("test", test), *((("sha", digest),) if test else ())))
        if not self.snapshot_taken:
            self._take_snapshot()
        self._restore_tracing(previous)
        for namespace in self.namespaces:
            self._restore_namespace(namespace, previous)
        self._restore_modules(previous)
        self._restore_functions(previous)
        self._restore_instances(previous)
        for label, current, entries in self.lists:
            self._restore_list(label, current(), entries, previous)
        self._restore_user_builtins(previous)
        self._check_threads(previous)
        self._check_ctypes_globals(previous)
        self._note_shadows(previous)
        if self.failures:
            self._flag(previous, None, f"the guard failed {self.failures} times (e.g. at the recursion limit)")
            self.failures = 0
        for finished in self.finished_tests:
            self._wipe_outputs(finished)
        self.finished_tests.clear()
        if test:
            self.test_files.add(filename)
            self.finished_tests.append(filename)
            self._remove_shadows(count)
            self._wipe_inputs()

    def _restore_tracing(self, previous) -> None:
        """No trace or profile function may survive a cell, in this thread or for new threads."""
        for what, get, put in (("trace", _gettrace, _settrace), ("profile", _getprofile, _setprofile)):
            function = get()
            if function is not None:
                self.dropped.append(function)
                put(None)
                self._flag(previous, None, f"left a {what} function set (removed)")
            hook = _threading_namespace.get(f"_{what}_hook")
            if hook is not None:
                self.dropped.append(hook)
                _threading_namespace[f"_{what}_hook"] = None
                self._flag(previous, None, f"set a {what} function for new threads (removed)")

    def _restore_namespace(self, namespace: _Namespace, previous) -> None:
        """Undo changed, deleted and added entries (see :func:`_checked`); accept a library's own."""
        live, pristine = namespace.live, namespace.pristine
        if not set(map(type, live)) <= _STRINGS:
            self._flag(previous, None, f"put a key that is not a string into {namespace.label[:-1]} (not checked)")
            return  # comparing such a key could run its code: leave this dict alone, reported
        for key, value in list(pristine.items()):
            current = live.get(key, _MISSING)
            if current is value:
                continue
            if namespace.checked(key, value) or (current is not _MISSING and self._made_by_notebook(current)):
                self.dropped.append(current)
                namespace.put(key, value)
                verb = "deleted" if current is _MISSING else "changed"
                self._flag(previous, None, f"{verb} {namespace.label}{key} (restored)")
            elif current is _MISSING:
                del pristine[key]
            else:
                pristine[key] = current
        if len(live) != len(pristine):
            for key in [key for key in live if key not in pristine]:
                value = live[key]
                if self._made_by_notebook(value):
                    self.dropped.append(value)
                    namespace.remove(key)
                    self._flag(previous, None, f"added {namespace.label}{key} (removed)")
                else:
                    pristine[key] = value

    def _restore_modules(self, previous) -> None:
        """The pinned modules are the ones ``sys.modules`` names, and of their own class."""
        table = _sys_namespace["modules"]
        for name, module, kind in self.modules:
            current = table.get(name, _MISSING)
            if current is not module:
                self.dropped.append(current)
                table[name] = module
                self._flag(previous, None, f"replaced sys.modules[{name!r}] (restored)")
            if type(module) is not kind:
                _set_instance_attribute(module, "__class__", kind)
                self._flag(previous, None, f"changed the class of the module {name} (restored)")

    def _restore_functions(self, previous) -> None:
        """Library functions whose code or defaults were set get back what they had before."""
        for key, (function, name, original) in list(self.originals.items()):
            current = getattr(function, name)
            if current is not original:
                self.dropped.append(current)
                setattr(function, name, original)
                self._flag(previous, None, f"changed {name} of {self._function_name(function)} (restored)")
            del self.originals[key]

    def _restore_instances(self, previous) -> None:
        """The shell's watched attributes, and no instance attribute hiding a method of the shell,
        kernel or compiler (``get_ipython().run_cell = ...``)."""
        for owner, label, attributes, methods, overrides in self.instances:
            for name, value in attributes.items():
                current = getattr(owner, name, _MISSING)
                if current is not value:
                    self.dropped.append(current)
                    setattr(owner, name, value)
                    self._flag(previous, None, f"replaced {label}'s {name} (restored)")
            state = _instance_attribute(owner, "__dict__")
            for key in [key for key in state if type(key) is str and key in methods]:
                if state[key] is not overrides.get(key, _MISSING):
                    self.dropped.append(state.pop(key))
                    self._flag(previous, None, f"replaced the method {key} of {label} (restored)")
            for key, value in overrides.items():
                if state.get(key, _MISSING) is not value:
                    state[key] = value

    def _restore_list(self, label: str, live, entries: list, previous) -> None:
        """Keep ``live`` to its start-up ``entries`` plus what library code added; drop the notebook's."""
        if type(live) is not list:
            self._flag(previous, None, f"replaced {label} by something that is not a list")
            return
        current = list(live)
        if len(current) == len(entries) and all(map(is_, current, entries)):
            return
        known = {id(entry) for entry in entries}
        foreign = {id(entry) for entry in current if id(entry) not in known and self._made_by_notebook(entry)}
        kept = [entry for entry in current if id(entry) not in foreign]
        if not known <= {id(entry) for entry in current}:
            self._flag(previous, None, f"removed entries from {label} (restored)")
            kept = entries + [entry for entry in kept if id(entry) not in known]
        for entry in current:
            if id(entry) in foreign:
                self._flag(previous, None, f"added a {_safe_text(_class_name(type(entry)))} to {label} (removed)")
        self.dropped.append(current)
        live[:] = kept
        entries[:] = kept

    def _restore_user_builtins(self, previous) -> None:
        """The user namespace's ``__builtins__`` decides what a cell's builtin names mean."""
        initial = self.initial_ns.get("__builtins__", _MISSING)
        current = self.user_ns.get("__builtins__", _MISSING)
        if current is not initial and initial is not _MISSING:
            self.dropped.append(current)
            self.user_ns["__builtins__"] = initial
            self._flag(previous, None, "replaced the notebook's __builtins__ (restored)")

    def _check_threads(self, previous) -> None:
        """Report, once each, threads running notebook code (a thread can undo a restoration): a
        Thread subclass of the notebook's, or a library Thread whose target is a notebook function."""
        for thread in _enumerate_threads():
            if id(thread) in self.threads:
                continue
            self.threads[id(thread)] = thread
            if self._made_by_notebook(type(thread)):
                runs = [_class_dict(cls)["run"] for cls in _class_mro(type(thread)) if "run" in _class_dict(cls)]
                function = runs[0]
            else:
                function = _instance_attribute(thread, "__dict__").get("_target")
            if type(function) is MethodType:
                function = function.__func__
            if type(function) is FunctionType and self._notebook_code(function):
                count, line = self._definition(function)
                self._flag(count, line, f"started a thread that is still running at cell {self.current} "
                                        "(its code may undo restorations)")

    def _check_ctypes_globals(self, previous) -> None:
        """ctypes is loaded by numpy, so ``import ctypes`` in a cell raises no audit event: look for it
        in the notebook's globals instead."""
        names = []
        for name, value in list(self.user_ns.items()):
            if id(value) in self.ctypes_ids and id(value) not in self.ctypes_seen and type(name) is str:
                self.ctypes_seen.add(id(value))
                names.append(name)
        if names:
            self._flag(previous, None, f"holds ctypes in its globals ({', '.join(names)}): it reads and writes memory")

    # -- shadowed builtins ------------------------------------------------------------------------

    def _shadows(self) -> list[str]:
        """Globals named like a builtin, not there as they are at start-up, whose value is the
        notebook's own code (``tuple = lambda x: ...``, a class with an ``__eq__`` of its own).

        The builtin itself under its name (``from IPython.display import display``) and library
        objects (``from numpy import *`` binds numpy's ``sum``) are left alone: they fool no test,
        and the student's own functions may rely on them."""
        user_ns, initial = self.user_ns, self.initial_ns
        return [name for name in list(user_ns) if type(name) is str and name in self.builtin_names
                and user_ns[name] is not initial.get(name, _MISSING)
                and user_ns[name] is not self.builtin_values.get(name, _MISSING)
                and self._made_by_notebook(user_ns[name])]

    def _note_shadows(self, previous) -> None:
        """Remember which cell introduced each shadowing global, to name it when it is removed."""
        for name in self._shadows():
            self.shadow_origins.setdefault(name, previous)

    def _remove_shadows(self, count) -> None:
        """Before a test cell, builtin names must mean the builtins (``tuple = lambda x: ...``)."""
        for name in self._shadows():
            self.dropped.append(self.user_ns.pop(name))
            self._flag(self.shadow_origins.pop(name, None), None,
                       f"shadows the builtin {name} (removed before test cell {count})")

    # -- history hygiene --------------------------------------------------------------------------

    def _is_test_text(self, text) -> bool:
        return type(text) is str and _digest(text) in self.test_digests

    def _wipe_inputs(self) -> None:
        """A test cell is about to run: its source leaves In/_ih, _i/_ii/_iii/_iN and the history cache.
        (History objects that are no longer plain lists are the notebook's doing, and left alone.)"""
        history = self.shell.history_manager
        for inputs in (history.input_hist_parsed, history.input_hist_raw):
            if type(inputs) is list:
                inputs[:] = ["" if self._is_test_text(text) else text for text in inputs]
        for name in ("_i00", "_i", "_ii", "_iii"):
            if self._is_test_text(getattr(history, name)):
                setattr(history, name, "")
        for name in [name for name in list(self.user_ns) if type(name) is str and name.startswith("_i")]:
            if self._is_test_text(self.user_ns[name]):
                self.user_ns[name] = ""
        cache = history.db_input_cache
        if type(cache) is list:
            cache[:] = [(entry[0], "", "") if type(entry) is tuple and len(entry) == 3 and
                        (self._is_test_text(entry[1]) or self._is_test_text(entry[2])) else entry for entry in cache]

    def _wipe_outputs(self, filename: str) -> None:
        """A test cell has run: drop its outputs, source lines and tracebacks."""
        shell, history = self.shell, self.shell.history_manager
        count = self.filename_counts.get(filename)
        self._pop(_linecache_namespace.get("cache"), filename)
        if type(count) is int:
            output = self._pop(history.output_hist, count)
            self._pop(history.output_hist_reprs, count)
            self._pop(history.exceptions, count)  # its formatted traceback quotes the test's lines
            self._pop(self.user_ns, f"_{count}")
            if output is not None:
                for name in ("_", "__", "___"):
                    if self.user_ns.get(name) is output:
                        self.user_ns[name] = ""
                    if getattr(shell.displayhook, name, None) is output:
                        setattr(shell.displayhook, name, "")
        result = shell.last_execution_result
        if type(result) is self.result_classes[0] and type(result.info) is self.result_classes[1] \
                and self._is_test_text(result.info.raw_cell):
            result.info.raw_cell = result.info.transformed_cell = ""
            result.result = None
            self._drop_tracebacks(result.error_in_exec)
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            self._pop(_sys_namespace, name)
        shell._last_traceback = None
        if hasattr(shell.InteractiveTB, "tb"):
            shell.InteractiveTB.tb = None

    def _pop(self, table, key):
        """Remove ``key`` from ``table`` if it is a plain dict; what it held is released after the hook."""
        value = table.pop(key, None) if type(table) is dict else None
        self.dropped.append(value)
        return value

    def _drop_tracebacks(self, error) -> None:
        """Tracebacks hold the test's frames: its locals and, through them, its code."""
        seen = set()
        while error is not None and id(error) not in seen:
            seen.add(id(error))
            self.dropped.append(error.__traceback__)
            error.__traceback__ = None
            error = error.__cause__ or error.__context__


def _private_copy() -> ModuleType:
    """This module run again into a module of its own, in no ``sys.modules``, whose builtins are a
    copy of today's: the running guard's globals and builtins are then out of the notebook's reach."""
    spec = importlib.util.spec_from_file_location(__name__, __file__)
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__builtins__"] = dict(vars(builtins))
    spec.loader.exec_module(module)
    return module


def _start(report_fd: int, test_cells: list[str], pinned: list[str]) -> None:
    """Take the pristine state, add the hook, say ready (runs in the private copy)."""
    try:
        os.set_inheritable(report_fd, False)  # not for the student's subprocesses
    except OSError:
        pass
    guard = _Guard(report_fd, test_cells, pinned)
    sys.addaudithook(guard.hook())
    guard._report((("event", "ready"), ("pid", os.getpid())))
    for error in guard.setup_errors:
        guard._flag(None, None, error)


def install(report_fd: int, test_cells: list[str], pinned: list[str]) -> None:
    """Install the guard in the running IPython kernel (see the module docstring), before any cell.

    ``report_fd``: the pipe to report on; ``test_cells``: sha256 digests of the graded test cells'
    stripped sources; ``pinned``: the modules those cells import, imported now so that pristine
    copies exist before student code runs."""
    _private_copy()._start(report_fd, test_cells, pinned)
