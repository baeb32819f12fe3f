"""The ``mlsys`` command.

``mlsys doctor``     what this installation runs on (versions, CPU cores, GPU or simulator)
``mlsys course ...`` the instructor's course tool; it lives in the course repository's
                     ``autograder/`` (not in the student wheel), found from the current folder
                     upwards or from ``$MLSYS_COURSE_REPO``.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path


def find_course_repo(start: Path | None = None) -> Path | None:
    """The course repository: ``$MLSYS_COURSE_REPO``, else the first folder upwards from ``start``
    (default: the current folder, then this package's folder) holding ``autograder/cli.py``."""
    if os.environ.get("MLSYS_COURSE_REPO"):
        return Path(os.environ["MLSYS_COURSE_REPO"]).resolve()
    for origin in ([start] if start else [Path.cwd(), Path(__file__).resolve().parent]):
        for folder in [origin, *origin.parents]:
            if (folder / "autograder" / "cli.py").is_file():
                return folder
    return None


def doctor() -> int:
    """Print what the course runs on; returns 0."""
    import numba
    import numpy

    print(f"mlsys_lib   {__import__('mlsys_lib').__version__}")
    print(f"python      {platform.python_version()} ({sys.executable})")
    print(f"numpy       {numpy.__version__}")
    print(f"numba       {numba.__version__} (CPU threads: {numba.config.NUMBA_NUM_THREADS})")
    print(f"cpu cores   {os.cpu_count()}")
    from mlsys_lib.kernels import device_info

    info = device_info()
    print(f"cuda        {info['backend']}: {info['device']} ({info['reason']})")
    repo = find_course_repo()
    print(f"course repo {repo if repo else 'not found (student install)'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        return doctor()
    if argv[:1] == ["course"]:
        repo = find_course_repo()
        if repo is None:
            print("mlsys course: no course repository here (a folder with autograder/); "
                  "run it inside the repository or set MLSYS_COURSE_REPO", file=sys.stderr)
            return 2
        sys.path.insert(0, str(repo))
        from autograder.cli import main as course_main

        return course_main(argv[1:])
    print(__doc__.strip(), file=sys.stderr)
    return 0 if argv[:1] in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    sys.exit(main())
