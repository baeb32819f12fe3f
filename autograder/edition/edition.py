"""The grading edition of ``mlsys_lib`` for one lab: the lab's references are absent.

While lab L is graded, the sandboxed kernel imports this edition instead of the library. Every
function in ``solutions/L/references.txt`` (see :mod:`autograder.edition.references`) keeps its decorators,
signature and docstring, but its body is replaced by::

    raise NotImplementedError("<qualname> is not part of the grading edition of mlsys_lib for L: ...")

so an answer has nothing to call, clone or read. The private helpers only those functions used go
too (:func:`plan_removal`): a function, Numba kernel or private method whose every use in the
package lies inside removed bodies gets the same stub, repeated to a fixed point, so that the
compiled kernel behind a guarded wrapper does not survive it. Everything else stays byte-identical:
the source is edited with :mod:`ast` line numbers, one line range per removed body.

The edition's ``reference_guard`` still works (the test cells call it on the stubs) and refuses,
with ``RuntimeError``, to guard a function the edition still has: a stale manifest shows at once.
The removed set lives in the generated ``mlsys_lib/testing/_edition.py``; the library itself has no
such file, and its guard is the one in the repository.

The student kit's library (:mod:`autograder.edition.kit`) is made by the same planning and stubbing
(:func:`plan_removal`, :func:`write_stubbed_package`) over several labs' manifests, with its own
stub message and no byte code.

Layout of ``dest``: ``mlsys_lib/`` (byte-compiled) and ``EDITION.json`` (lab, fingerprint, what was
removed, file and line). A build is reused while the fingerprint (package files, manifest, this
builder) matches, and is atomic: it is written into a temporary sibling folder, then renamed.
"""

from __future__ import annotations

import ast
import bisect
import compileall
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from ..paths import SOLUTIONS, check_lab
from .references import PACKAGE, PACKAGE_NAME, Definition, ModuleSource, PackageSource, read_manifest

EDITION_FILE = "EDITION.json"
EDITION_MODULE = Path("testing") / "_edition.py"      # inside the edition's package
GUARD_MODULE = Path("testing") / "guard.py"

STUB_MESSAGE = ("{qualname} is not part of the grading edition of mlsys_lib for {lab}: "
                "the exercise asks you to write it")


# ---- what to remove --------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Use:
    """One use of a name: a bare name in ``module``, an attribute, an imported name or a string."""

    kind: str                        # "name", "attr", "import" or "str"
    value: str
    module: str
    inside: tuple[Definition, ...]   # the defs whose *body* holds the use (decorators and defaults do not count)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_LIKE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.:][A-Za-z_][A-Za-z0-9_]*)*")


def _nodes_on(node: ast.AST, lines: list[int]) -> Iterator[ast.AST]:
    """The nodes below ``node`` whose lines hold one of ``lines`` (sorted): whole subtrees without
    any are skipped, which makes a module's walk cheap when few of its lines matter."""
    for child in ast.iter_child_nodes(node):
        first = getattr(child, "lineno", None)
        if first is not None:
            i = bisect.bisect_left(lines, first)
            if i == len(lines) or lines[i] > child.end_lineno:
                continue
            yield child
        yield from _nodes_on(child, lines)


def _uses(module: ModuleSource, wanted: set[str], mentions: re.Pattern) -> Iterator[_Use]:
    """Every use in ``module`` of a name in ``wanted`` (``mentions`` finds them in its text), with the
    function bodies it lies in.

    A use is a bare name, an attribute (``m._y``, ``self._y``), an imported name (``from .x import
    _y``) or a part of a name-like string (``__all__``, ``getattr(m, "_y")``, ``"pkg.mod:_y"``).
    """
    lines = sorted({module.text.count("\n", 0, m.start()) + 1 for m in mentions.finditer(module.text)})
    if not lines:
        return
    bodies = [(d, (d.node.body[0].lineno, d.node.body[0].col_offset), (d.node.end_lineno, d.node.end_col_offset))
              for d in module.definitions]
    for node in _nodes_on(module.tree, lines):
        if isinstance(node, ast.Name):
            found = [("name", node.id)]
        elif isinstance(node, ast.Attribute):
            found = [("attr", node.attr)]
        elif isinstance(node, ast.alias):  # from .x import _y (and import a.b)
            found = [("import", node.name.rpartition(".")[2])]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAME_LIKE.fullmatch(node.value):
            found = [("str", part) for part in re.split(r"[.:]", node.value)]
        else:
            continue
        found = [(kind, value) for kind, value in found if value in wanted]
        if not found:
            continue
        at = (node.lineno, node.col_offset)
        inside = tuple(d for d, first, last in bodies if first <= at <= last)
        for kind, value in found:
            yield _Use(kind, value, module.name, inside)


@dataclass
class Removal:
    """One def of the edition whose body is a stub: a guarded reference, or a helper only it used."""

    definition: Definition
    reason: str                   # "reference" or "helper of <key>, ..."
    users: tuple[str, ...] = ()   # a helper's removed users (keys), each removed before it

    @property
    def key(self) -> str:
        return self.definition.key


def _is_helper_candidate(definition: Definition) -> bool:
    """Module-level functions (kernels included) and private, non-dunder methods."""
    name = definition.name
    if definition.scope == "module":
        return not (name.startswith("__") and name.endswith("__"))
    return definition.scope == "class" and name.startswith("_") and not name.endswith("__")


def plan_removal(source: PackageSource, references: Sequence[str], listed: Iterable[str] = ()) -> list[Removal]:
    """The manifest's definitions, then the helpers used only from removed bodies (to a fixed point).

    A helper is kept as soon as one use of its name lies outside every removed body: code that
    stays, a module-level table, an import (``from .x import _y``), an ``__all__`` string, or a
    name in ``listed`` (what the lab's notebook mentions: :func:`notebook_names`). Uses are
    matched by name (a bare name in the helper's own module; an attribute, import or string
    anywhere), so a same-named thing elsewhere keeps it too: the rule errs toward keeping.
    """
    listed = set(listed)
    removals = {}
    for key in references:
        definition = source.find(key)
        removals[id(definition)] = Removal(definition, "reference")
    candidates = _reachable_candidates(source, [r.definition for r in removals.values()], listed)
    wanted = {d.name for d in candidates}
    mentions = re.compile(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(wanted)))) if wanted else None
    uses_by_value: dict[str, list[_Use]] = {}
    for module in source.modules.values():
        for use in _uses(module, wanted, mentions) if mentions else ():
            uses_by_value.setdefault(use.value, []).append(use)
    changed = True
    while changed:
        changed = False
        for candidate in candidates:
            if id(candidate) in removals:
                continue
            users = _removed_users(candidate, uses_by_value.get(candidate.name, ()), removals)
            if users:
                reason = "helper of " + ", ".join(sorted(users))
                removals[id(candidate)] = Removal(candidate, reason, tuple(sorted(users)))
                changed = True
    return list(removals.values())


def _reachable_candidates(source: PackageSource, removed: list[Definition], listed: set[str]) -> list[Definition]:
    """The helper candidates whose name appears in a removed body, or in the body of such a
    candidate, and so on: the only ones that can end up used from removed bodies alone."""
    by_name: dict[str, list[Definition]] = {}
    for definition in source.definitions():
        if _is_helper_candidate(definition) and definition.name not in listed:
            by_name.setdefault(definition.name, []).append(definition)
    reachable: dict[int, Definition] = {}
    frontier = list(removed)
    while frontier:
        definition = frontier.pop()
        lines = source.modules[definition.module].text.splitlines()[definition.node.body[0].lineno - 1:
                                                                     definition.node.end_lineno]
        for name in set(_IDENTIFIER.findall("\n".join(lines))):
            for candidate in by_name.get(name, ()):
                if id(candidate) not in reachable:
                    reachable[id(candidate)] = candidate
                    frontier.append(candidate)
    return list(reachable.values())


def notebook_names(lab: str) -> set[str]:
    """Every identifier in the code cells of ``lab``'s source notebook (tests and solutions) and in
    the inline code of its text: library helpers the lab uses or offers stay in its edition."""
    names: set[str] = set()
    for path in sorted((SOLUTIONS / lab).glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:  # plain JSON: no schema check, fast
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if cell["cell_type"] == "code":
                names.update(_IDENTIFIER.findall(text))
            elif cell["cell_type"] == "markdown":
                for span in re.findall(r"`([^`]+)`", text):
                    names.update(_IDENTIFIER.findall(span))
    return names


def _removed_users(candidate: Definition, uses: Iterable[_Use], removals: dict[int, Removal]) -> set[str]:
    """Keys of the removed defs that use ``candidate``, or an empty set if any use stays (or none is found)."""
    users: set[str] = set()
    for use in uses:
        if use.kind == "name" and use.module != candidate.module:
            continue  # a bare name elsewhere is another module's variable (an import of it counts apart)
        if any(d is candidate for d in use.inside):
            continue  # recursion, or a def nested inside the candidate
        removed = [d for d in use.inside if id(d) in removals]
        if not removed:
            return set()
        users.add(removed[-1].key)
    return users


# ---- rewriting the source ----------------------------------------------------------------------------

def _header_end(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """(line, column just past it) of the ``:`` that ends the def's signature."""
    readline = iter(lines[node.lineno - 1:]).__next__
    depth, seen_def = 0, False
    for token in tokenize.generate_tokens(readline):
        if token.type == tokenize.NAME and token.string == "def":
            seen_def = True
        elif token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        elif seen_def and depth == 0 and token.type == tokenize.OP and token.string == ":":
            return node.lineno + token.end[0] - 1, token.end[1]
    raise ValueError(f"line {node.lineno}: no end to the signature of {node.name}")


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _stub_region(lines: list[str], definition: Definition, statement: str) -> tuple[int, int, list[str]]:
    """Lines ``first..last`` (1-based, inclusive) of the body to replace, and the lines replacing them.

    Decorators, the signature and the docstring stay; the statements after them go, with comment
    lines deeper than the def that trail its last statement.
    """
    node = definition.node
    body = node.body
    has_doc = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
               and isinstance(body[0].value.value, str))
    rest = body[1:] if has_doc else body
    keep_until = body[0].end_lineno if has_doc else _header_end(lines, node)[0]
    last = node.end_lineno
    def_indent = len(_indent(lines[node.lineno - 1]))
    probe = last
    while probe < len(lines):  # trailing comments of the body (indented deeper than the def)
        text = lines[probe]
        if text.strip() and not (text.lstrip().startswith("#") and len(_indent(text)) > def_indent):
            break
        probe += 1
        if text.strip():
            last = probe
    if rest and rest[0].lineno <= keep_until:  # body on the signature's line: def f(x): return x
        if has_doc:
            raise ValueError(f"{definition.path}:{node.lineno}: cannot stub {definition.qualname}: "
                             "its docstring and statements share a line")
        row, column = _header_end(lines, node)
        head = lines[row - 1][:column]
        return row, max(last, row), [f"{head} {statement}\n"]
    indent = _indent(lines[rest[0].lineno - 1]) if rest else _indent(lines[body[0].lineno - 1])
    return keep_until + 1, last, [f"{indent}{statement}\n"]


def stub_module(text: str, removals: Sequence[Removal], lab: str,
                message: Callable[[Removal], str] | None = None) -> str:
    """``text`` with the body of every removal replaced by its stub; all other lines byte-identical.

    The stub raises ``NotImplementedError(message(removal))``; by default the grading edition's
    :data:`STUB_MESSAGE` for ``lab``.
    """
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    regions = []
    for removal in removals:
        message_text = (message(removal) if message
                        else STUB_MESSAGE.format(qualname=removal.definition.qualname, lab=lab))
        statement = f"raise NotImplementedError({json.dumps(message_text)})"
        regions.append(_stub_region(lines, removal.definition, statement))
    regions.sort(key=lambda region: region[0])
    kept: list[tuple[int, int, list[str]]] = []
    for region in regions:  # a def nested in a removed body goes with it
        if kept and region[0] <= kept[-1][1]:
            if region[1] > kept[-1][1]:
                raise ValueError(f"overlapping stubs at lines {kept[-1][:2]} and {region[:2]}")
            continue
        kept.append(region)
    for first, last, replacement in reversed(kept):
        lines[first - 1:last] = replacement
    result = "".join(lines)
    return result if text.endswith("\n") or not text else result[:-1]


_GUARD_ADDITION = '''

# ---- grading edition: appended by autograder/edition/edition.py ------------------------------------------
# The references of the lab graded with this edition are stubs (mlsys_lib/testing/_edition.py lists
# them). A test that guards anything else finds a reference that is still here: the lab's
# references.txt is stale, and this says so instead of grading with the reference present.
import functools as _functools

from ._edition import KEPT as _EDITION_KEPT, LAB as _EDITION_LAB, REMOVED as _EDITION_REMOVED

_library_reference_guard = reference_guard


@_functools.wraps(_library_reference_guard)
def reference_guard(*references: Callable) -> contextlib.AbstractContextManager[None]:
    for reference in references:
        func = _as_function(reference)
        key = f"{func.__module__}:{func.__qualname__}"
        if key not in _EDITION_REMOVED and key not in _EDITION_KEPT:
            raise RuntimeError(f"reference {key} is guarded by the tests but still present in the grading "
                               f"edition of {_EDITION_LAB}: run `mlsys course references {_EDITION_LAB}`")
    return _library_reference_guard(*references)
'''


def _edition_module(lab: str, removals: Sequence[Removal], kept: Iterable[str]) -> str:
    keys = "".join(f"    {r.key!r},\n" for r in sorted(removals, key=lambda r: r.key))
    kept_keys = "".join(f"    {key!r},\n" for key in sorted(kept))
    return (f'"""Generated by autograder/edition/edition.py: this mlsys_lib is the grading edition for {lab}."""\n\n'
            f"LAB = {lab!r}\n\n#: module:qualname of every function whose body is a stub here.\n"
            f"REMOVED = frozenset({{\n{keys}}})\n\n"
            f"#: Guarded references the lab's tests also need working (its manifest's 'keep' lines).\n"
            f"KEPT = frozenset({{\n{kept_keys}}})\n")


# ---- building ------------------------------------------------------------------------------------------

def _package_files(package: Path) -> list[Path]:
    return sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".pyo"))


def fingerprint(lab: str, references: Sequence[str], package: Path = PACKAGE) -> str:
    """Hash of what an edition is made of: the package's files, the references, this builder, Python."""
    digest = hashlib.sha256()
    builder = [Path(__file__), Path(__file__).with_name("references.py")]
    for path in _package_files(package):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    for path in builder:
        digest.update(path.read_bytes())
    digest.update("\n".join([lab, *sorted(references), sys.version]).encode())
    return digest.hexdigest()


def _read_edition(folder: Path) -> dict | None:
    try:
        return json.loads((folder / EDITION_FILE).read_text())
    except (OSError, ValueError):
        return None


def build_edition(lab: str, dest: Path, *, references: Sequence[str] | None = None) -> Path:
    """Write the grading edition of ``mlsys_lib`` for ``lab`` into ``dest``; return ``dest/mlsys_lib``.

    Put ``dest`` first on ``sys.path`` (or bind ``dest/mlsys_lib`` over the library) to use it.
    ``references`` replaces the lab's manifest (default: ``solutions/<lab>/references.txt``). An
    existing edition in ``dest`` with the same fingerprint is reused as it is; an outdated one is
    replaced. Raises ``ValueError`` for an unknown lab, a missing manifest or a manifest line that
    names nothing, and refuses to replace a non-empty ``dest`` that is not an edition.
    """
    check_lab(lab)
    manifest = read_manifest(lab) if references is None else None
    references = manifest.removed if manifest else list(references)
    kept = sorted(manifest.kept) if manifest else []
    dest = Path(dest).absolute()
    stamp = fingerprint(lab, references + [f"keep {key}" for key in kept])
    existing = _read_edition(dest)
    if existing and existing.get("fingerprint") == stamp and (dest / PACKAGE_NAME).is_dir():
        return dest / PACKAGE_NAME
    if dest.exists() and existing is None and (not dest.is_dir() or any(dest.iterdir())):
        raise ValueError(f"{dest} exists and is not a grading edition (no {EDITION_FILE}); refusing to replace it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{dest.name}.building-", dir=dest.parent))
    try:
        _write_edition(lab, references, kept, stamp, building)
        _install(building, dest, stamp)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return dest / PACKAGE_NAME


def _not_edition_files(folder: str, names: list[str]) -> set[str]:
    """For ``shutil.copytree``: skip byte code of other Pythons or optimization levels. Numba's caches
    (``.nbi``/``.nbc``) come along: the kernel seeds its private Numba cache with them
    (:func:`autograder.sandbox.kernel.start.seed_numba_cache`); those of stubbed modules are stale by their
    source's time and size, which Numba checks."""
    if Path(folder).name != "__pycache__":
        return {n for n in names if n.endswith((".pyc", ".pyo"))}
    tag = f".{sys.implementation.cache_tag}.pyc"
    return {n for n in names if n.endswith((".pyc", ".pyo")) and (not n.endswith(tag) or ".opt-" in n)}


def write_stubbed_package(source: PackageSource, removals: Sequence[Removal], folder: Path, *, lab: str,
                          ignore: Callable[[str, list[str]], set[str]],
                          message: Callable[[Removal], str] | None = None) -> Path:
    """Copy ``source``'s package into ``folder`` (``shutil.copytree``'s ``ignore`` says what stays out)
    with the body of every removal a stub (:func:`stub_module`); return the copy's package folder.

    ``lab`` names the build in errors and, without ``message``, in the grading edition's stubs.
    """
    package = folder / source.package.name
    shutil.copytree(source.package, package, ignore=ignore)
    by_module: dict[str, list[Removal]] = {}
    for removal in removals:
        by_module.setdefault(removal.definition.module, []).append(removal)
    for module_name, module_removals in by_module.items():
        module = source.modules[module_name]
        text = stub_module(module.text, module_removals, lab, message)
        try:
            ast.parse(text)
        except SyntaxError as error:  # a builder bug: say where, do not ship it
            raise RuntimeError(f"stubbing {module.path} for {lab} gave invalid Python: {error}") from None
        (folder / module.path).write_text(text, encoding="utf-8")
    return package


def _write_edition(lab: str, references: Sequence[str], kept: Sequence[str], stamp: str, folder: Path) -> None:
    """Copy the package into ``folder``, stub the removals, add the guard check, byte-compile."""
    source = PackageSource(PACKAGE)
    removals = plan_removal(source, references, notebook_names(lab))
    package = write_stubbed_package(source, removals, folder, lab=lab, ignore=_not_edition_files)
    (package / EDITION_MODULE).write_text(_edition_module(lab, removals, kept), encoding="utf-8")
    guard = package / GUARD_MODULE
    guard.write_text(guard.read_text(encoding="utf-8") + _GUARD_ADDITION, encoding="utf-8")
    # The library's own byte code is copied with the sources (their times too): compileall redoes only
    # what is missing or out of date, the stubbed modules at least.
    if not compileall.compile_dir(str(package), quiet=2):
        raise RuntimeError(f"the grading edition of {lab} does not byte-compile")
    record = {
        "lab": lab, "fingerprint": stamp, "package": str(PACKAGE), "kept": list(kept),
        "removed": [{"name": r.key, "file": str(r.definition.path), "line": r.definition.first_line,
                     "reason": r.reason} for r in sorted(removals, key=lambda r: r.key)],
    }
    (folder / EDITION_FILE).write_text(json.dumps(record, indent=1) + "\n")


def _install(building: Path, dest: Path, stamp: str) -> None:
    """Rename the finished ``building`` folder to ``dest``, unless a process beside us got there first
    with the same edition; an outdated ``dest`` is moved aside and removed."""
    for _ in range(5):
        try:
            os.rename(building, dest)  # atomic; fails while dest is a non-empty folder
            return
        except OSError:
            current = _read_edition(dest)
            if current and current.get("fingerprint") == stamp:
                return  # an identical edition is there: ours is thrown away
            if current is None and dest.exists() and any(dest.iterdir()):
                raise ValueError(f"{dest} exists and is not a grading edition; refusing to replace it") from None
        outdated = Path(tempfile.mkdtemp(prefix=f".{dest.name}.outdated-", dir=dest.parent))
        try:
            os.rename(dest, outdated / "edition")
        except FileNotFoundError:
            pass  # another process moved it already
        shutil.rmtree(outdated, ignore_errors=True)
    raise RuntimeError(f"could not install the grading edition into {dest}: other builds keep replacing it")


def read_edition(dest: Path) -> dict:
    """The ``EDITION.json`` record of the edition in ``dest``; ``ValueError`` if there is none."""
    record = _read_edition(Path(dest))
    if record is None:
        raise ValueError(f"{dest} holds no grading edition ({EDITION_FILE} missing or unreadable)")
    return record
