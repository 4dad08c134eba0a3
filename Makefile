# One entry point: `make check` is what CI runs (after .ci/run installs everything).
PY ?= .venv/bin/python

.PHONY: check fmt lint typecheck test test-all bench

check: lint typecheck test-all

fmt:
	$(PY) -m ruff check --fix crawler tests bench migrations fuzz
	$(PY) -m ruff format crawler tests bench migrations fuzz

lint:
	$(PY) -m ruff format --check crawler tests bench migrations fuzz
	$(PY) -m ruff check crawler tests bench migrations fuzz

typecheck:
	$(PY) -m mypy crawler

# pytest exits 5 when it collected no test: that must fail, not pass silently. Tests run on every
# core (pytest-xdist); each worker builds the session fixtures it needs, and an idle worker takes
# tests queued for the other (worksteal: the long tests do not leave one worker busy and the
# other idle at the end). PYTEST_WORKERS=0 runs in one process (for a debugger, or to read one
# test's output in order).
PYTEST_WORKERS ?= auto
PYTEST = $(PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist worksteal
NO_TESTS_FAIL = rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests were collected"; exit 1; fi; exit $$rc

# Byte-code written once before the tests: where PYTHONDONTWRITEBYTECODE is set (CI sandboxes set
# it), every CLI subprocess of the suite would otherwise compile crawler/ from source again.
COMPILE = $(PY) -m compileall -q crawler tests bench fuzz migrations >/dev/null

# The fast set: tests/unit, in-process only (its conftest refuses subprocesses and the emulator).
test:
	$(COMPILE); $(PYTEST) tests/unit; $(NO_TESTS_FAIL)

# Every test (what CI runs): unit, catalog, hub, e2e, web, reliability.
test-all:
	$(COMPILE); $(PYTEST); $(NO_TESTS_FAIL)

bench:
	$(PY) -m bench
