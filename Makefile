# One entry point: `make check` is what CI runs (after .ci/run installs everything).
PY ?= .venv/bin/python

.PHONY: check fmt lint typecheck test bench

check: lint typecheck test

fmt:
	$(PY) -m ruff check --fix crawler tests bench migrations fuzz
	$(PY) -m ruff format crawler tests bench migrations fuzz

lint:
	$(PY) -m ruff format --check crawler tests bench migrations fuzz
	$(PY) -m ruff check crawler tests bench migrations fuzz

typecheck:
	$(PY) -m mypy crawler

# pytest exits 5 when it collected no test: that must fail, not pass silently.
test:
	$(PY) -m pytest -q -p no:cacheprovider; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no tests were collected"; exit 1; fi; exit $$rc

bench:
	$(PY) -m bench
