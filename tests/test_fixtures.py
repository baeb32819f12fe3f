"""Every lab's wrong-answer fixtures, run fast (forked from the solution notebook, on the lab's grading
edition): each loses exactly the tests its header lists, all of them tests of the exercise it gets wrong
(one mistake costs once), and every graded exercise has at least one. ``make course`` grades the same
fixtures through nbgrader; test_pipeline.py does so for a few of them."""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest

from autograder.authoring import mutate, samples
from autograder.paths import SOLUTIONS, lab_names

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("lab", lab_names())
def test_each_wrong_answer_loses_exactly_its_own_tests(lab):
    # A fresh process: check_wrong_answers forks, and a fork of this one would inherit Numba's parallel
    # thread pool if an earlier test had started it (Lab 9's prange kernels), and hang in it.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        checks = pool.submit(samples.check_wrong_answers, lab).result()
    exercises = mutate.find_exercises(mutate.read_cells(SOLUTIONS / lab / f"{lab}.ipynb"))
    covered = {grade_id for check in checks for grade_id in check.wrong.cells}
    assert covered >= {e.grade_id for e in exercises}, (
        f"exercises of {lab} without a wrong-answer fixture: {sorted({e.grade_id for e in exercises} - covered)}")
    for check in checks:
        name = f"{lab}/{check.wrong.name}"
        assert check.problem is None, f"{name} did not finish: {check.problem}"
        assert check.lost == set(check.wrong.loses), f"{name} lost {sorted(check.lost)}, must lose {check.wrong.loses}"
        assert not check.cascades, f"{name} costs tests of another exercise too: {sorted(check.cascades)}"
