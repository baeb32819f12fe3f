"""The student kit for a lab: its mlsys_lib wheel holds no body of the lab's or a later lab's
references (stubs that name the lab instead), the lower labs stay finished and working, a kit whose
notebook would call a stub is refused, and nothing secret gets into the zip. (That every lab's kit
runs its notebook top to bottom: tests/test_kit_runs.py.)"""

import ast
import collections
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import cli
from autograder.edition.bundle import audit, bundle
from autograder.edition import kit as kit_module
from autograder.edition.references import read_manifest
from autograder.paths import LABS, REPO, lab_names

FIRST = lab_names()[0]
# The first lab (the default kit: every exercise stubbed), one in the middle, the last (every lower lab finished).
KIT_LABS = [FIRST, "lab03_graph_opt", "lab08_parallelism"]


@pytest.fixture(scope="module")
def kits(tmp_path_factory):
    """lab -> (the Kit, the folder its wheel is unzipped into, the wheel's member -> its bytes).

    Each kit runs its lab's notebook once and builds a wheel: seconds each."""
    root = tmp_path_factory.mktemp("kits")
    built = {}
    for lab in KIT_LABS:
        kit = bundle(root / f"{lab}.zip", None if lab == FIRST else lab)
        with zipfile.ZipFile(kit.path) as archive:
            (wheel,) = [n for n in archive.namelist() if n.endswith(".whl")]
            with zipfile.ZipFile(io.BytesIO(archive.read(wheel))) as inner:
                inner.extractall(root / lab)
                members = {name: inner.read(name) for name in inner.namelist()}
        built[lab] = (kit, root / lab, members)
    return built


# ---- an oracle of what each reference's body is, from the repository's own mlsys_lib ------------------

def _function(key):
    """The repository's function a manifest line names (a property's getter, a method's function)."""
    module, _, qualname = key.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = vars(obj)[part] if isinstance(obj, type) else getattr(obj, part)
    obj = getattr(obj, "fget", None) or getattr(obj, "__func__", None) or obj
    if not inspect.isfunction(obj):  # a wrapper object (a kernel's HostOp) holding the function
        obj = next(v for v in vars(obj).values() if inspect.isfunction(v) and v.__qualname__ == qualname)
    assert Path(inspect.getfile(obj)).is_relative_to(REPO / "mlsys_lib"), f"{key} is not the repository's"
    return obj


def _code_lines(text):
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


@pytest.fixture(scope="module")
def distinctive_lines():
    """key -> the lines of its body (after the docstring) that appear nowhere else in the package."""
    everywhere = collections.Counter(line for path in (REPO / "mlsys_lib").rglob("*.py")
                                     for line in _code_lines(path.read_text()))
    found = {}
    for key in {key for lab in lab_names() for key in read_manifest(lab).guarded}:
        source = textwrap.dedent(inspect.getsource(_function(key)))
        node = ast.parse(source).body[0]
        body = node.body[1:] if ast.get_docstring(node, clean=False) is not None else node.body
        own = collections.Counter(_code_lines("\n".join(source.splitlines()[body[0].lineno - 1:]))) if body else {}
        found[key] = [line for line, n in own.items() if everywhere[line] == n]
    return found


def _owners(lab):
    """Every reference a lab from ``lab`` on guards -> the first such lab."""
    owner = {}
    for later in lab_names()[lab_names().index(lab):]:
        for key in read_manifest(later).guarded:
            owner.setdefault(key, later)
    return owner


def _wheel_text(members):
    """Every file of the wheel as code lines, one file after another, each line between newlines."""
    return "\n" + "\n".join(line for data in members.values()
                            for line in _code_lines(data.decode("utf-8", "replace"))) + "\n"


# ---- the library in the kit ---------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("lab", KIT_LABS)
def test_kit_holds_no_body_of_its_labs_references_and_every_body_of_the_lower_labs(kits, distinctive_lines, lab):
    kit, _, members = kits[lab]
    text = _wheel_text(members)
    assert not [name for name in members if name.endswith((".pyc", ".pyo")) or "__pycache__" in name]
    owner = _owners(lab)
    answers = set(read_manifest(lab).removed)
    assert not answers & set(kit.plan.spared), "the kit spares an answer of its own lab"
    leaked = {key: [line for line in distinctive_lines[key] if f"\n{line}\n" in text]
              for key in owner if key not in kit.plan.spared}
    assert not {key: lines for key, lines in leaked.items() if lines}
    assert set(owner) - set(kit.plan.spared) <= set(kit.plan.removed)
    lower = {key for earlier in lab_names()[:lab_names().index(lab)] for key in read_manifest(earlier).guarded}
    for key in (lower - set(owner)) | set(kit.plan.spared):  # finished: every line of the body is there
        missing = [line for line in distinctive_lines[key] if f"\n{line}\n" not in text]
        assert not missing, f"{key} should be finished in the kit for {lab}, lacks {missing}"
    assert lab == FIRST or lower - set(owner)


@pytest.mark.slow
def test_kit_spares_the_keeps_its_released_notebook_runs_and_stubs_the_rest(kits):
    # Lab 3's discover and traffic are kept for hidden tests, and its demo cells run them too: they stay;
    # batch_norm_scale_shift is kept for hidden tests only: it goes. Lab 8's notebook runs GPipe and
    # 1F1B through make_schedule, never the naive or interleaved schedule.
    spared = {lab: set(kit.plan.spared) for lab, (kit, *_) in kits.items()}
    removed = {lab: set(kit.plan.removed) for lab, (kit, *_) in kits.items()}
    assert {"mlsys_lib.graph.discovery:discover", "mlsys_lib.graph.cost:traffic"} <= spared["lab03_graph_opt"]
    assert "mlsys_lib.graph.ops:batch_norm_scale_shift" in removed["lab03_graph_opt"]
    assert {"mlsys_lib.parallel.pipeline.schedules:make_schedule",
            "mlsys_lib.parallel.pipeline.schedules:_gpipe"} <= spared["lab08_parallelism"]
    assert {"mlsys_lib.parallel.pipeline.schedules:_naive",
            "mlsys_lib.parallel.pipeline.schedules:_interleaved"} <= removed["lab08_parallelism"]
    # the first lab's kit spares only what its compact tests run the student's compact on
    assert spared[FIRST] == {"mlsys_lib.tensor.strides:compact_strides", "mlsys_lib.tensor.strides:index_to_position"}


_IN_THE_KIT = r'''
import importlib, inspect, json, sys
import ml_dtypes
import numpy as np
import mlsys_lib

folder, stubs, lower = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3].split(",")
assert mlsys_lib.__file__.startswith(folder), mlsys_lib.__file__
wrong = {}
for key, lab in stubs.items():
    module, _, qualname = key.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = vars(obj)[part] if isinstance(obj, type) else getattr(obj, part)
    func = inspect.unwrap(getattr(obj, "fget", None) or getattr(obj, "__func__", None) or obj)
    if not inspect.isfunction(func):  # a wrapper object (a kernel's HostOp) holding the function
        func = next(v for v in vars(func).values() if inspect.isfunction(v) and v.__qualname__ == qualname)
    params = inspect.signature(func).parameters.values()
    args = [None for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    kwargs = {p.name: None for p in params if p.default is p.empty and p.kind is p.KEYWORD_ONLY}
    try:
        func(*args, **kwargs)
        wrong[key] = "returned"
    except NotImplementedError as error:
        if f"an exercise of {lab}" not in str(error) or f"labs/{lab}/{lab}.ipynb" not in str(error):
            wrong[key] = str(error)
    except Exception as error:
        wrong[key] = repr(error)
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 4))
from mlsys_lib.tensor import compact_strides, from_numpy
assert compact_strides((2, 3, 4)) == tuple(s // x.itemsize for s in x.strides)
if "lab01_tensors" in lower:
    view = from_numpy(x).permute(2, 0, 1)
    assert np.array_equal(view.compact().numpy(), np.transpose(x, (2, 0, 1)))
    assert view.compact().strides == tuple(s // x.itemsize for s in np.transpose(x, (2, 0, 1)).copy().strides)
if "lab02_autodiff" in lower:
    from mlsys_lib.autodiff import Tensor, grad
    t = Tensor(x, requires_grad=True)
    (g,) = grad((t * t).sum(), t)
    assert np.allclose(g.numpy(), 2 * x)
if "lab05_precision" in lower:
    from mlsys_lib.precision.formats import BF16, FP16
    assert FP16.max == float(np.finfo(np.float16).max) and BF16.max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert FP16.min_subnormal == float(np.finfo(np.float16).smallest_subnormal)
print(json.dumps(wrong))
'''


@pytest.mark.slow
@pytest.mark.parametrize("lab", KIT_LABS)
def test_kit_stubs_raise_naming_their_lab_and_lower_labs_work(kits, lab, tmp_path):
    kit, folder, _ = kits[lab]
    stubs = {key: owner for key, owner in _owners(lab).items() if key not in kit.plan.spared}
    lower = lab_names()[:lab_names().index(lab)]
    env = dict(os.environ, PYTHONPATH=str(folder), PYTHONDONTWRITEBYTECODE="1", NUMBA_CACHE_DIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", _IN_THE_KIT, str(folder), json.dumps(stubs), ",".join(lower)],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1]) == {}


_CALLS_A_STUB = """from mlsys_lib.graph import Rule, backtracking_optimize
from mlsys_lib.graph.generate import matmul_chain
backtracking_optimize(matmul_chain(), [Rule.parse("matmul(matmul(A, B), C) -> matmul(A, matmul(B, C))")])"""


@pytest.mark.slow
def test_bundle_refuses_a_kit_whose_demo_calls_a_stub_naming_the_cell(tmp_path, monkeypatch):
    # Lab 3's release with one more demo cell, which calls the library's backtracking search (an answer of lab 3 the
    # kit stubs) instead of a function of the notebook: the kit is refused, naming that cell and the reference.
    lab = "lab03_graph_opt"
    release = nbformat.read(LABS / lab / f"{lab}.ipynb", as_version=4)
    release.cells.append(nbformat.v4.new_code_cell(_CALLS_A_STUB))
    (tmp_path / "labs" / lab).mkdir(parents=True)
    nbformat.write(release, tmp_path / "labs" / lab / f"{lab}.ipynb")
    monkeypatch.setattr(kit_module, "LABS", tmp_path / "labs")
    with pytest.raises(RuntimeError) as refused:
        bundle(tmp_path / "kit.zip", lab)
    cell = len(release.cells) - 1
    assert f"student kit for {lab} refused" in str(refused.value)
    assert f"cell {cell} calls mlsys_lib.graph.search.backtracking_optimize." in str(refused.value)
    assert not (tmp_path / "kit.zip").exists()


# ---- the zip --------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_default_kit_is_for_the_first_lab_and_holds_no_secret(kits):
    kit, *_ = kits[FIRST]
    assert kit.plan.lab == FIRST
    with zipfile.ZipFile(kit.path) as archive:
        names = archive.namelist()
        readme = archive.read("mlsys-course/README.md").decode()
    assert "mlsys-course/environment.yml" in names
    assert f"mlsys-course/mlsys_lib-0.1.0+{FIRST.replace('_', '.')}-py3-none-any.whl" in names
    for lab in lab_names():
        assert f"mlsys-course/labs/{lab}/{lab}.ipynb" in names
    assert f"This kit is for **{FIRST}**" in readme and "{lab}" not in readme
    assert audit(kit.path, kit.plan.removed) == []


def test_bundle_audit_catches_secrets(tmp_path):
    planted = tmp_path / "planted.zip"
    with zipfile.ZipFile(planted, "w") as archive:
        archive.writestr("mlsys-course/labs/x.ipynb", "### BEGIN HIDDEN TESTS\nassert True\n")
        archive.writestr("mlsys-course/solutions/lab.ipynb", "{}")
    problems = audit(planted)
    assert any("HIDDEN TESTS" in p for p in problems) and any("instructor-only" in p for p in problems)


@pytest.mark.parametrize("member", ["mlsys_lib/tensor/strides.py",
                                    "mlsys_lib/tensor/__pycache__/strides.cpython-311.pyc"])
def test_bundle_audit_catches_a_reference_body_or_byte_code_in_the_wheel(tmp_path, member):
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as inner:
        inner.writestr(member, (REPO / "mlsys_lib/tensor/strides.py").read_bytes())
    planted = tmp_path / "planted.zip"
    with zipfile.ZipFile(planted, "w") as archive:
        archive.writestr("mlsys-course/mlsys_lib-0.1.0-py3-none-any.whl", wheel.getvalue())
    problems = audit(planted, ["mlsys_lib.tensor.strides:broadcast_strides"])
    if member.endswith(".py"):
        assert problems == [f"mlsys-course/mlsys_lib-0.1.0-py3-none-any.whl: {member} holds the body of the "
                            "removed reference mlsys_lib.tensor.strides:broadcast_strides"]
    else:
        assert problems == [f"mlsys-course/mlsys_lib-0.1.0-py3-none-any.whl: contains byte code {member}"]


def test_bundle_for_an_unknown_lab_is_refused_by_name(capsys):
    assert cli.main(["bundle", "--for", "lab99_nothing"]) == 2
    assert "unknown lab 'lab99_nothing'" in capsys.readouterr().err


def test_make_bundle_passes_lab_on():
    def dry_run(*args):
        return subprocess.run(["make", "-n", "bundle", *args], cwd=REPO, capture_output=True, text=True).stdout
    assert "mlsys course bundle --for lab03_graph_opt" in dry_run("LAB=lab03_graph_opt")
    assert [line for line in dry_run().splitlines() if "mlsys course bundle" in line][0].rstrip().endswith(
        "mlsys course bundle")
