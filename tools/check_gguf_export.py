#!/usr/bin/env python3
"""Checks `lat export --format gguf` against llama.cpp itself (llama-cpp-python; `make interop`).

Usage (inside the virtualenv `make interop` creates):
  .venv-interop/bin/python tools/check_gguf_export.py [--lat build/lat] [--text data/tinyshakespeare.txt]
                                                      [--vocab-dir DIR] [--keep DIR] [--only NAME]

For each tiny model lat trains here in seconds, all but the last with gdn layers of 4 value
heads over 2 key heads and gated attention with partial RoPE:
  char           plain norms, untied embeddings;           GGUF f32, f16, bf16, q8_0
  byte           zero-centred norms, tied embeddings;      GGUF f32, f16, bf16, q8_0
  gpt-2          GPT-2's byte-level BPE tokenizer.json (rebuilt from llama.cpp's test vocabulary,
                 as tools/check_tokenizers.py does; fetched once into --vocab-dir), plain norms,
                 untied, d_model 32;                       GGUF f32, f16
  sentencepiece  a BPE .model from `lat tokenizer train --vocab-size 1000` on the text,
                 zero-centred norms, untied;               GGUF f32, f16, q8_0
  granite        char, mamba2 and attn layers (llama.cpp's granitehybrid: 8 mamba heads in 2
                 groups, attention without gate or q/k norm), plain norms, untied; GGUF f32, f16
  kimi           char, kda and mla layers (llama.cpp's kimi-linear: 4 heads of 16 in both, an
                 mla latent of 32 with a shared key part of 8), plain norms, tied; GGUF f32, f16, q8_0
exported as GGUF and loaded by llama.cpp on CPU (lat and llama.cpp on one thread):
  ids      llama.cpp's tokenization of several prompts (accents and other multi-byte characters,
           newlines, runs of spaces; for the subword models also digits, CJK, an emoji, a tab and a
           carriage return) equals `lat tokenizer encode`, and detokenizes back to the text;
  logits   llama.cpp's next-token logits over a 64-token prompt (f32 KV cache) against lat's
           (`lat export --format safetensors --check-tokens`, lat's own forward): max|diff| / max|lat| below
           1e-4 for f32 weights, 1e-2 for f16 and bf16;
  greedy   llama.cpp's greedy 60-token completion of every prompt (its sampler, EOS handling
           included) equals `lat generate --temperature 0`, for f32 and f16;
  val loss q8_0's loss through llama.cpp on lat's val split (the windows `lat eval` uses) within
           1% of `lat eval`'s fp32 val loss.
Logits are compared over lat's vocabulary (for char and byte, llama.cpp's has one more token,
the appended end-of-text token; a subword vocabulary brings its own). Exit 0 when every check
passes; otherwise 1 with one line naming the first failure.
"""
import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from interop_common import (DEFAULT_VOCAB_DIR, FAMILIES, CheckFailed, Lat, fetch_vocabularies,
                            rebuild_tokenizer_json, train_tiny_model, write_tokenizer_dir)

REL_TOL = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2}
LOSS_TOL = 0.01
NEW_TOKENS = 60
LOGIT_TOKENS = 64
PROMPTS = ["ROMEO:\nBut soft, what light", "First Citizen:\nWe are  accounted poor", "naïve café — ½ the"]
TEXT_EXTRA = "\nnaïve café — ½ the rest.\n"
TEXT_CHARS = 30_000
SEED = 1234
# lat and llama.cpp run on one thread: the models are so small that a second thread gains less
# than its synchronization costs, many times over when other processes keep the cores busy.
ONE_THREAD = 1

LAT_CONFIG = """\
model:
  d_model: {d_model}
  n_layers: 4
  n_heads: 2
  head_dim: 16
  expand_v: 1.0
  layers: "gdn,attn"
  intermediate_size: 128
  tie_embeddings: {tie}
  norm_zero_centered: {zero_centered}
  attn:
    n_heads: 4
    head_dim: 16
    n_kv_heads: 2
    output_gate: true
    qk_norm: true
    rope_fraction: 0.5
  linear:
    n_v_heads: 4
    chunk_size: 16
data:
  path: text.txt
  tokenizer: "{tokenizer}"
  block_size: 64
  val_fraction: 0.1
train:
  batch_size: {batch_size}
  max_steps: {max_steps}
  lr: 1.0e-2
  warmup: 5
  eval_every: 0
  eval_batches: 2
  log_every: 30
  ckpt_every: 1000
  out_dir: run
  seed: {seed}
"""

# The Mamba-2 hybrid (llama.cpp's granitehybrid): mamba2 layers of 8 heads with B and C in 2
# groups, attention with grouped kv heads and partial RoPE (no gate, no q/k norm: Granite has
# none); data and train as LAT_CONFIG's.
GRANITE_CONFIG = """\
model:
  d_model: {d_model}
  n_layers: 4
  n_heads: 4
  layers: "mamba2,attn"
  intermediate_size: 128
  tie_embeddings: {tie}
  norm_zero_centered: {zero_centered}
  attn:
    n_heads: 4
    head_dim: 16
    n_kv_heads: 2
    rope_fraction: 0.5
  mamba:
    d_state: 16
    head_dim: 16
    expand: 2
    n_groups: 2
    chunk_size: 16
""" + LAT_CONFIG[LAT_CONFIG.index("data:"):]

# Kimi Linear (llama.cpp's kimi-linear): kda layers and one mla layer, with one head count for
# both (llama.cpp has one), value head dim = key head dim (llama.cpp needs it), no low-rank
# query (its graph has none); data and train as LAT_CONFIG's.
KIMI_CONFIG = """\
model:
  d_model: {d_model}
  n_layers: 4
  n_heads: 4
  head_dim: 16
  layers: "kda,kda,mla,kda"
  intermediate_size: 128
  tie_embeddings: {tie}
  norm_zero_centered: {zero_centered}
  mla:
    kv_lora_rank: 32
    qk_nope_head_dim: 16
    qk_rope_head_dim: 8
    v_head_dim: 16
  linear:
    chunk_size: 16
""" + LAT_CONFIG[LAT_CONFIG.index("data:"):]

# Subword models: every prompt above, plus runs of spaces and newlines, digits, CJK, an emoji
# (SentencePiece spells it in byte-fallback tokens), a tab and a carriage return.
SUBWORD_PROMPTS = PROMPTS + ["  two  spaces\n\n\n12345 the end, 2026", "中文 🙂 tabs\tand\r\n"]
# The byte-level BPE: GPT-2's (50257 tokens, the smallest of llama.cpp's test vocabularies).
GPT2 = "gpt-2"
# The SentencePiece model: `lat tokenizer train` (model type bpe, byte fallback) on the text.
SENTENCEPIECE = "sentencepiece"
SPM_VOCAB_SIZE = 1000


@dataclass
class Model:
    """One tiny model of the check: its tokenizer ("char", "byte", GPT2 or SENTENCEPIECE), its
    norms and embeddings, the GGUF dtypes exported (q8_0: the val loss check), its prompts, and
    whether the export appends an end-of-text token (char and byte; a subword vocabulary brings
    its own)."""
    name: str
    tokenizer: str
    tie: bool
    zero_centered: bool
    dtypes: tuple
    prompts: list
    appends_end_of_text: bool
    d_model: int = 64
    batch_size: int = 8
    max_steps: int = 40
    config: str = LAT_CONFIG
    directory: str = ""  # its work directory's name; the tokenizer's when empty


MODELS = [
    Model("char, plain norms, untied", "char", tie=False, zero_centered=False, dtypes=("f32", "f16", "bf16", "q8_0"),
          prompts=PROMPTS, appends_end_of_text=True),
    Model("byte, zero-centred norms, tied", "byte", tie=True, zero_centered=True, dtypes=("f32", "f16", "bf16", "q8_0"),
          prompts=PROMPTS, appends_end_of_text=True),
    # Subword models are untied and take 100 steps of 4 sequences: tied, or with fewer steps,
    # greedy decoding repeats the newline token from the first step on, which compares little.
    # d_model 32: the 50257-row embedding is most of the cost of training and running it.
    Model("gpt-2 byte-level BPE tokenizer.json, plain norms, untied", GPT2, tie=False, zero_centered=False,
          dtypes=("f32", "f16"), prompts=SUBWORD_PROMPTS, appends_end_of_text=False, d_model=32, batch_size=4,
          max_steps=100),
    Model(f"sentencepiece bpe {SPM_VOCAB_SIZE} (lat tokenizer train), zero-centred norms, untied", SENTENCEPIECE,
          tie=False, zero_centered=True, dtypes=("f32", "f16", "q8_0"), prompts=SUBWORD_PROMPTS,
          appends_end_of_text=False, batch_size=4, max_steps=100),
    Model("char mamba2 + attn (granitehybrid), plain norms, untied", "char", tie=False, zero_centered=False,
          dtypes=("f32", "f16"), prompts=PROMPTS, appends_end_of_text=True, config=GRANITE_CONFIG,
          directory="granite"),
    Model("char kda + mla (kimi-linear), plain norms, tied", "char", tie=True, zero_centered=False,
          dtypes=("f32", "f16", "q8_0"), prompts=PROMPTS, appends_end_of_text=True, config=KIMI_CONFIG,
          directory="kimi"),
]


def prepare_tokenizer(model, lat_exe, work, text, vocab_dir):
    """data.tokenizer for `model`: "char" or "byte", or the path of the tokenizer it makes in
    work: GPT-2's tokenizer.json rebuilt from llama.cpp's test vocabulary (fetched into
    vocab_dir once), or a SentencePiece model `lat tokenizer train` makes from `text`."""
    if model.tokenizer in ("char", "byte"):
        return model.tokenizer
    directory = work / f"tokenizer-{model.tokenizer}"
    if model.tokenizer == GPT2:
        fetch_vocabularies(vocab_dir, [GPT2])
        write_tokenizer_dir(directory, rebuild_tokenizer_json(vocab_dir / f"ggml-vocab-{GPT2}.gguf", FAMILIES[GPT2]))
        return str(directory / "tokenizer.json")
    corpus = work / "tokenizer-corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    Lat(lat_exe, work, ONE_THREAD)("tokenizer", "train", "--vocab-size", SPM_VOCAB_SIZE, "--out", directory, corpus)
    return str(directory / "tokenizer.model")


def load_llama(path):
    from llama_cpp import Llama

    # type_k / type_v 0 = GGML_TYPE_F32: an f32 KV cache, so that f32 weights are compared as f32.
    return Llama(model_path=str(path), n_ctx=256, n_batch=256, n_threads=ONE_THREAD, n_threads_batch=ONE_THREAD,
                 logits_all=True, verbose=False, type_k=0, type_v=0, seed=SEED)


def llama_logits(llm, ids):
    """llama.cpp's logits [len(ids), n_vocab] for `ids` from a fresh state (numpy float64)."""
    import numpy as np

    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float64)


def lat_logits(lat, ids, out_dir):
    """lat's logits [T, vocab] for `ids` (its forward), from `lat export --format safetensors
    --check-tokens` (every mixer kind exports so)."""
    from safetensors.numpy import load_file

    return load_file(str(lat.check_logits_file("run", ids, out_dir, fmt="safetensors")))["logits"].astype("float64")


def check_ids(name, lat, llm, prompts):
    for prompt in prompts:
        ids = lat.encode("run", prompt)
        found = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=False)
        if found != ids:
            raise CheckFailed(f"{name}: ids of {prompt!r}: llama.cpp {found} vs lat {ids}")
        text = llm.detokenize(found).decode("utf-8")
        if text != prompt:
            raise CheckFailed(f"{name}: llama.cpp detokenizes {prompt!r} as {text!r}")


def check_model(model, lat_exe, text, work, vocab_dir):
    import numpy as np

    name = model.name
    tokenizer = prepare_tokenizer(model, lat_exe, work, text, vocab_dir)
    config = model.config.format(tokenizer=tokenizer, tie=str(model.tie).lower(), d_model=model.d_model,
                               zero_centered=str(model.zero_centered).lower(), batch_size=model.batch_size,
                               max_steps=model.max_steps, seed=SEED)
    run_dir = work / (model.directory or model.tokenizer)
    lat = train_tiny_model(lat_exe, run_dir, text, config, threads=ONE_THREAD)
    figures = []

    # The 64-token prompt: the start of the val text.
    tokens = lat.encode("run", text)
    n_train = int(len(tokens) * (1.0 - 0.1))
    val = tokens[n_train:]
    prompt_ids = val[:LOGIT_TOKENS]
    reference = lat_logits(lat, prompt_ids, run_dir / "check")
    vocab = reference.shape[1]
    expected_vocab = vocab + (1 if model.appends_end_of_text else 0)

    llms = {}
    for dtype in model.dtypes:
        path = run_dir / f"model-{dtype}.gguf"
        lat("export", "--checkpoint", "run", "--format", "gguf", "--dtype", dtype, "--out", path)
        llms[dtype] = load_llama(path)
        if llms[dtype].n_vocab() != expected_vocab:
            raise CheckFailed(f"{name} {dtype}: llama.cpp's vocabulary has {llms[dtype].n_vocab()} tokens, "
                              f"expected {expected_vocab} (lat's {vocab}"
                              f"{' and the end-of-text token' if model.appends_end_of_text else ''})")

    check_ids(name, lat, llms["f32"], model.prompts)
    figures.append(f"ids of {len(model.prompts)} prompts identical")

    diffs = []
    for dtype, tol in REL_TOL.items():
        if dtype not in llms:
            continue
        found = llama_logits(llms[dtype], prompt_ids)[:, :vocab]
        diff = float(np.abs(found - reference).max() / np.abs(reference).max())
        if not diff < tol:
            raise CheckFailed(f"{name}: {dtype} logits over {LOGIT_TOKENS} tokens: relative difference {diff:.3g} "
                              f">= {tol}")
        diffs.append(f"{dtype} {diff:.1e}")
    figures.append("logits " + ", ".join(diffs))

    for k, prompt in enumerate(model.prompts):
        lat_text = lat.greedy("run", prompt, NEW_TOKENS)
        for dtype in ("f32", "f16"):
            llms[dtype].reset()
            completion = llms[dtype].create_completion(prompt, max_tokens=NEW_TOKENS, temperature=0.0, top_k=1,
                                                        seed=SEED)
            found = completion["choices"][0]["text"]
            if found != lat_text:
                raise CheckFailed(f"{name}: {dtype} greedy continuation of prompt {k}: llama.cpp {found!r} vs "
                                  f"lat {lat_text!r}")
    figures.append(f"greedy {NEW_TOKENS} x {len(model.prompts)} identical (f32, f16)")

    if "q8_0" in llms:
        figures.append(check_q8_0_val_loss(name, lat, llms["q8_0"], val, vocab))
    return name, "; ".join(figures)


def check_q8_0_val_loss(name, lat, llm, val, vocab):
    """q8_0's loss through llama.cpp over the val tokens, in the windows `lat eval` uses, against
    `lat eval`'s fp32 val loss; returns the figures."""
    import numpy as np

    lat_eval = json.loads(lat("eval", "--checkpoint", "run"))
    total, count = 0.0, 0
    for start in range(0, len(val) - 1, 64):
        window = val[start:start + 65]
        logits = llama_logits(llm, window[:-1])[:, :vocab]
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        total -= float(sum(log_probs[t, window[t + 1]] for t in range(len(window) - 1)))
        count += len(window) - 1
    if count != lat_eval["tokens"]:
        raise CheckFailed(f"{name}: q8_0 val loss over {count} targets, lat eval's over {lat_eval['tokens']}")
    q8_loss = total / count
    rel = abs(q8_loss - lat_eval["val_loss"]) / lat_eval["val_loss"]
    if not rel < LOSS_TOL:
        raise CheckFailed(f"{name}: q8_0 val loss {q8_loss:.4f} vs lat eval {lat_eval['val_loss']:.4f}: "
                          f"relative {rel:.3g} >= {LOSS_TOL}")
    return f"val loss q8_0 {q8_loss:.4f} vs lat {lat_eval['val_loss']:.4f} ({rel:.1e})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lat", default="build/lat", help="the lat executable")
    parser.add_argument("--text", default="data/tinyshakespeare.txt", help="training text")
    parser.add_argument("--vocab-dir", default=DEFAULT_VOCAB_DIR,
                        help="where llama.cpp's test vocabularies are kept (fetched when missing)")
    parser.add_argument("--keep", help="work directory to keep (default: a temporary one, removed)")
    parser.add_argument("--only", choices=[m.directory for m in MODELS if m.directory],
                        help="check only this model (its work directory's name)")
    args = parser.parse_args()
    text = Path(args.text).read_text(encoding="utf-8")[:TEXT_CHARS] + TEXT_EXTRA
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="check_gguf_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for model in MODELS:
            if args.only and model.directory != args.only:
                continue
            name, line = check_model(model, args.lat, text, work.resolve(), Path(args.vocab_dir).expanduser())
            print(f"gguf {name}: {line}", flush=True)
    except CheckFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("gguf: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
