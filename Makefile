# make train | make test | make bench: install missing packages, configure and build into
# ./build with the default options (DESIGN.md), fetch the data, then run. make fuzz: the file
# readers' fuzzers, built with clang into ./build-fuzz. make interop: lat's Hugging Face export
# and import and its tokenizers checked against transformers, HF tokenizers and sentencepiece,
# in a virtualenv of its own (.venv-interop).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CONFIG ?= configs/shakespeare_hybrid.yaml

.PHONY: all deps build data train train-bpe test bench fuzz interop interop-venv clean

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
# TRAIN_ARGS go to lat train (e.g. TRAIN_ARGS="--set train.max_steps=200" for a short run).
RUN_DIR ?= runs/$(notdir $(basename $(CONFIG)))
TRAIN_ARGS ?=
train: deps build data
	@$(BUILD_DIR)/lat train $(CONFIG) $(TRAIN_ARGS)
	@echo "== sample: $(BUILD_DIR)/lat generate --checkpoint $(RUN_DIR) --max-new-tokens 500"
	@$(BUILD_DIR)/lat generate --checkpoint $(RUN_DIR) --max-new-tokens 500
	@echo "== loss curves: $(BUILD_DIR)/lat plot $(RUN_DIR)"
	@$(BUILD_DIR)/lat plot $(RUN_DIR) --out $(RUN_DIR)/loss.png

# configs/shakespeare_bpe.yaml: the main job on SentencePiece BPE tokens. Its tokenizer
# (BPE_TOKENIZER, 512 pieces) is trained once, on the train text only: the file's first
# 1,003,854 bytes, all but shakespeare_heldout.txt, which holds the run's val split. Then
# the config trains (or resumes) as `make train` runs it.
BPE_TOKENIZER := data/shakespeare_bpe
train-bpe: deps build data
	@if [ ! -e $(BPE_TOKENIZER) ]; then \
	  head -c $$(( $$(stat -c %s data/tinyshakespeare.txt) - $$(stat -c %s data/shakespeare_heldout.txt) )) \
	    data/tinyshakespeare.txt > data/shakespeare_train.txt && \
	  $(BUILD_DIR)/lat tokenizer train --vocab-size 512 --out $(BPE_TOKENIZER) data/shakespeare_train.txt; \
	fi
	@$(MAKE) --no-print-directory train CONFIG=configs/shakespeare_bpe.yaml

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

# The libFuzzer harnesses of tests/fuzz/ (clang, ASan, UBSan; only the library and the
# harnesses are built): each replays its seed corpus and recorded crashes, then fuzzes for
# FUZZ_SECONDS. Fails when any finds a crash, a sanitizer report, a hang or a huge allocation.
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 600
fuzz:
	@tools/install_deps.sh fuzz
	@cmake -S . -B $(FUZZ_BUILD_DIR) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DLAT_FUZZ=ON \
	  -DLAT_CUDA=OFF -DLAT_MPI=OFF -DLAT_BUILD_TESTS=OFF -DLAT_BUILD_BENCH=OFF
	@cmake --build $(FUZZ_BUILD_DIR) -j$(JOBS) --target fuzz_harnesses
	@tests/fuzz/run_fuzz.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS)

# tools/check_hf_export.py: lat -> transformers, transformers -> lat and the round trip, on
# CPU in float32. tools/check_tokenizers.py: lat's tokenizers against HF tokenizers,
# sentencepiece and transformers on llama.cpp's test vocabularies (kept in ~/.cache/lat). The
# virtualenv holds the pinned packages from the Python registry (torch's wheel pulls the CUDA
# libraries, about 3 GB, cached in ~/.cache/pip; llama-cpp-python builds llama.cpp from source
# once, minutes, and pip's wheel cache keeps the result); it is made anew only when its pins
# differ from these. It must not hold fla: transformers would call its GPU-only kernels.
PYTHON ?= /usr/bin/python3
INTEROP_VENV ?= .venv-interop
INTEROP_PINS := torch==2.15.0 transformers==5.24.0 tokenizers==0.23.3 sentencepiece==0.2.3 protobuf==7.36.2 \
  gguf==0.19.0 llama-cpp-python==0.3.36
interop-venv:
	@tools/install_deps.sh interop
	@if [ "$$(cat $(INTEROP_VENV)/pins 2>/dev/null)" != "$(INTEROP_PINS)" ]; then \
	  echo "== creating $(INTEROP_VENV) with $(INTEROP_PINS)"; \
	  rm -rf $(INTEROP_VENV) && $(PYTHON) -m venv $(INTEROP_VENV) && \
	  $(INTEROP_VENV)/bin/pip install --quiet $(INTEROP_PINS) safetensors && \
	  echo "$(INTEROP_PINS)" > $(INTEROP_VENV)/pins; \
	fi

interop: deps build data interop-venv
	@$(INTEROP_VENV)/bin/python tools/check_hf_export.py --lat $(BUILD_DIR)/lat
	@$(INTEROP_VENV)/bin/python tools/check_gguf_export.py --lat $(BUILD_DIR)/lat
	@$(INTEROP_VENV)/bin/python tools/check_tokenizers.py --lat $(BUILD_DIR)/lat

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_BUILD_DIR)
