"""The static tamper check of a submission (autograder.intake.sanitize.tamper_flags) knows every test helper."""

import nbformat

import mlsys_lib.testing
from autograder.intake.sanitize import TEST_HELPERS, tamper_flags


def test_every_testing_helper_is_protected():
    assert TEST_HELPERS == set(mlsys_lib.testing.__all__)


def test_rebinding_a_helper_is_flagged_and_using_it_is_not():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("from mlsys_lib.testing import frozen, deterministic\n"
                                                "with frozen(x=1):\n    pass"),
                      nbformat.v4.new_code_cell("import contextlib\nfrozen = contextlib.nullcontext\n"
                                                "def deterministic(run, *a, **k):\n    return run(None)")]
    flags = tamper_flags(notebook)
    assert any("rebinds the test helper frozen" in f for f in flags)
    assert any("redefines the test helper deterministic" in f for f in flags)
    assert not any("cell 0" in f for f in flags)
