# Two commands a newcomer needs: `make demo` (runs the failure drills) and `make test`.
# Everything else hangs off the same bootstrapped virtualenv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint docs docs-build diagrams load bench up soak mutants clean db-stop

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@if command -v npm >/dev/null 2>&1 && [ -f package-lock.json ]; then npm ci --silent --no-audit --no-fund; \
	  else echo "!! npm not found: diagram export (make diagrams) and its tests will be skipped"; fi
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/d2kit drill all --quick

# The slow tests (real clusters, real faults, real timeouts) run alone, one at a time, so no other test takes the
# CPU their timings need; the rest run two at a time (pytest-xdist): the quick ones a file per process, the slow
# ones that assert no timing (the load smokes, marked shares_cpu) a test per process.
test: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile -m "not slow"
	$(BIN)/pytest -n 2 --dist load -m "slow and shares_cpu"
	$(BIN)/pytest -m "slow and not shares_cpu"

lint: $(STAMP)
	$(BIN)/ruff check reference_impl d2kit tests load

up: $(STAMP)
	$(BIN)/d2kit up --schedulers 3 --workers 4

# Three minutes of random faults against one `d2kit up` on a private embedded PostgreSQL (tests/test_up.py).
soak: $(STAMP)
	D2KIT_SOAK_SECONDS=$${D2KIT_SOAK_SECONDS:-180} $(BIN)/pytest -s -k soak tests/test_up.py

# Every guarantee broken on purpose in a scratch copy, each checked to be caught by its drill or test; writes
# docs/drills/mutants.json for the drills page. About a minute per mutation: not part of `make test`.
mutants: $(STAMP)
	$(BIN)/d2kit drill mutants

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

docs-build: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

diagrams: $(STAMP)
	$(BIN)/d2kit diagram export-all

load: $(STAMP)
	$(BIN)/d2kit load run

bench: $(STAMP)
	$(BIN)/d2kit bench run

db-stop: $(STAMP)
	$(BIN)/d2kit db stop

clean:
	-$(BIN)/d2kit db stop
	rm -rf .pgdata site .pytest_cache
