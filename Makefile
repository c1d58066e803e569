# make train | make test | make bench: install missing packages, configure and build into
# ./build with the default options (DESIGN.md), fetch the data, then run.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CONFIG ?= configs/shakespeare_hybrid.yaml

.PHONY: all deps build data train test bench clean

all: build

deps:
	@tools/install_deps.sh

build: deps
	@cmake -S . -B $(BUILD_DIR)
	@cmake --build $(BUILD_DIR) -j$(JOBS)

data:
	@tools/fetch_data.sh

train: deps build data
	@if $(BUILD_DIR)/lat train --help >/dev/null 2>&1; then \
	  $(BUILD_DIR)/lat train $(CONFIG); \
	else \
	  echo "make train: the trainer has not landed yet; it will run: $(BUILD_DIR)/lat train $(CONFIG)"; \
	fi

test: deps build data
	@ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j$(JOBS)

bench: deps build
	@set -e; for b in $(BUILD_DIR)/bench/bench_*; do \
	  [ -x "$$b" ] || continue; echo "== $$b"; "$$b"; \
	done

clean:
	rm -rf $(BUILD_DIR)
