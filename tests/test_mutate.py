"""``mlsys course mutate``: the mutants made of an answer cell, and what becomes of them when a tiny
nbgrader notebook (no real lab) runs with each one in place of its answer."""

import ast
import hashlib
import os
import signal
import time

import nbformat
import pytest

from autograder import cli, paths
from autograder.authoring import mutate
from autograder.authoring.mutate import (EQUIVALENT, KILLED, SURVIVED, TIMED_OUT, Cell, failing_tests, format_report,
                               generate_mutants, last_affected_test, mutate_notebook, run_forked, select_mutants)

CLAMP = '''def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    ### BEGIN SOLUTION
    if x < lo:
        x = lo
    elif x > hi:
        x = hi
    return x
    ### END SOLUTION
'''

COUNT_UP = '''def count_up(n, limit):
    """[0, 1, ..., n - 1], each at most limit."""
    ### BEGIN SOLUTION
    out = []
    i = 0
    while i < n:
        out.append(clamp(i, 0, limit))
        i += 1
    return out
    ### END SOLUTION
'''

WEAK_TEST = "assert clamp(5, 0, 10) == 5"
# It never clips from above: only count_up's test catches an answer that forgets to.
STRONG_TEST = "### BEGIN HIDDEN TESTS\nassert clamp(-3, 0, 10) == 0\nassert clamp(0, 0, 10) == 0\n" \
              "assert clamp(10, 0, 10) == 10\n### END HIDDEN TESTS"
COUNT_UP_TEST = "assert count_up(4, 2) == [0, 1, 2, 2]\nassert count_up(0, 5) == []"

# Hand-written: the clamp answer with one edit, as ast.unparse writes a cell (comments gone).
CLAMP_LT_TO_LE = '''def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    if x <= lo:
        x = lo
    elif x > hi:
        x = hi
    return x'''
CLAMP_GT_TO_GE = CLAMP_LT_TO_LE.replace("x <= lo", "x < lo").replace("x > hi", "x >= hi")
CLAMP_NO_UPPER_CLIP = CLAMP_LT_TO_LE.replace("x <= lo", "x < lo").replace("x = hi", "pass")
COUNT_UP_NO_INCREMENT = '''def count_up(n, limit):
    """[0, 1, ..., n - 1], each at most limit."""
    out = []
    i = 0
    while i < n:
        out.append(clamp(i, 0, limit))
        pass
    return out'''


def _sha(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:10]


def _cell(source: str, **nbgrader) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "task": False, **nbgrader}
    return cell


def _answer(grade_id: str, source: str):
    return _cell(source, solution=True, grade=False, grade_id=grade_id)


def _test(grade_id: str, source: str, points: int = 1):
    return _cell(source, solution=False, grade=True, grade_id=grade_id, points=points, locked=True)


def write_notebook(folder, name: str = "tiny.ipynb"):
    """The tiny lab: a prefix that logs each run of it, clamp (a weak and a strong test), count_up."""
    log = folder / "prefix.log"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# A tiny lab"),
        _cell(f"import math\nwith open({str(log)!r}, 'a') as log:\n    log.write('prefix ran\\n')"),
        _answer("clamp", CLAMP),
        _test("test_clamp_weak", WEAK_TEST),
        _test("test_clamp", STRONG_TEST, points=2),
        nbformat.v4.new_markdown_cell("Now use it."),
        _cell("print('between the exercises')"),
        _answer("count_up", COUNT_UP),
        _test("test_count_up", COUNT_UP_TEST),
    ]
    path = folder / name
    nbformat.write(notebook, path)
    return path


def _by_source(results):
    return {r.mutant.source: r for r in results}


# ---- the mutants ------------------------------------------------------------------------------------

def _sources(code: str) -> set[str]:
    """The syntactic mutants of ``code`` (the semantic ones are tested at the end)."""
    return {m.source for m in generate_mutants(code, "ex", "ast")}


def test_arithmetic_is_swapped_and_the_id_hashes_the_mutated_cell():
    mutants = generate_mutants("def f(a, b):\n    return a + b", "add")
    assert [(m.source, m.id, m.operator, m.line) for m in mutants] == [
        ("def f(a, b):\n    return a - b", "add:" + _sha("def f(a, b):\n    return a - b"), "arithmetic", 2)]
    assert "line 2" in mutants[0].description and "a + b" in mutants[0].description


def test_comparison_boundary_and_direction_and_constants_off_by_one():
    assert _sources("def g(x):\n    return x < 3") == {
        "def g(x):\n    return x <= 3", "def g(x):\n    return x > 3",
        "def g(x):\n    return x < 4", "def g(x):\n    return x < 2"}


def test_range_bounds():
    assert _sources("def h(n):\n    return [i for i in range(n)]") == {
        "def h(n):\n    return [i for i in range(n + 1)]", "def h(n):\n    return [i for i in range(n - 1)]"}
    # a literal bound is folded: range(1 + 1) would be the same mutant as the constant's range(2)
    assert _sources("def h(n):\n    return range(1, n)") == {
        "def h(n):\n    return range(2, n)", "def h(n):\n    return range(0, n)",
        "def h(n):\n    return range(1, n + 1)", "def h(n):\n    return range(1, n - 1)",
        "def h(n):\n    return range(n, 1)"}


def test_slice_bounds_shifted_or_dropped_without_duplicates():
    assert _sources("def s(a, n):\n    return a[1:n]") == {
        "def s(a, n):\n    return a[2:n]", "def s(a, n):\n    return a[0:n]", "def s(a, n):\n    return a[:n]",
        "def s(a, n):\n    return a[1:n + 1]", "def s(a, n):\n    return a[1:n - 1]", "def s(a, n):\n    return a[1:]"}


def test_calls_copies_in_place_and_dtypes():
    code = "def c(x, y):\n    x += y\n    z = y.copy()\n    x = x * z\n    return np.float64(min(x, z))"
    body = code.split("\n")
    expected_lines = {
        1: ["    x -= y", "    pass", "    x = x + y"],
        2: ["    pass", "    z = y"],
        3: ["    pass", "    x *= z", "    x = x / z"],
        4: ["    return np.float32(min(x, z))", "    return np.float64(min(z, x))", "    return np.float64(max(x, z))"],
    }
    expected = {"\n".join(body[:i] + [line] + body[i + 1:]) for i, lines in expected_lines.items() for line in lines}
    assert _sources(code) == expected


def test_boolean_not_and_raise_but_never_docstrings_or_f_strings():
    code = 'def d(x):\n    """Doc 1."""\n    if not x and x > 2:\n        raise ValueError(f"bad {x + 1}")\n    return x'
    head, tail = 'def d(x):\n    """Doc 1."""\n', '\n        raise ValueError(f\'bad {x + 1}\')\n    return x'
    conditions = ["not x or x > 2", "x and x > 2", "not x and x >= 2", "not x and x < 2", "not x and x > 3",
                  "not x and x > 1"]
    expected = {f"{head}    if {c}:{tail}" for c in conditions}
    expected.add(f"{head}    if not x and x > 2:\n        pass\n    return x")
    assert _sources(code) == expected


def test_every_mutant_parses_and_ids_are_stable_and_unique():
    for code in (CLAMP, COUNT_UP):
        first, second = generate_mutants(code, "ex"), generate_mutants(code, "ex")
        assert [m.id for m in first] == [m.id for m in second]
        assert len({m.id for m in first}) == len(first) and len({m.source for m in first}) == len(first)
        for m in first:
            ast.parse(m.source)
            assert m.id == f"ex:{_sha(m.source)}"


def test_limit_takes_one_operator_after_another_in_source_order():
    code = "def c(x, y):\n    x += y\n    z = y.copy()\n    x = x * z\n    return np.float64(min(x, z))"
    mutants = generate_mutants(code, "ex", "ast")
    operators = {m.operator for m in mutants}
    assert operators == {"arithmetic", "drop statement", "in-place", "copy dropped", "dtype", "swap arguments", "min/max"}
    chosen = select_mutants(mutants, len(operators))
    assert sorted(m.operator for m in chosen) == sorted(operators)
    three = select_mutants(mutants, 3)
    assert {m.operator for m in three} == {"arithmetic", "copy dropped", "drop statement"}  # the first names
    assert three == [m for m in mutants if m in three] == select_mutants(mutants, 3)
    assert select_mutants(mutants, 100) == mutants


# ---- forked children ------------------------------------------------------------------------------------

def _loop_forever():
    while True:
        pass


def _crash():
    os.kill(os.getpid(), signal.SIGSEGV)


def _chatty():
    print("a child must not print")
    os.write(2, b"nor write to stderr\n")
    return {"answer": 42}


def test_children_time_out_die_or_answer_silently(capfd):
    started = time.monotonic()
    outcomes = run_forked({"loop": _loop_forever, "crash": _crash, "chatty": _chatty}, jobs=3, timeout=1.0)
    assert time.monotonic() - started < 4
    assert outcomes["loop"].problem == TIMED_OUT and outcomes["loop"].payload is None
    assert 1.0 <= outcomes["loop"].seconds < 3
    assert outcomes["crash"].problem == f"killed by signal {signal.SIGSEGV}"
    assert outcomes["chatty"].payload == {"answer": 42} and outcomes["chatty"].problem is None
    assert capfd.readouterr() == ("", "")


# ---- a whole notebook -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny lab mutated once, with an equivalent-mutants file that lists one real and one stale id."""
    folder = tmp_path_factory.mktemp("tiny")
    path = write_notebook(folder)
    (folder / "equivalent_mutants.txt").write_text(
        "# the boundaries of clamp\n\n"
        f"clamp:{_sha(CLAMP_LT_TO_LE)}  # x == lo gives lo either way\n"
        "clamp:0123456789  # a mutant of an older clamp\n")
    started = time.monotonic()
    report = mutate_notebook(path, timeout=1.0, jobs=2)
    return report, folder, time.monotonic() - started


def test_each_clamp_mutant_meets_its_fate(tiny):
    report, _, _ = tiny
    clamp = report.exercises[0]
    assert clamp.grade_id == "clamp" and clamp.own_tests == ("test_clamp_weak", "test_clamp")
    results = _by_source(clamp.results)
    assert len(results) == 6  # two comparisons twice, and two assignments dropped
    assert results[CLAMP_LT_TO_LE].status == EQUIVALENT
    assert results[CLAMP_GT_TO_GE].status == SURVIVED
    assert results[CLAMP_NO_UPPER_CLIP].status == KILLED
    assert results[CLAMP_NO_UPPER_CLIP].killed_by == ("test_count_up",)  # the later exercise's test
    no_lower_clip = CLAMP_LT_TO_LE.replace("x <= lo", "x < lo").replace("x = lo", "pass")
    assert results[no_lower_clip].killed_by == ("test_clamp",)
    wrong_way = CLAMP_LT_TO_LE.replace("x <= lo", "x > lo")
    assert results[wrong_way].killed_by == ("test_clamp_weak", "test_clamp")
    assert [clamp.count(s) for s in (KILLED, TIMED_OUT, SURVIVED, EQUIVALENT)] == [4, 0, 1, 1]
    assert clamp.score == pytest.approx(100 * 4 / 5)


def test_a_mutant_that_never_ends_times_out(tiny):
    report, _, seconds = tiny
    count_up = report.exercises[1]
    results = _by_source(count_up.results)
    assert results[COUNT_UP_NO_INCREMENT].status == TIMED_OUT
    # i -= 1, i += 0 and the dropped i += 1 loop forever; i = i + 1 and clamp(i, -1, limit) change nothing here
    assert [count_up.count(s) for s in (KILLED, TIMED_OUT, SURVIVED, EQUIVALENT)] == [10, 3, 2, 0]
    assert seconds < 10  # three 1 s time-outs, two at a time


def test_score_excludes_equivalents_and_stale_ids_are_reported(tiny):
    report, _, _ = tiny
    assert report.score == pytest.approx(100 * (4 + 10 + 3) / (6 + 15 - 1))
    assert report.stale == ["clamp:0123456789"]
    assert report.passed(85) and not report.passed(86)


def test_the_report_shows_each_survivor_with_its_diff(tiny):
    report, _, _ = tiny
    text = format_report(report)
    survivor = f"clamp:{_sha(CLAMP_GT_TO_GE)}"
    assert f"survived {survivor}" in text
    assert "-    elif x > hi:\n+    elif x >= hi:" in text
    assert f"clamp:{_sha(CLAMP_LT_TO_LE)}" not in text  # equivalent: not a survivor
    assert "stale in equivalent_mutants.txt: clamp:0123456789" in text
    assert f"killed, but not by a test of clamp (test_count_up): clamp:{_sha(CLAMP_NO_UPPER_CLIP)}" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:5]}
    assert rows["clamp"] == ["clamp", "6", "4", "0", "1", "1", "80.0%"]
    assert rows["total"] == ["total", "21", "14", "3", "3", "1", "85.0%"]
    quiet = format_report(report, quiet=True)
    assert "survived clamp:" not in quiet and "stale in" in quiet


def test_the_prefix_runs_once(tiny):
    _, folder, _ = tiny
    assert (folder / "prefix.log").read_text() == "prefix ran\n"


def test_failing_tests_of_hand_written_variants(tmp_path):
    path = write_notebook(tmp_path)
    clip_never = CLAMP_NO_UPPER_CLIP
    found = failing_tests(path, {"no_upper_clip": {"clamp": clip_never},
                                 "count_forgets_clamp": {"count_up": COUNT_UP.replace("clamp(i, 0, limit)", "i")},
                                 "both": {"clamp": clip_never, "count_up": COUNT_UP_NO_INCREMENT},
                                 "right": {"count_up": COUNT_UP}}, timeout=2.0)
    assert found["no_upper_clip"] == {"test_count_up"}, "every later test runs, not only the exercise's own"
    assert found["count_forgets_clamp"] == {"test_count_up"}
    assert found["both"] == "timed out"
    assert found["right"] == set()
    assert (tmp_path / "prefix.log").read_text() == "prefix ran\n", "the prefix ran once, children forked from it"
    with pytest.raises(ValueError, match="no answer cell"):
        failing_tests(path, {"typo": {"clammp": CLAMP}})


def test_a_failing_baseline_stops_the_exercise(tmp_path):
    path = write_notebook(tmp_path)
    notebook = nbformat.read(path, as_version=4)
    notebook.cells[8].source = "assert count_up(3, 9) == [0, 1, 2, 3]"
    nbformat.write(notebook, path)
    report = mutate_notebook(path, exercise="count_up", timeout=2.0)
    [count_up] = report.exercises
    assert count_up.results == [] and list(count_up.baseline_failures) == ["test_count_up"]
    assert count_up.baseline_failures["test_count_up"].startswith("AssertionError")
    assert not report.passed(0)


def test_cli_exit_status_follows_min_score(tmp_path, monkeypatch, capsys):
    lab = tmp_path / "lab99_tiny"
    lab.mkdir()
    write_notebook(lab, "lab99_tiny.ipynb")
    (lab / "equivalent_mutants.txt").write_text(f"clamp:{_sha(CLAMP_LT_TO_LE)}  # boundary\n")
    monkeypatch.setattr(paths, "SOLUTIONS", tmp_path)
    monkeypatch.setattr(mutate, "SOLUTIONS", tmp_path)
    options = ["mutate", "lab99_tiny", "--library", "--exercise", "clamp", "--timeout", "5"]
    assert cli.main([*options, "--min-score", "80"]) == 0  # clamp scores 4 / 5
    assert cli.main([*options, "--min-score", "81", "--quiet"]) == 1
    table = capsys.readouterr().out.splitlines()[1:4]
    assert [row.split()[0] for row in table] == ["exercise", "clamp", "total"]
    assert table[1].split()[-1] == "80.0%"


def test_a_variant_runs_up_to_the_last_test_that_can_see_it():
    cells = [Cell(source, kind, name, number) for number, (kind, name, source) in enumerate([
        ("answer", "f", "def f(x):\n    return x + 1"),
        ("test", "test_f", "assert f(1) == 2"),
        ("answer", "g", "def g(x):\n    return 2 * x"),
        ("test", "test_g", "assert g(2) == 4"),          # reads nothing f touches
        ("code", None, "table = [f(i) for i in range(3)]"),
        ("test", "test_table", "assert table == [1, 2, 3]"),  # reads table, which f made
        ("test", "test_g_again", "assert g(1) == 2"),
    ])]
    assert last_affected_test(cells, {0: cells[0].source}) == 5
    assert last_affected_test(cells, {2: cells[2].source}) == 6
    dynamic = cells[:6] + [Cell("assert globals()['g'](1) == 2", "test", "test_dynamic", 6)]
    assert last_affected_test(dynamic, {0: dynamic[0].source}) == 6  # reaches names dynamically: runs
    unparsable = cells[:6] + [Cell("assert g(1) == (", "test", "test_broken", 6)]
    assert last_affected_test(unparsable, {0: unparsable[0].source}) == 6


# ---- the semantic operators: the mistakes students make ------------------------------------------------
# Each exercise below has an answer, a weak test (values only) that every listed mutant survives, and a
# strong test (the check the lab's tests make with mlsys_lib.testing) that kills each of them.

SEMANTIC = {
    "argument in place": (
        "def sgd_step(param, grad, lr):\n    param = param - lr * grad\n    return param",
        ["param[...] = param - lr * grad"],
        "assert np.allclose(sgd_step(np.ones(3), np.ones(3), 0.5), 0.5)",
        "p, g = np.ones(3), np.ones(3)\nwith frozen(param=p, grad=g):\n    sgd_step(p, g, 0.5)"),
    "global RNG": (
        "def shuffled(n, rng):\n    return rng.permutation(n)",
        ["return np.random.permutation(n)"],
        "assert sorted(shuffled(5, np.random.default_rng(0))) == list(range(5))",
        "deterministic(lambda rng: shuffled(8, rng))"),
    "rounding": (
        "def quantize(x, scale):\n    return np.round(x / scale)",
        ["np.floor(x / scale + 0.5)", "np.copysign(np.floor(np.abs(x / scale) + 0.5), x / scale)"],
        "assert list(quantize(np.array([0.2, 1.7, -2.2]), 1.0)) == [0, 2, -2]",
        "assert list(quantize(np.array([0.5, 2.5, -1.5]), 0.25)) == [2, 10, -6]\n"
        "assert list(quantize(np.array([0.5, 1.5, -0.5]), 1.0)) == [0, 2, 0]"),
    "narrowed dtype": (
        "def total(x):\n    acc = np.zeros(1)\n    for v in x:\n        acc[0] += v\n    return acc[0]",
        ["acc = np.zeros(1, dtype=np.float32)"],
        "assert total(np.array([1.0, 2.0])) == 3.0",
        "assert total(np.array([1e8, 1.0, -1e8])) == 1.0"),
    "identity key": (
        "def distinct(nodes):\n    return len({id(n) for n in nodes})",
        ["{getattr(n, 'name', repr(n))", "{repr(n) for"],
        "assert distinct([Node('a'), Node('b')]) == 2",
        "a = Node('a')\nassert distinct([a, Node('a'), a]) == 2"),
    "default changed": (
        "def smooth(x, eps=0.001):\n    return x / (x + eps)",
        ["eps=0.01", "eps=0.0001"],
        "assert smooth(2.0, eps=0.0) == 1.0",
        "assert np.isclose(smooth(1.0), 1 / 1.001)"),
    "sign dropped": (
        "def negative(x):\n    return np.signbit(x)",
        ["return x < 0"],
        "assert negative(-2.0) and not negative(3.0)",
        "assert negative(-0.0) and not negative(0.0)"),
    "exit moved": (
        "def take_until(xs, stop):\n    out = []\n    for x in xs:\n        if x == stop:\n            break\n"
        "        out.append(x)\n    return out",
        ["        out.append(x)\n        if x == stop:\n            break", "            continue"],
        "assert take_until([1, 2, 3], 9) == [1, 2, 3]",
        "assert take_until([1, 2, 3, 2], 2) == [1]"),
}
SEMANTIC_PREFIX = ("import numpy as np\nfrom mlsys_lib.testing import deterministic, frozen\n\n"
                   "class Node:\n    def __init__(self, name):\n        self.name = name\n\n"
                   "    def __repr__(self):\n        return f'Node({self.name!r})'")


def _semantic_notebook(folder, strong: bool):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [_cell(SEMANTIC_PREFIX)]
    for number, (answer, _, weak, strict) in enumerate(SEMANTIC.values()):
        notebook.cells += [_answer(f"ex{number}", answer), _test(f"test_ex{number}_weak", weak)]
        if strong:
            notebook.cells.append(_test(f"test_ex{number}", strict))
    path = folder / ("strong.ipynb" if strong else "weak.ipynb")
    nbformat.write(notebook, path)
    return path


def test_each_semantic_operator_makes_its_mistake():
    for number, (operator, (answer, edits, _, _)) in enumerate(SEMANTIC.items()):
        made = [m for m in generate_mutants(answer, f"ex{number}", "semantic") if m.operator == operator]
        syntactic = [m.source for m in generate_mutants(answer, "x", "ast")]
        for edit in edits:
            assert any(edit in m.source for m in made), f"{operator}: no mutant contains {edit!r}: {made}"
            assert not any(edit in source for source in syntactic), f"the AST operators make {edit!r} too"


@pytest.fixture(scope="module")
def semantic_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("semantic")
    return {strong: mutate_notebook(_semantic_notebook(folder, strong), operators="semantic", timeout=5.0, jobs=2)
            for strong in (False, True)}


def test_weak_tests_let_each_semantic_mistake_survive_and_the_strong_ones_kill_it(semantic_runs):
    for number, (operator, (_, edits, _, _)) in enumerate(SEMANTIC.items()):
        for strong, report in semantic_runs.items():
            exercise = next(e for e in report.exercises if e.grade_id == f"ex{number}")
            for edit in edits:
                [result] = [r for r in exercise.results if r.mutant.operator == operator and edit in r.mutant.source]
                expected = (KILLED,) if strong else (SURVIVED,)
                assert result.status in expected, f"{operator} {edit!r} with the {'strong' if strong else 'weak'} " \
                                                  f"test: {result.status}"


def test_operators_option_picks_a_family():
    answer = SEMANTIC["rounding"][0]
    every, syntactic, semantic = (generate_mutants(answer, "q", f) for f in ("all", "ast", "semantic"))
    assert {m.id for m in every} == {m.id for m in syntactic} | {m.id for m in semantic}
    assert {m.operator for m in semantic} == {"rounding"}
    with pytest.raises(ValueError, match="unknown operator family 'smart'"):
        generate_mutants(answer, "q", "smart")


def test_cells_run_with_their_lines_in_linecache_so_frozen_names_the_argument():
    from autograder.authoring.mutate import _execute
    namespace = {}
    assert _execute("import numpy as np\nfrom mlsys_lib.testing import frozen", Cell("", "code", None, 0), namespace) is None
    answer = Cell("def step(w, g):\n    w -= g\n    return w", "answer", "step", 1)
    _execute(answer.source, answer, namespace)
    error = _execute("w, g = np.ones(2), np.ones(2)\nwith frozen(w=w, g=g):\n    step(w, g)",
                     Cell("", "test", "test_step", 2), namespace)
    assert error.startswith("AssertionError: the answer writes into its input 'w' at `w -= g`")


def test_imported_modules_lists_what_cells_import_in_order():
    # what the fork session imports before forking, so the fixtures' children share it
    sources = ["import numpy as np, os.path\nfrom scipy import stats\nfrom . import local\nfrom q import *\n"
               "def f():\n    import inner\n", "not python (", "import numpy\nfrom a.b import c, d"]
    assert mutate.imported_modules(sources) == ["numpy", "os.path", "scipy", "scipy.stats", "q", "a.b", "a.b.c",
                                                "a.b.d"]
