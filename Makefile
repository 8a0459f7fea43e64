# Two commands for a fresh machine (see README): `make bench` and `make test`.
# Each creates the virtual environment on first use and installs the pinned dev set.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: bench test gpu-test check inspect clean

$(VENV)/.installed: pyproject.toml requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

bench: $(VENV)/.installed  ## the main job: GPU ladder on a GPU, the CPU ladder elsewhere
	$(VENV)/bin/onlinesoftmax bench

test: $(VENV)/.installed  ## CPU tests (GPU tests skip without CUDA); exit 5 = nothing collected
	$(PY) -m pytest -q -rs || [ $$? -eq 5 ]
	TRITON_INTERPRET=1 $(PY) -m pytest -q -rs tests/test_triton_interpreter.py

gpu-test: $(VENV)/.installed  ## on a GPU machine: the tests marked gpu
	$(PY) -m pytest -q -rs -m gpu

check: $(VENV)/.installed
	$(VENV)/bin/onlinesoftmax check

inspect: $(VENV)/.installed
	$(VENV)/bin/onlinesoftmax inspect

clean:
	rm -rf $(VENV) results
