# Two entry points: `make run` (the embedded default job) and `make test` (every suite).
# Both build what they need on a fresh machine; later calls reuse it.

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# The package index torch is installed from. Empty (the default): pip's own configuration,
# which on our machines holds the CPU wheel. Where pip reaches the public index, whose
# torch==2.13.0 is the multi-GB CUDA build, name PyTorch's CPU index:
#   make run TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=

.PHONY: setup run test test-core test-vllm test-oat clean

setup: $(VENV)/.installed

# torch first, pinned, so the range in pyproject.toml accepts it instead of pulling a CUDA build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0$(if $(TORCH_INDEX), --index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -e ".[dev]"
	# DeepSpeed builds from source against the torch above; its ops compile on first use.
	DS_BUILD_OPS=0 $(BIN)/pip install -q --no-build-isolation "$$(sed -n 's/^deepspeed = \["\(.*\)"\]/\1/p' pyproject.toml)"
	touch $@

run: setup
	$(BIN)/python -m precision_oat.main --algo pg --dtype fp16

test: setup
	bash scripts/test.sh

test-core: setup
	bash scripts/test.sh core

test-vllm:
	bash scripts/test.sh vllm

test-oat:
	bash scripts/test.sh oat

clean:
	rm -rf $(VENV) runs
