"""What grading security costs: building a lab's grading edition, and the kernel guard's overhead.

    python benchmarks/grading_security.py

Prints, for every lab, the time to build its grading edition of mlsys_lib from scratch and to reuse
it; then 400 open/import-heavy operations and a 50-cell notebook in two kernels, one with the
kernel guard and one without, taking turns so that a busy machine slows both alike (best of 5 rounds).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from autograder.edition.edition import build_edition  # noqa: E402
from autograder.paths import lab_names  # noqa: E402
from test_kernel_tamper import Kernel  # noqa: E402

SETUP = """\
import collections, importlib, os, sys, tempfile, time
folder = tempfile.mkdtemp()
with open(os.path.join(folder, 'bench_module.py'), 'w') as f:
    f.write('VALUE = 1\\n')
sys.path.insert(0, folder)

def operation():
    with open(os.path.join(folder, 'bench_module.py')) as f:
        f.read()
    sys.modules.pop('bench_module', None)
    importlib.import_module('bench_module')  # open, import, marshal.loads and exec events
    collections.namedtuple('P', 'x y')  # compile, exec and sys._getframe from library code

def timed(n):
    start = time.perf_counter()
    for _ in range(n):
        operation()
    print(time.perf_counter() - start)
"""


def editions() -> None:
    print("grading edition      build    reuse")
    with tempfile.TemporaryDirectory() as tmp:
        for lab in lab_names():
            start = time.perf_counter()
            build_edition(lab, Path(tmp) / lab)
            built = time.perf_counter() - start
            start = time.perf_counter()
            build_edition(lab, Path(tmp) / lab)
            print(f"{lab:<18} {built:6.2f} s  {(time.perf_counter() - start) * 1000:5.1f} ms")


def guard() -> None:
    kernels = {guarded: Kernel(guarded=guarded) for guarded in (False, True)}
    try:
        rounds = {False: [], True: []}
        cells = {False: 0.0, True: 0.0}
        for kernel in kernels.values():
            kernel.run(SETUP)
        for _ in range(5):
            for guarded, kernel in kernels.items():
                rounds[guarded].append(float(kernel.run("timed(400)").output))
        for index in range(50):
            for guarded, kernel in kernels.items():
                start = time.perf_counter()
                kernel.run(f"import numpy as np\nx{index} = np.arange({index} + 3).sum()\nprint(x{index})")
                cells[guarded] += (time.perf_counter() - start) / 50
    finally:
        for kernel in kernels.values():
            kernel.close()
    ratio = min(rounds[True]) / min(rounds[False])
    print(f"kernel guard: 400 operations {min(rounds[False]) * 1000:.0f} ms without, {min(rounds[True]) * 1000:.0f} ms "
          f"with (x{ratio:.2f}); a cell {cells[False] * 1000:.1f} ms without, {(cells[True] - cells[False]) * 1000:+.1f} "
          "ms with")


if __name__ == "__main__":
    editions()
    guard()
