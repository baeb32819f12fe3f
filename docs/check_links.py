"""Every internal link of the built site must lead somewhere: a file that exists and, after ``#``, an
element with that id in it.

Sphinx (run with ``-W -n``) already refuses a MyST link to a missing page or heading; this reads the
HTML it wrote, so it also catches what reaches the pages another way (raw HTML in a notebook or a
page, the theme's own links, an image that was not copied). Links with a scheme (``https:``,
``mailto:``) are not followed: the site is built without network.

    python docs/check_links.py docs/_build/html    # prints each broken link, exits 1 if there is one
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

LINKING = {"a": "href", "link": "href", "img": "src", "script": "src", "source": "src", "iframe": "src"}


@dataclass(frozen=True)
class Broken:
    page: str    # the page holding the link, relative to the site's root
    target: str  # the link as written
    reason: str

    def __str__(self) -> str:
        return f"{self.page}: {self.target} ({self.reason})"


class _Page(HTMLParser):
    """The links a page makes and the ids it defines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("id", "name") if tag == "a" else ("id",):
            if values.get(name):
                self.ids.add(values[name])
        link = values.get(LINKING.get(tag, ""))
        if link is not None:
            self.links.append(link)


@cache
def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    page.close()
    return page


def _internal(link: str) -> bool:
    parts = urlsplit(link)
    return not (parts.scheme or parts.netloc or link.startswith("//"))


def pages(site: Path) -> list[Path]:
    """The site's pages: its HTML files but those the theme keeps in ``_static/`` (Jinja templates)."""
    return [page for page in sorted(site.rglob("*.html"))
            if not any(part.startswith("_") for part in page.relative_to(site).parts[:-1])]


def broken_links(site: Path) -> list[Broken]:
    """Each link of each HTML page under ``site`` whose file or fragment does not exist."""
    site = site.resolve()
    _parse.cache_clear()
    found: list[Broken] = []
    for page in pages(site):
        name = page.relative_to(site).as_posix()
        for link in _parse(page).links:
            if not link.strip() or not _internal(link):
                continue
            parts = urlsplit(link)
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_relative_to(site):
                found.append(Broken(name, link, "outside the site"))
            elif not target.is_file():
                found.append(Broken(name, link, "no such file"))
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _parse(target).ids:
                found.append(Broken(name, link, f"no id {unquote(parts.fragment)!r} in {target.relative_to(site)}"))
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    site = Path(argv[0])
    if not (site / "index.html").is_file():
        print(f"{site}: no index.html, is it a built site?", file=sys.stderr)
        return 2
    broken = broken_links(site)
    for link in broken:
        print(f"broken link: {link}", file=sys.stderr)
    print(f"{len(pages(site))} pages, {'no broken link' if not broken else f'{len(broken)} broken links'}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
