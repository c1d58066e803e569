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

# Trains CONFIG to completion (or resumes it: runs/<config name> holds its checkpoints), then
# prints a sample from the final checkpoint and draws the loss curves into RUN_DIR/loss.png.
RUN_DIR ?= runs/$(notdir $(basename $(CONFIG)))
train: deps build data
	@$(BUILD_DIR)/lat train $(CONFIG)
	@echo "== sample: $(BUILD_DIR)/lat generate --checkpoint $(RUN_DIR) --max-new-tokens 500"
	@$(BUILD_DIR)/lat generate --checkpoint $(RUN_DIR) --max-new-tokens 500
	@echo "== loss curves: $(BUILD_DIR)/lat plot $(RUN_DIR)"
	@$(BUILD_DIR)/lat plot $(RUN_DIR) --out $(RUN_DIR)/loss.png

test: deps build data
	@ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j$(JOBS)

# The compiled benchmarks, then the data-parallel one (1 rank x 2 threads vs 2 ranks x 1
# thread) when Open MPI is installed.
bench: deps build data
	@set -e; for b in $(BUILD_DIR)/bench/bench_*; do \
	  [ -x "$$b" ] || continue; echo "== $$b"; "$$b"; \
	done
	@if command -v mpirun > /dev/null; then bench/bench_mpi.sh $(BUILD_DIR)/lat; \
	else echo "== bench_mpi.sh skipped: mpirun not found (apt-get install openmpi-bin)"; fi

clean:
	rm -rf $(BUILD_DIR)
