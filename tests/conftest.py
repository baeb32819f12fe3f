"""Shared test set-up: headless plotting, and a private course directory per test session."""

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def course_root(tmp_path_factory):
    """An empty live course directory (gradebook, submissions, feedback) for the session's tests."""
    return tmp_path_factory.mktemp("course")
