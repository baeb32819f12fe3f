"""Set-up files agree with each other: environment.yml mirrors pyproject's dependencies."""

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_names_the_same_dependencies_as_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_name(r) for r in extra}
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = [r for d in env["dependencies"] if isinstance(d, dict) for r in d.get("pip", [])]  # wheels only on PyPI
    listed = {_name(d) for d in env["dependencies"] + pip if isinstance(d, str)} - {"python", "pip"}
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"
    assert "python=3.11" in env["dependencies"]


def test_readme_gives_the_two_commands_and_ci_runs_the_tests():
    readme = (REPO / "README.md").read_text()
    assert "make course" in readme and "make test" in readme
    assert "make test" in (REPO / ".ci" / "run").read_text()

