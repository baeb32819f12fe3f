"""Build the course website, as `make site` and tests/test_site.py do: Sphinx with MyST, from scratch,
warnings as errors (``-W``, every one listed: ``--keep-going``), every cross-reference checked (``-n``);
then every internal link of the HTML it wrote (check_links.py).

    python docs/build.py                 # into docs/_build/html
    python docs/build.py --out DIR       # elsewhere
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS))

from check_links import broken_links  # noqa: E402  (after the path above)


def build(out: Path, docs: Path = DOCS) -> int:
    """Build the site in ``docs`` into ``out``; 0 when Sphinx warned of nothing and no link is broken."""
    start = time.monotonic()
    sphinx = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q", "-b", "html",
                             "-d", str(out.parent / f"{out.name}.doctrees"), str(docs), str(out)])
    if sphinx.returncode != 0:
        print(f"make site: Sphinx warned (above); the site in {out} is incomplete", file=sys.stderr)
        return 1
    broken = broken_links(out)
    for link in broken:
        print(f"broken link: {link}", file=sys.stderr)
    if broken:
        return 1
    print(f"site: {out / 'index.html'} ({time.monotonic() - start:.0f} s, no warning, no broken link)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DOCS / "_build" / "html", help="the site's folder")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the sources (conf.py, _toc.yml, pages)")
    args = parser.parse_args(argv)
    return build(args.out.resolve(), args.docs.resolve())


if __name__ == "__main__":
    sys.exit(main())
