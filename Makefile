# The two commands a new user types: `make demo` and `make test`.
# Both create .venv when it is missing and install the package into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo demo-quick test venv clean bench

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch first, pinned to the tested wheel (the library itself needs torch>=2.6), so nothing later pulls a CUDA build
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[dev,fast,hf,trackers]' || $(PY) -m pip install -e '.[dev,hf,trackers]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/interpscale demo --out runs/demo

demo-quick: $(STAMP)
	$(VENV)/bin/interpscale demo --quick --out runs/demo-quick

# one pytest worker per core of the 2-core CI machine; a test file stays on one worker, in order
# (tests/conftest.py gives each worker one torch thread). PYTEST_WORKERS=0 runs in one process.
# --durations: the CI log lists the slowest tests (the 25-minute CI budget is spent there).
PYTEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=25 $(PYTEST_ARGS)

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) runs build *.egg-info src/*.egg-info
