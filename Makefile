# behest developer entry points. `make serve` and `make test` install what they need first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BUF_VERSION := 1.75.0
BUF := .tools/node_modules/.bin/buf
BASELINE := tests/contract/agent_v1_baseline.binpb

.PHONY: install serve test proto proto-check lint bench baseline clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

$(BUF):
	npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)

serve: install
	$(BIN)/behest serve

test: install
	$(BIN)/pytest

proto: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python scripts/gen_protos.py

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

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy src

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .tools
