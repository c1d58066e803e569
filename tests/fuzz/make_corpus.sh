#!/usr/bin/env bash
# Regenerates the seed corpora in tests/fuzz/corpus/ (committed; a few KB per file): valid
# inputs written by lat itself, so that the fuzzers start from files that get past the first
# checks. Run it when a file format changes:
#   tests/fuzz/make_corpus.sh build/lat
# It replaces only the files below; the others there (fixed-crash-*: inputs that once crashed
# a reader, kept as regression tests) stay.
# Needs Debian's /usr/bin/python3 with h5py and numpy (tools/install_deps.sh installs them).
# corpus/config:      configs/*.yaml and a resolved config.yaml (every key)
# corpus/checkpoint:  a full checkpoint (1 attn layer, SGD state), the same gzip'd by h5repack
#                     (hdf5-tools), and an h5-weights export (gdn + attn), d_model 8
# corpus/safetensors: export directories packed as fuzz_safetensors.cpp reads them (f32 with
#                     a char tokenizer, bf16, tied embeddings with the byte tokenizer)
# corpus/token_files: raw uint16 and uint32 .bin, llm.c headered v1 and v2, HDF5 "tokens"
#                     datasets (int32 1-D; uint16 2-D, chunked and compressed)
# corpus/hf_config:   config.json of `lat export --format hf` (a gdn + gated attn hybrid, a
#                     tied gdn model) and the hybrid's in transformers 4's older form
# corpus/hf_tokenizer: tokenizer.json of --format hf (char, byte), of --format safetensors
#                     (lat's char and byte forms) and a foreign WordPiece one
# corpus/sentencepiece: tokenizer.model of `lat tokenizer train` (bpe and unigram, byte fallback)
set -euo pipefail
lat=$(realpath "${1:?usage: make_corpus.sh LAT_BINARY}")
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
corpus=$src/tests/fuzz/corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

/usr/bin/python3 -c "open('tiny.txt', 'w').write('the quick brown fox jumps over the lazy dog.\n' * 20)"
# train_tiny NAME LAYERS OPTIMIZER [MORE YAML LINES]: trains 2 steps of a d_model 8 model.
train_tiny() {
  cat > "$1.yaml" <<YAML
model:
  d_model: 8
  n_layers: $(( $(tr -cd , <<< "$2" | wc -c) + 1 ))
  n_heads: 1
  layers: "$2"
  mlp_ratio: 1.0
data:
  path: tiny.txt
  block_size: 8
train:
  batch_size: 2
  max_steps: 2
  warmup: 1
  optimizer: $3
  eval_every: 0
  eval_batches: 1
  log_every: 1
  ckpt_every: 0
  out_dir: $1
${4:-}
YAML
  "$lat" train "$1.yaml" 2> /dev/null
}
train_tiny attn_sgd attn sgd
train_tiny gdn_attn gdn,attn adamw
train_tiny tied_byte gdn adamw "$(printf 'model.tie_embeddings: true\ndata.tokenizer: byte')"
train_tiny qwen gdn,attn adamw "$(printf 'model.norm_zero_centered: true\nmodel.attn.output_gate: true\nmodel.attn.qk_norm: true')"
"$lat" export --checkpoint gdn_attn --format h5-weights --out gdn_attn_h5 > /dev/null
"$lat" export --checkpoint gdn_attn --format safetensors --out gdn_attn_f32 > /dev/null
"$lat" export --checkpoint gdn_attn --format safetensors --dtype bf16 --out gdn_attn_bf16 > /dev/null
"$lat" export --checkpoint tied_byte --format safetensors --out tied_byte_f32 > /dev/null
"$lat" export --checkpoint qwen --format hf --out qwen_hf > /dev/null
"$lat" export --checkpoint tied_byte --format hf --out tied_byte_hf > /dev/null
printf 'Caf\xc3\xa9 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x99\x82\n' > multilingual.txt
"$lat" tokenizer train --vocab-size 300 --out spm_bpe tiny.txt multilingual.txt > /dev/null
"$lat" tokenizer train --vocab-size 294 --model-type unigram --out spm_unigram tiny.txt multilingual.txt > /dev/null

mkdir -p "$corpus"/{config,checkpoint,safetensors,token_files,hf_config,hf_tokenizer,sentencepiece}
cp spm_bpe/tokenizer.model "$corpus/sentencepiece/bpe.model"
cp spm_unigram/tokenizer.model "$corpus/sentencepiece/unigram.model"
cp qwen_hf/config.json "$corpus/hf_config/qwen_hybrid.json"
cp tied_byte_hf/config.json "$corpus/hf_config/tied_gdn.json"
cp qwen_hf/tokenizer.json "$corpus/hf_tokenizer/char_hf.json"
cp tied_byte_hf/tokenizer.json "$corpus/hf_tokenizer/byte_hf.json"
cp gdn_attn_f32/tokenizer.json "$corpus/hf_tokenizer/char_lat.json"
cp tied_byte_f32/tokenizer.json "$corpus/hf_tokenizer/byte_lat.json"
cp "$src"/configs/*.yaml "$corpus/config/"
cp gdn_attn/config.yaml "$corpus/config/resolved_gdn_attn.yaml"
cp attn_sgd/ckpt_00000002.h5 "$corpus/checkpoint/attn_sgd.h5"
# The same checkpoint as h5repack rewrites it with shuffle, gzip and fletcher32 (hdf5-tools).
h5repack -L -f SHUF -f GZIP=9 -f FLET "$corpus/checkpoint/attn_sgd.h5" "$corpus/checkpoint/attn_sgd_gzip.h5"
cp gdn_attn_h5/model.h5 "$corpus/checkpoint/gdn_attn_weights.h5"

/usr/bin/python3 - "$corpus" <<'PY'
import os, struct, sys
import h5py, numpy as np

corpus = sys.argv[1]

def pack(export_dir, out):
    """model.safetensors, config.json, tokenizer.json, each as a u32 LE length then its bytes."""
    blob = b""
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        path = os.path.join(export_dir, name)
        if not os.path.exists(path):
            break
        data = open(path, "rb").read()
        blob += struct.pack("<I", len(data)) + data
    open(os.path.join(corpus, "safetensors", out), "wb").write(blob)

pack("gdn_attn_f32", "gdn_attn_f32.pack")
pack("gdn_attn_bf16", "gdn_attn_bf16.pack")
pack("tied_byte_f32", "tied_byte_f32.pack")

import json
hf = json.load(open("qwen_hf/config.json"))
for key in ("layer_types", "rope_parameters"):
    del hf[key]
hf.update(rope_theta=1000000.0, partial_rotary_factor=0.25, full_attention_interval=2, mtp_num_hidden_layers=1)
json.dump(hf, open(os.path.join(corpus, "hf_config", "qwen_hybrid_old_keys.json"), "w"), indent=2, sort_keys=True)
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": {"type": "BertPreTokenizer"},
           "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}},
          open(os.path.join(corpus, "hf_tokenizer", "foreign_wordpiece.json"), "w"))

tokens = os.path.join(corpus, "token_files")
ids = np.arange(64, dtype=np.int64) * 37 % 50
ids.astype("<u2").tofile(os.path.join(tokens, "raw_uint16.bin"))
ids.astype("<u4").tofile(os.path.join(tokens, "raw_uint32.bin"))
for version, dtype in ((1, "<u2"), (2, "<u4")):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, version, len(ids))
    with open(os.path.join(tokens, f"llmc_v{version}.bin"), "wb") as f:
        f.write(header.tobytes() + ids.astype(dtype).tobytes())
with h5py.File(os.path.join(tokens, "int32_1d.h5"), "w") as f:
    f.create_dataset("tokens", data=ids.astype(np.int32))
with h5py.File(os.path.join(tokens, "uint16_2d_chunked.h5"), "w") as f:
    f.create_dataset("tokens", data=ids.astype(np.uint16).reshape(8, 8), chunks=(4, 8), compression="gzip")
PY
du -sh "$corpus"/*
