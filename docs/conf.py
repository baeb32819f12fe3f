"""Sphinx settings of the course website (`make site`): MyST markdown and notebooks, the book theme.

Why Sphinx and not Jupyter Book 2, and how to move: maintainers/site.md.
"""

import shutil
import sys
from pathlib import Path

from jupyter_server_mathjax.app import STATIC_ASSETS_PATH as MATHJAX

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import course_pages  # noqa: E402  (after the path above)

course_pages.generate()  # the labs' introductions and the lecture notebooks, from the course's files

project = "Machine Learning Systems"
author = "the mlsys-course maintainers"
copyright = "the mlsys-course maintainers"

extensions = ["myst_nb", "sphinx_external_toc"]
external_toc_path = "_toc.yml"
external_toc_exclude_missing = False

exclude_patterns = ["_build", "_ext", "**/.ipynb_checkpoints"]
suppress_warnings = []  # none: the build runs with -W (warnings are errors) and -n (every reference checked)
nitpicky = True

# MyST: the same markdown GitHub renders, plus heading anchors for links to a section (page.md#a-heading).
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 4
myst_links_external_new_tab = False

# Notebooks are shown with what they store, never executed (the lectures take minutes; `make plots` runs them).
nb_execution_mode = "off"
nb_merge_streams = True

# MathJax from the site itself, like the course's feedback pages: the MathJax 2 that jupyter-server-mathjax
# (a dependency of the course) ships, copied into _static/mathjax/ by setup() below. The site loads nothing
# from other sites, so it reads the same offline. MathJax 2 reads only \(..\) and \[..\], which is what
# Sphinx writes for MyST's $..$ and $$..$$, and only inside the elements MyST marks as math.
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"
mathjax2_config = {"tex2jax": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]],
                               "processEscapes": False,
                               "processClass": "math|output_area|tex2jax_process|mathjax_process",
                               "ignoreClass": "tex2jax_ignore|mathjax_ignore"}}

html_theme = "sphinx_book_theme"
html_title = "Machine Learning Systems"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
}
html_last_updated_fmt = None
html_show_sourcelink = False


def _copy_mathjax(app):
    if app.builder.format == "html":
        shutil.copytree(MATHJAX, Path(app.outdir) / "_static" / "mathjax", dirs_exist_ok=True)


def setup(app):
    app.connect("builder-inited", _copy_mathjax)

    # GitHub highlights ```csv fences (the LMS walk's mapping file); Pygments has no such lexer.
    from pygments.lexers.special import TextLexer

    app.add_lexer("csv", TextLexer)
