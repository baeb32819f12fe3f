"""No import circles between the files of ``mlsys_lib`` and ``autograder``, and the course tool's
imports only go down its grading pipeline.

The graph is read from the source with :mod:`ast`, no third-party tool: an edge ``a -> b`` for every
``import`` or ``from ... import`` in file ``a`` (at module level or inside a function: an import hidden
in a function is still a circle in the design) that names module ``b`` of the same project. ``from
package import name`` is an edge to ``package.name`` when that is a module, else to ``package``
itself. A package's ``__init__`` is the module of the package's name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mlsys_lib", "autograder")


def project_modules(root: Path, packages: tuple[str, ...]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's ``__init__``) for every ``.py`` under ``packages``."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            modules[".".join(parts)] = (path, is_package)
    return modules


def imported_modules(tree: ast.AST, package: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the imports in ``tree`` name; ``package`` resolves relative ones."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                module = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                found.add(submodule if submodule in modules else module)
    return found & modules


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (an edge to itself left out)."""
    modules = project_modules(root, packages)
    graph = {}
    for module, (path, is_package) in modules.items():
        package = module if is_package else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        graph[module] = imported_modules(tree, package, set(modules)) - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_finds_a_circle_through_relative_and_function_local_imports(tmp_path):
    write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from . import b\n",
        "pkg/b.py": "def f():\n    from .sub.c import g\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "import pkg.a\nimport numpy\n",
        "pkg/d.py": "from pkg.a import thing\n",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.a"}
    assert graph["pkg.d"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_a_package_importing_its_own_modules_is_no_circle(tmp_path):
    write_package(tmp_path, {
        "pkg/__init__.py": "from .a import f\nfrom . import b\n",
        "pkg/a.py": "from .b import g\n",
        "pkg/b.py": "import os\n",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg"] == {"pkg.a", "pkg.b"}
    assert cycles(graph) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package):
    graph = import_graph(ROOT, PACKAGES)
    found = [c for c in cycles(graph) if c[0].split(".")[0] == package]
    assert not found, "import circles (each line: the modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


# autograder's stages in pipeline order, after the shared base; the course driver and the CLI on top
AUTOGRADER_ORDER = ("paths", "cells", "config", "intake", "edition", "sandbox", "run", "feedback", "report",
                    "authoring", "course", "cli")


def upward_imports(graph: dict[str, set[str]], order: tuple[str, ...]) -> list[str]:
    """Each import of ``graph`` that goes from a stage to a later one (stage: a module's second name)."""
    def stage(module: str) -> int:
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in order:
            raise AssertionError(f"{module} belongs to no stage of {order}")
        return order.index(parts[1])
    return [f"{a} -> {b}" for a in sorted(graph) for b in sorted(graph[a])
            if a.count(".") and stage(b) > stage(a)]


def test_upward_imports_are_found(tmp_path):
    write_package(tmp_path, {
        "tool/__init__.py": "",
        "tool/intake/__init__.py": "",
        "tool/intake/read.py": "from ..report.table import rows\n",
        "tool/report/__init__.py": "",
        "tool/report/table.py": "from tool.intake import read\n",
    })
    graph = import_graph(tmp_path, ("tool",))
    assert upward_imports(graph, ("intake", "report")) == ["tool.intake.read -> tool.report.table"]


def test_autograder_imports_only_go_down_the_pipeline():
    graph = {m: targets for m, targets in import_graph(ROOT, ("autograder",)).items()}
    assert upward_imports(graph, AUTOGRADER_ORDER) == []
    packages = [m for m, (_, is_package) in project_modules(ROOT, ("autograder",)).items() if is_package]
    importing = [m for m in packages if graph[m] and m != "autograder.sandbox.kernel"]
    assert importing == [], "a stage package's __init__ only describes its stage"
    kernel = [f"{m} -> {t}" for m in graph if m.startswith("autograder.sandbox.kernel")
              for t in graph[m] if not t.startswith("autograder.sandbox.kernel")]
    assert kernel == [], "what runs inside the grading kernel imports nothing else of autograder"


def test_every_autograder_package_says_what_enters_and_leaves_it():
    for module, (path, is_package) in project_modules(ROOT, ("autograder",)).items():
        if is_package:
            doc = ast.get_docstring(ast.parse(path.read_text()))
            assert doc and len(doc.split()) >= 15, f"{path} has no docstring describing its stage"
