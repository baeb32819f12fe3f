# The course's two set-up commands are `make course` and `make test`; both start from a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CREATED := $(VENV)/.created
STAMP  := $(VENV)/.installed
GRADER := $(VENV)/etc/jupyter/nbgrader_config.py
LOGS   := $(VENV)/log
EXTRAS := dev,mpi,site,shared,hub

## Set-up steps print one line each, what they do and where their log is; their own output (pip's
## warnings too) goes to the log, and a failed step prints the log's last lines and its path, and
## fails make. V=1 shows everything instead: each command and all it prints.
## $(call step,NAME,WHAT,COMMANDS): the shell command line of one step, its log $(LOGS)/NAME.log
Q     := $(if $(V),,@)
comma := ,
ifdef V
step = $(3)
else
step = log=$(LOGS)/$(subst $() ,-,$(1)).log; mkdir -p $(LOGS) && echo "$(1): $(2) (log: $$log)" && \
	{ $(3); } >"$$log" 2>&1 || { status=$$?; echo "$(1) failed (exit $$status); the end of $$log:" >&2; \
	tail -n 25 "$$log" >&2; echo "the whole log: $$log" >&2; exit $$status; }
endif

.PHONY: setup system-deps hub-deps hub hub-down course check-all test test-fast site lab plots plots-gpu bundle release check clean

setup: $(STAMP) $(GRADER)

## system-deps: bubblewrap, the grading sandbox, chromium, the browser the browser tests drive, and PostgreSQL,
## the server of the shared-gradebook tests (installed when run as root with apt; else a warning; nothing
## printed when all are there)
system-deps:
	@missing=; command -v bwrap >/dev/null 2>&1 || missing=bubblewrap; \
	command -v chromium >/dev/null 2>&1 || missing="$${missing:+$$missing }chromium"; \
	{ command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 || missing="$${missing:+$$missing }postgresql"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  $(call step,system packages,$$missing (apt-get),apt-get update -qq && apt-get install -y -qq $$missing); \
	else \
	  case "$$missing" in *bubblewrap*) echo "warning: bubblewrap is not installed: grading runs with resource limits only";; esac; \
	  case "$$missing" in *chromium*) echo "warning: chromium is not installed: \`make test\` fails its browser tests (test-fast skips them)";; esac; \
	  case "$$missing" in *postgresql*) echo "warning: postgresql is not installed: \`make test\` fails its shared-gradebook tests";; esac; \
	fi

## hub-deps: configurable-http-proxy, JupyterHub's proxy, from npm into .venv/hub/ (Node.js and npm
## from apt first when run as root without them)
PROXY := $(VENV)/hub/node_modules/.bin/configurable-http-proxy
hub-deps: $(PROXY)

$(PROXY): | $(CREATED)
	$(Q)if ! command -v npm >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    $(call step,node,nodejs npm (apt-get),apt-get update -qq && apt-get install -y -qq nodejs npm); \
	  else echo "npm is missing: install Node.js and npm (Debian: apt-get install nodejs npm), or run make as root" >&2; exit 1; fi; \
	fi
	$(Q)$(call step,proxy,npm install configurable-http-proxy into $(VENV)/hub,\
	  npm install --prefix $(VENV)/hub --no-audit --no-fund --no-save configurable-http-proxy@5)

## hub: the course's JupyterHub on this machine (as root: it adds the class's Unix accounts and runs
## each person's server as that person). CLASS=file.yaml picks the class (default deploy/jupyterhub/class.yaml:
## http://127.0.0.1:8000, passwords of the new accounts in /srv/mlsys/hub/passwords.txt); Ctrl-C stops it.
CLASS ?= deploy/jupyterhub/class.yaml
hub: setup system-deps hub-deps
	$(BIN)/python -m deploy.jupyterhub.provision up $(CLASS)
	MLSYS_HUB_CLASS=$(abspath $(CLASS)) $(BIN)/jupyterhub -f deploy/jupyterhub/jupyterhub_config.py

## hub-down: remove the Unix accounts `make hub` made for CLASS (the course folder and exchange stay)
hub-down: setup
	$(BIN)/python -m deploy.jupyterhub.provision down $(CLASS)

## the venv, with uv (pip's work in a tenth of the time: it resolves and fetches in parallel and links
## files from its cache; 55 s of the venv's minute went to pip on 2 cores) and the latest pip, setuptools
## and wheel (`mlsys course bundle` builds the kit's wheel with pip); the packages' stamp only needs it
## to exist (an old venv is kept)
## --compile-bytecode: uv, unlike pip, writes no .pyc files, and the processes that grade never do (spawned
## workers run with -B, sandboxed kernels cannot write the venv): every kernel compiled numpy, IPython and
## Numba from source again (make course: 7 min 15 s of labs became 9 min 35 s)
UV := $(BIN)/uv pip install --compile-bytecode --python $(BIN)/python
$(CREATED):
	$(Q)$(call step,venv,$(PYTHON) -m venv $(VENV)$(comma) then uv$(comma) pip$(comma) setuptools and wheel,\
	  $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install uv && $(UV) --upgrade pip "setuptools>=68" wheel)
	$(Q)touch $(CREATED)

$(STAMP): pyproject.toml | $(CREATED)
	$(Q)$(call step,packages,uv pip install -e .[$(EXTRAS)],$(UV) -e ".[$(EXTRAS)]")
	$(Q)touch $(STAMP)

## the grading kernelspec and a settings file loading nbgrader_config.py, in the venv's Jupyter folders,
## so that nbgrader, Formgrader and JupyterLab find both from any folder
$(GRADER): $(STAMP) autograder/config.py
	$(Q)$(call step,grading kernel,python -m autograder.config install,$(BIN)/python -m autograder.config install)

## course: release every lab; grade each lab's solution and blank release through nbgrader in the sandbox
## (feedback, grades.csv) and check every wrong-answer fixture by forking from the solution, while the
## lectures draw their figures at small sizes (a summary; V=1 shows everything: each sample, what nbgrader
## and the kernels print, warnings)
course: setup system-deps
	$(BIN)/mlsys course all $(if $(V),-v)

## check-all: what `make course` leaves out, for a release: every wrong-answer fixture graded through
## nbgrader in the sandbox too (minutes per lab) and the lectures' figures at full size
check-all: setup system-deps
	$(BIN)/mlsys course all --all-samples --full-figures $(if $(V),-v)

## test: every test, the slow end-to-end ones included; the browser tests fail, never skip, without chromium.
## Two pytest workers (pytest-xdist), a test file to each at a time: most tests wait on kernels and processes,
## so two at once take about 60% of the serial time on 2 cores.
test: setup system-deps hub-deps
	MLSYS_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -n 2 --dist loadfile --durations=30

## test-fast: skip the slow end-to-end tests (nbgrader pipeline, notebook execution)
test-fast: setup
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow"

## site: the course website from docs/ (MyST markdown, Sphinx) into docs/_build/html/ (open its index.html):
## warnings are errors and every internal link is checked (docs/build.py; docs/maintainers/site.md says more)
site: setup
	$(BIN)/python docs/build.py

## lab: copy the labs not fetched yet into work/ (your copy, git-ignored; labs/ stays the release and
## a copy is never overwritten) and open JupyterLab there. PORT=8899 picks the port (default: 8888 or
## the next free one), BROWSER=no opens no browser tab.
lab: setup
	$(BIN)/mlsys lab $(if $(PORT),--port $(PORT)) $(if $(filter no,$(BROWSER)),--no-browser)

## plots: the lectures' figures at full size (minutes; `make course` draws them small)
plots: setup
	$(BIN)/mlsys course figures

## plots-gpu: on a machine with an NVIDIA GPU, time the course's kernels against its peak (*_gpu.png)
plots-gpu: setup
	$(BIN)/mlsys course figures --gpu

## bundle: the student kit for LAB (make bundle LAB=lab03_graph_opt; default: the first lab), in .course/
bundle: setup
	$(BIN)/mlsys course bundle $(if $(LAB),--for $(LAB))

release: setup
	$(BIN)/mlsys course release

check: setup
	$(BIN)/mlsys course check

clean:
	rm -rf .course lectures/figures/*.png docs/_build docs/labs docs/lectures
