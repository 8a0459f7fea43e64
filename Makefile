# Two commands for a fresh machine (see README): `make bench` and `make test`; `make help` lists all.
# Each creates the virtual environment on first use and installs the pinned dev set.
VENV ?= .venv
PY := $(VENV)/bin/python

.DEFAULT_GOAL := help
.PHONY: help bench test gpu-test check inspect clean

help:  ## this list
	@echo "make TARGET   (the first target you run creates $(VENV) from the pins in requirements-dev.txt)"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /  \1\t/' | expand -t 12

# pip prints what it collects and installs: the first run takes a few minutes (torch is large).
$(VENV)/.installed: pyproject.toml requirements-dev.txt
	@echo "== [1/3] creating the virtual environment $(VENV) (python3: $$(python3 --version))"
	python3 -m venv $(VENV)
	@echo "== [2/3] installing the pinned dev set (requirements-dev.txt: torch CPU, triton, cuda-core, pytest, ...)"
	$(PY) -m pip install --progress-bar off -r requirements-dev.txt
	@echo "== [3/3] installing onlinesoftmax itself from this tree (editable, no further dependencies)"
	$(PY) -m pip install -q --no-deps -e .
	touch $@
	@echo "== $(VENV) ready"

bench: $(VENV)/.installed  ## the main job: the CUDA ladder on a GPU, the CPU ladder elsewhere (results/)
	$(VENV)/bin/onlinesoftmax bench

# pytest without -q: its header carries the seed of the random inputs (replay: ONLINESOFTMAX_SEED=...).
test: $(VENV)/.installed  ## the CPU tests, as CI runs them (GPU tests skip without CUDA)
	$(PY) -m pytest -rs || [ $$? -eq 5 ]
	TRITON_INTERPRET=1 $(PY) -m pytest -rs tests/test_triton_interpreter.py tests/test_opinfo_triton.py \
		tests/test_attention_interpreter.py tests/test_cross_entropy_interpreter.py

gpu-test: $(VENV)/.installed  ## on a GPU machine: the tests marked gpu
	$(PY) -m pytest -rs -m gpu

check: $(VENV)/.installed  ## every variant that runs here against float64, every input kind
	$(VENV)/bin/onlinesoftmax check

inspect: $(VENV)/.installed  ## registers, shared memory, stack, spills of every CUDA kernel (no GPU needed)
	$(VENV)/bin/onlinesoftmax inspect

clean:  ## delete the virtual environment (results/ stays: delete it yourself)
	rm -rf $(VENV)
