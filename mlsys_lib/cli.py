"""The ``mlsys`` command.

``mlsys lab [--port N] [--no-browser]``
                     copy the labs not fetched yet into work/ (your copy: labs/ stays the
                     release) and start JupyterLab there
``mlsys lab fetch [LAB ...]``
                     only copy: each lab (default: all) not in work/ yet; a copy is never overwritten
``mlsys doctor``     what this installation runs on (versions, CPU cores, GPU or simulator)
``mlsys course ...`` the instructor's course tool; it lives in the course repository's
                     ``autograder/`` (not in the student wheel), found from the current folder
                     upwards or from ``$MLSYS_COURSE_REPO``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

from . import workspace


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


def lab_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlsys lab", description="Work on the labs in work/, a copy of the "
                                     "release labs/ that no release overwrites.")
    parser.add_argument("--port", type=int, default=None, help="JupyterLab's port (default: 8888 or the next free one)")
    parser.add_argument("--no-browser", dest="browser", action="store_false", help="open no browser tab")
    sub = parser.add_subparsers(dest="command")
    fetch = sub.add_parser("fetch", help="copy each lab not in work/ yet; never overwrite a copy")
    fetch.add_argument("labs", nargs="*", help="default: every lab")
    return parser


def lab(argv: list[str]) -> int:
    """``mlsys lab ...``: fetch the labs into work/ and (unless ``fetch``) start JupyterLab there."""
    args = lab_parser().parse_args(argv)
    try:
        release = workspace.find_release()
        fetched = workspace.fetch(release, args.labs if args.command == "fetch" else None)
    except (FileNotFoundError, ValueError) as error:
        print(f"mlsys lab: {error}", file=sys.stderr)
        return 2
    work = workspace.work_dir(release)
    for name in fetched.copied:
        print(f"fetched {name}: {work / name}")
    if fetched.kept and args.command == "fetch":
        print(f"already in {work} (left as they are): {', '.join(fetched.kept)}")
    if args.command == "fetch":
        return 0
    command = workspace.jupyter_command(work, port=args.port, browser=args.browser)
    print(f"JupyterLab on {work} (stop it with Ctrl-C)", flush=True)
    os.execv(command[0], command)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        return doctor()
    if argv[:1] == ["lab"]:
        return lab(argv[1:])
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
