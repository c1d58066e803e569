#!/usr/bin/env python3
"""Checks lat's Hugging Face interop against transformers' own Qwen3.5 (`make interop`).

Usage (inside the virtualenv `make interop` creates):
  .venv-interop/bin/python tools/check_hf_export.py [--lat build/lat] [--text data/tinyshakespeare.txt]
                                                    [--keep DIR] [--only kimi]

Eight checks, all on CPU in float32, each printing one line with its measured figures:
  (a) lat -> transformers: trains tiny lat models (gdn and gated attention layers, GVA value
      heads, attention heads and head size apart from the linear layers', partial RoPE; zero-
      centred norms with tied embeddings, plain norms with untied ones), exports them with
      `lat export --format hf`, loads the directory with AutoModelForCausalLM and
      AutoTokenizer, and compares: the tokenizer's ids with lat's; transformers' logits with
      lat's (`--check-tokens`: lat's forward and its token-by-token generation path); greedy
      continuations of 60 tokens (`model.generate`, with its cache) with
      `lat generate --temperature 0` on the export.
  (b) transformers -> lat: a randomly initialized Qwen3_5ForCausalLM (tied and untied), its
      weights spread out so that every greedy step has a clear margin, saved with
      save_pretrained beside a char tokenizer; lat reads the directory (`--checkpoint DIR`)
      and the same logits and greedy comparisons run the other way.
  (c) round trip: lat's export of the directory of (b) holds every tensor of it bit for bit
      (same names, dtypes and shapes) and the same config.
  (d) subword tokenizers: a Qwen3_5ForCausalLM directory with a SentencePiece tokenizer.model
      (trained by sentencepiece) or a byte-level BPE tokenizer.json (trained by tokenizers,
      and the same loaded and saved again by transformers); lat reads it (`--checkpoint
      DIR`): `lat tokenizer encode` gives the library's own ids on every prompt, `lat generate`
      continues a text prompt, and `lat export --format hf` carries the tokenizer file byte
      for byte with a tokenizer_config.json that makes AutoTokenizer give lat's ids.
  (e) a Qwen3.5 directory with its real tokenizer: Qwen3.5's tokenizer.json (rebuilt from
      llama.cpp's ggml-vocab-qwen35.gguf by tools/interop_common.py) loaded and saved by
      AutoTokenizer beside a random Qwen3_5ForCausalLM of the real vocabulary's 151936 rows:
      `lat generate --prompt` prints exactly the text of transformers' greedy generate; `lat
      train` with `init_from: DIR` and no data.tokenizer fine-tunes it on text (val loss
      falls); transformers loads the run's `--format hf` export and its greedy text is lat's.
  (f) `lat tokenizer train` (bpe): AutoTokenizer on the directory it writes gives lat's ids on
      the training text and tests/data/multilingual.txt.
  (g) granitemoehybrid (GraniteMoeHybridForCausalLM, dense): (a) for a lat-trained mamba2 +
      attn model; (b) and (c) for random models with 2 groups of B and C (untied with RoPE and
      an attention layer; tied, without RoPE, mamba layers only; transformers then in float64,
      so that its Mamba2Mixer forward and cached step are a float64 reference for lat's float32);
      and a model with attention
      but no RoPE refused naming position_embedding_type.
  (h) kimi_linear (KimiLinearForCausalLM, a dense MLP in every layer): (a) for a lat-trained
      kda + mla model; (b) and (c) for random models (untied with a plain q_proj, tied with
      q_lora_rank; transformers in float64 on the saved float32 weights); and a model with MoE
      layers refused naming mlp_layer_types.

Logits match when max|lat - transformers| / max|transformers| < 1e-4. Exit 0 when every check
passes; otherwise 1 with one line naming the first failure. transformers runs its PyTorch
path only when fla and causal_conv1d are not importable (it would call their GPU-only kernels),
so the script refuses to run beside them.
"""
import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from interop_common import CheckFailed, Lat, train_tiny_model

REL_TOL = 1e-4
# The test models of (b) must not have greedy steps closer to a tie than this (top two logits
# apart by less than MIN_MARGIN * max|logit|): ten times the float32 differences between lat
# and transformers (about 1e-6), so that rounding cannot decide a step.
MIN_MARGIN = 1e-5
NEW_TOKENS = 60
SEED = 1234
MULTILINGUAL = Path(__file__).resolve().parent.parent / "tests/data/multilingual.txt"
# Prompts for (a) and (b); every character is in the vocabulary of both (TEXT_EXTRA adds the
# non-ASCII ones to the training text).
PROMPTS = ["ROMEO:\nBut soft, what light", "First Citizen:\nWe are accounted poor", "naïve café — ½ the"]
TEXT_EXTRA = "\nnaïve café — ½ the rest.\n"
TEXT_CHARS = 30_000
# Packages that transformers prefers over its PyTorch path for Qwen3.5's linear layers; both
# run on CUDA only.
GPU_ONLY_KERNELS = ("fla", "causal_conv1d")


def refuse_gpu_only_kernels():
    found = [name for name in GPU_ONLY_KERNELS if importlib.util.find_spec(name) is not None]
    if found:
        raise CheckFailed(f"{', '.join(found)} importable in {sys.prefix}: transformers would run their GPU-only "
                          "kernels instead of its PyTorch path; use a virtualenv without them (make interop)")


def relative_difference(found, reference):
    """max|found - reference| / max|reference| over float64 copies; shapes must agree."""
    if tuple(found.shape) != tuple(reference.shape):
        raise CheckFailed(f"logits shapes differ: lat {tuple(found.shape)} vs transformers {tuple(reference.shape)}")
    found, reference = found.double(), reference.double()
    return ((found - reference).abs().max() / reference.abs().max()).item()


def lat_check_logits(lat, checkpoint, ids, out_dir):
    """lat's logits for `ids` from `lat export --format hf --check-tokens`: (forward, step by step)."""
    from safetensors.torch import load_file

    check = load_file(str(lat.check_logits_file(checkpoint, ids, out_dir)))
    return check["logits"], check["logits_step"]


def transformers_logits(model, ids):
    """Logits [T, vocab] of transformers' forward for `ids`."""
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def transformers_greedy(model, ids, use_cache=True):
    """(continuation ids, smallest top-1 minus top-2 gap / max|logit| over the steps) of model.generate."""
    import torch

    if not use_cache:  # greedy by hand: a whole forward per step
        sequence, margins = list(ids), []
        with torch.no_grad():
            for _ in range(NEW_TOKENS):
                logits = model(torch.tensor([sequence])).logits[0, -1]
                top = logits.topk(2).values
                margins.append(((top[0] - top[1]) / logits.abs().max()).item())
                sequence.append(int(logits.argmax()))
        return sequence[len(ids):], min(margins)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, use_cache=use_cache,
                             output_scores=True, return_dict_in_generate=True)
    margin = min(((s[0].topk(2).values[0] - s[0].topk(2).values[1]) / s[0].abs().max()).item() for s in out.scores)
    return out.sequences[0, len(ids):].tolist(), margin


def compare_model(name, lat, source, hf_dir, model, tokenizer, vocab, work, min_margin=0.0, use_cache=True):
    """Logits and greedy continuations of `model` (transformers, loaded from `hf_dir`) against
    lat's, on every prompt: lat's logits from `lat export --format hf --check-tokens` of
    `source` (computed from the export read back), its continuations from `lat generate` of
    `hf_dir`. `vocab` is lat's (entry i = id i). Greedy steps whose top two logits lie closer
    than `min_margin` (relative to the largest) fail the check: their order could turn on
    rounding. `use_cache` False: transformers generates without its cache. Returns the figures
    for the report line."""
    index = {c: i for i, c in enumerate(vocab)}
    worst = {"logits": 0.0, "step": 0.0}
    margin = float("inf")
    for k, prompt in enumerate(PROMPTS):
        ids = [index[c] for c in prompt]
        encoded = tokenizer.encode(prompt, add_special_tokens=False)
        if encoded != ids:
            raise CheckFailed(f"{name}: tokenizer ids of {prompt!r}: transformers {encoded} vs lat {ids}")
        lat_full, lat_step = lat_check_logits(lat, source, ids, work / f"check_{k}")
        full = transformers_logits(model, ids)
        figures = {"logits": relative_difference(lat_full, full), "step": relative_difference(lat_step, full)}
        for key, value in figures.items():
            worst[key] = max(worst[key], value)
            if not value < REL_TOL:
                raise CheckFailed(f"{name}: prompt {k} {prompt!r}: {key} relative difference {value:.3g} >= {REL_TOL}")
        hf_next, step_margin = transformers_greedy(model, ids, use_cache)
        margin = min(margin, step_margin)
        if step_margin < min_margin:
            raise CheckFailed(f"{name}: prompt {k}: a greedy step of transformers has its top two logits "
                              f"{step_margin:.3g} apart (relative), below {min_margin:.3g}: the test model is "
                              "too close to a tie for greedy decoding to be compared")
        hf_text = tokenizer.decode(hf_next)
        lat_text = lat.greedy(hf_dir, prompt, NEW_TOKENS)
        if lat_text != hf_text:
            at = next((i for i, (a, b) in enumerate(zip(lat_text, hf_text)) if a != b),
                      min(len(lat_text), len(hf_text)))
            raise CheckFailed(f"{name}: prompt {k}: greedy continuations differ at character {at}: "
                              f"lat {lat_text!r} vs transformers {hf_text!r} (smallest margin {step_margin:.3g})")
    return (f"max relative difference: logits {worst['logits']:.2e}, lat step-by-step {worst['step']:.2e}; "
            f"greedy {NEW_TOKENS} x {len(PROMPTS)} identical{'' if use_cache else ' (transformers without cache)'} "
            f"(smallest margin {margin:.2e})")


# --- (a) lat -> transformers -------------------------------------------------------------

LAT_CONFIG = """\
model:
  d_model: 48
  n_layers: 4
  n_heads: 2
  head_dim: 16
  expand_v: 2.0
  layers: "gdn,attn"
  tie_embeddings: {tie}
  norm_zero_centered: {zero_centered}
  attn:
    n_heads: 4
    head_dim: 12
    n_kv_heads: 2
    output_gate: true
    qk_norm: true
    rope_fraction: 0.5
  linear:
    n_v_heads: 4
    chunk_size: 16
data:
  path: text.txt
  tokenizer: char
  block_size: 64
train:
  batch_size: 4
  max_steps: 20
  lr: 1.0e-2
  warmup: 5
  eval_every: 0
  eval_batches: 2
  log_every: 10
  ckpt_every: 1000
  out_dir: {out_dir}
  seed: {seed}
"""


def lat_vocab(lat, checkpoint, out_dir):
    """lat's own char vocabulary (entry i = id i), from its safetensors export's tokenizer.json."""
    lat("export", "--checkpoint", checkpoint, "--format", "safetensors", "--out", out_dir)
    tokenizer = json.loads((Path(out_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    if tokenizer.get("type") != "char":
        raise CheckFailed(f"{out_dir}/tokenizer.json: expected type char, got {tokenizer.get('type')!r}")
    return tokenizer["vocab"]


def check_lat_to_transformers(lat, work, text, tie, zero_centered):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = f"lat->transformers ({'tied' if tie else 'untied'}, norm_zero_centered {str(zero_centered).lower()})"
    run = work / f"a_{int(tie)}{int(zero_centered)}"
    lat_run = train_tiny_model(lat.exe, run, text, LAT_CONFIG.format(tie=str(tie).lower(),
                                                                     zero_centered=str(zero_centered).lower(),
                                                                     out_dir="run", seed=SEED))
    vocab = lat_vocab(lat_run, run / "run", run / "lat_export")
    hf_dir = run / "hf"
    lat_run("export", "--checkpoint", run / "run", "--format", "hf", "--out", hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype="float32").eval()
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    if model.config.model_type != "qwen3_5_text" or type(model).__name__ != "Qwen3_5ForCausalLM":
        raise CheckFailed(f"{name}: {hf_dir} loads as {type(model).__name__} ({model.config.model_type}), "
                          "expected Qwen3_5ForCausalLM (qwen3_5_text)")
    if model.config.tie_word_embeddings != tie:
        raise CheckFailed(f"{name}: tie_word_embeddings {model.config.tie_word_embeddings}, expected {tie}")
    return name, compare_model(name, lat_run, run / "run", hf_dir, model, tokenizer, vocab, run)


# --- (b) transformers -> lat, (c) round trip -----------------------------------------------

def qwen35_config(vocab_size, tie):
    """Small Qwen3.5 dimensions that exercise every mapping: GVA (4 value heads per 2 key
    heads), attention heads (4) and head size (12) apart from the linear layers' (2, 16),
    value heads of 32, partial rotary 0.5, both layer kinds twice."""
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=vocab_size, hidden_size=48, intermediate_size=96, num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=12,
        linear_num_key_heads=2, linear_key_head_dim=16, linear_num_value_heads=4, linear_value_head_dim=32,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=tie,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})


def spread_weights(model):
    """Replaces transformers' small initialization (std 0.02, norms at their identity) by
    weights that keep activations of order one: matmul weights N(0, 1/fan_in), every norm
    weight moved off its identity, A_log and dt_bias jittered. Then the attention is peaked,
    the gates are not all one half, and greedy steps have clear margins. Embeddings N(0, 1/16):
    larger ones dominate the residual stream, and a tied lm_head then repeats the last token."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 0.25)
            elif name.endswith("conv1d.weight"):
                p.normal_(0.0, p.shape[-1] ** -0.5)
            elif name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: x * w
                p.uniform_(0.5, 1.5)
            elif name.endswith("norm.weight"):  # zero-centred RMSNorm: x * (1 + w)
                p.uniform_(-0.5, 0.5)
            elif name.endswith("A_log"):
                p.uniform_(-1.0, 1.0)
            elif name.endswith("dt_bias"):
                p.uniform_(-1.0, 1.0)
            elif p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
            else:
                raise CheckFailed(f"spread_weights: no rule for parameter {name} {tuple(p.shape)}")


def write_char_tokenizer(directory, vocab):
    """tokenizer.json and tokenizer_config.json for a char tokenizer in the form lat writes:
    a BPE model whose vocabulary is the characters (id i = vocab[i]) and no merges, so each
    character is one token; the Fuse decoder joins them back."""
    from tokenizers import Tokenizer, decoders, models

    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(vocab)}, merges=[]))
    tokenizer.decoder = decoders.Fuse()
    tokenizer.save(str(Path(directory) / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    (Path(directory) / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def check_transformers_to_lat(lat, work, vocab, tie):
    import torch
    from transformers import AutoTokenizer, Qwen3_5ForCausalLM

    name = f"transformers->lat ({'tied' if tie else 'untied'})"
    torch.manual_seed(SEED)
    model = Qwen3_5ForCausalLM(qwen35_config(len(vocab), tie)).float().eval()
    spread_weights(model)
    hf_dir = work / f"b_{int(tie)}" / "hf"
    model.save_pretrained(hf_dir)
    write_char_tokenizer(hf_dir, vocab)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    figures = compare_model(name, lat, hf_dir, hf_dir, model, tokenizer, vocab, work / f"b_{int(tie)}",
                            min_margin=MIN_MARGIN)
    return name, figures, hf_dir


def check_round_trip(lat, work, hf_dir):
    """lat's export of a transformers directory holds the same tensors, bit for bit, and config."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig

    name = f"round trip ({hf_dir.parent.name})"
    out = hf_dir.parent / "lat_hf"
    lat("export", "--checkpoint", hf_dir, "--format", "hf", "--out", out)
    original, exported = load_file(str(hf_dir / "model.safetensors")), load_file(str(out / "model.safetensors"))
    if set(original) != set(exported):
        raise CheckFailed(f"{name}: tensor names differ: only in transformers' "
                          f"{sorted(set(original) - set(exported))}, only in lat's "
                          f"{sorted(set(exported) - set(original))}")
    for key, a in original.items():
        b = exported[key]
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            raise CheckFailed(f"{name}: {key}: transformers {a.dtype} {tuple(a.shape)} vs lat {b.dtype} "
                              f"{tuple(b.shape)}{'' if a.shape != b.shape else ', values differ'}")
    ignored = {"transformers_version", "_name_or_path"}  # the writer's version; where it was read from
    a = {k: v for k, v in AutoConfig.from_pretrained(hf_dir).to_dict().items() if k not in ignored}
    b = {k: v for k, v in AutoConfig.from_pretrained(out).to_dict().items() if k not in ignored}
    differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if differing:
        raise CheckFailed(f"{name}: config fields differ: " +
                          "; ".join(f"{k}: transformers {a.get(k)!r} vs lat {b.get(k)!r}" for k in differing))
    return name, f"{len(original)} tensors bit for bit, {len(a)} config fields equal"


SUBWORD_PROMPTS = PROMPTS + ["  two  spaces\n\n12345 the end", "中文 🙂 tabs\tand\r\n"]


def train_sentencepiece(directory, text):
    """A SentencePiece BPE model of `text` (identity normalization, spaces kept, byte fallback:
    decode(encode(text)) == text) as DIR/tokenizer.model; returns (encode, size)."""
    import sentencepiece as spm

    corpus = Path(directory) / "corpus.txt"
    corpus.write_text(text + "".join(SUBWORD_PROMPTS), encoding="utf-8")
    prefix = Path(directory) / "sp"
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(prefix), vocab_size=400, model_type="bpe",
                                   byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, num_threads=1, minloglevel=2)
    shutil.copyfile(f"{prefix}.model", Path(directory) / "tokenizer.model")
    processor = spm.SentencePieceProcessor(model_file=f"{prefix}.model")
    return processor.encode, processor.get_piece_size()


def train_byte_level_bpe(directory, text, resave):
    """A byte-level BPE of `text` as DIR/tokenizer.json (GPT-2's alphabet, one special token);
    `resave`: as transformers writes it after loading it (a TemplateProcessing post_processor
    and its own tokenizer_config.json). Returns (encode, size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tokenizer.train_from_iterator([text], trainer)
    tokenizer.save(str(Path(directory) / "tokenizer.json"))
    if resave:
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
        (Path(directory) / "tokenizer_config.json").write_text(json.dumps(config) + "\n", encoding="utf-8")
        AutoTokenizer.from_pretrained(directory).save_pretrained(directory)
    return (lambda s: tokenizer.encode(s, add_special_tokens=False).ids), tokenizer.get_vocab_size()


def check_subword_tokenizer(lat, work, text, kind):
    import torch
    from transformers import AutoTokenizer, Qwen3_5ForCausalLM

    name = f"subword tokenizer ({kind})"
    base = work / ("d_" + kind.replace(", ", "_").replace(" ", "_"))
    hf_dir = base / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    if kind == "sentencepiece":
        encode, size = train_sentencepiece(base, text)
        shutil.move(str(base / "tokenizer.model"), hf_dir / "tokenizer.model")
        file_name = "tokenizer.model"
    else:
        encode, size = train_byte_level_bpe(hf_dir, text, resave=kind == "bpe, saved by transformers")
        file_name = "tokenizer.json"
    torch.manual_seed(SEED)
    model = Qwen3_5ForCausalLM(qwen35_config(size, tie=True)).float().eval()
    spread_weights(model)
    model.save_pretrained(hf_dir)
    out = base / "lat_hf"
    lat("export", "--checkpoint", hf_dir, "--format", "hf", "--out", out)
    if not (out / file_name).is_file() or (out / file_name).read_bytes() != (hf_dir / file_name).read_bytes():
        raise CheckFailed(f"{name}: {out / file_name} is missing or differs from {hf_dir / file_name}")
    exported = AutoTokenizer.from_pretrained(out)
    for prompt in SUBWORD_PROMPTS:
        ids = lat.encode(hf_dir, prompt)
        if ids != encode(prompt):
            raise CheckFailed(f"{name}: ids of {prompt!r}: the library's {encode(prompt)} vs lat {ids}")
        if exported.encode(prompt) != ids:
            raise CheckFailed(f"{name}: AutoTokenizer of lat's export gives {exported.encode(prompt)} for "
                              f"{prompt!r}, lat {ids}")
    generated = lat("generate", "--checkpoint", hf_dir, "--prompt", PROMPTS[0], "--max-new-tokens", 20,
                    "--temperature", 0)
    if not generated.startswith(PROMPTS[0]) or len(generated) <= len(PROMPTS[0]) + 1:
        raise CheckFailed(f"{name}: lat generate: expected the prompt and a continuation, got {generated!r}")
    return name, (f"{size} tokens; ids equal on {len(SUBWORD_PROMPTS)} prompts (lat, the library, AutoTokenizer of "
                  f"lat's export); {file_name} exported byte for byte; generate continues a text prompt")


# --- (e) a Qwen3.5 directory with its real tokenizer, end to end ---------------------------

QWEN35_PROMPTS = ["ROMEO:\nBut soft, what light", "Größe: naïve café — 中文 🙂 12345"]
QWEN35_NEW_TOKENS = 24
FINETUNE_CONFIG = """\
init_from: {init_from}
{model_keys}data:
  path: text.txt
  block_size: 32
train:
  batch_size: 4
  max_steps: 8
  lr: 1.0e-2
  warmup: 2
  eval_every: 4
  eval_batches: 2
  log_every: 1
  ckpt_every: 1000
  out_dir: run
  seed: {seed}
"""


def qwen35_model_dir(hf_dir):
    """A Qwen3.5-format directory the way a user gets one: Qwen3.5's real byte-level BPE
    (rebuilt from llama.cpp's ggml-vocab-qwen35.gguf by tools/interop_common.py) loaded and
    saved again by transformers (AutoTokenizer, save_pretrained), beside a small random
    Qwen3_5ForCausalLM with the real model's vocabulary size (151936 rows: the tokenizer's
    151646 tokens and padding rows, which are zero so that greedy decoding never picks one).
    Returns (model, tokenizer)."""
    import torch
    from transformers import AutoTokenizer, Qwen3_5ForCausalLM

    from interop_common import DEFAULT_VOCAB_DIR, FAMILIES, fetch_vocabularies, rebuild_tokenizer_json, write_tokenizer_dir

    vocab_dir = Path(DEFAULT_VOCAB_DIR).expanduser()
    fetch_vocabularies(vocab_dir, ["qwen35"])
    gguf_path = vocab_dir / "ggml-vocab-qwen35.gguf"
    source = hf_dir.parent / "qwen35_tokenizer"
    write_tokenizer_dir(source, rebuild_tokenizer_json(gguf_path, FAMILIES["qwen35"]))
    AutoTokenizer.from_pretrained(source).save_pretrained(hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    import gguf

    rows = len(gguf.GGUFReader(str(gguf_path)).fields["tokenizer.ggml.tokens"].data)  # one entry per token
    torch.manual_seed(SEED)
    model = Qwen3_5ForCausalLM(qwen35_config(rows, tie=True)).float().eval()
    spread_weights(model)
    with torch.no_grad():
        model.get_input_embeddings().weight[len(tokenizer):] = 0.0
    model.save_pretrained(hf_dir)
    return model, tokenizer


def check_greedy_text(name, lat, checkpoint, model, tokenizer, prompts):
    """`lat generate --prompt` on `checkpoint` prints exactly the text transformers' greedy
    generate decodes (prompt and continuation), on every one of `prompts`; returns the smallest
    top-two margin of transformers' steps (below MIN_MARGIN fails: rounding could decide)."""
    import torch

    margin = float("inf")
    for k, prompt in enumerate(prompts):
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=QWEN35_NEW_TOKENS, min_new_tokens=QWEN35_NEW_TOKENS,
                                 do_sample=False, use_cache=True, output_scores=True, return_dict_in_generate=True)
        new = out.sequences[0, len(ids):].tolist()
        if max(new) >= len(tokenizer):
            raise CheckFailed(f"{name}: transformers chose a padding row (id {max(new)} >= {len(tokenizer)} tokens)")
        top2 = [s[0].topk(2).values for s in out.scores]
        margin = min(margin, min(((t[0] - t[1]) / s[0].abs().max()).item() for t, s in zip(top2, out.scores)))
        if margin < MIN_MARGIN:
            raise CheckFailed(f"{name}: prompt {k}: a greedy step of transformers has its top two logits {margin:.3g} "
                              f"apart (relative), below {MIN_MARGIN:.3g}: too close to a tie to compare")
        expected = tokenizer.decode(ids + new)
        result = subprocess.run([lat.exe, "generate", "--checkpoint", str(checkpoint), "--prompt", prompt,
                                 "--max-new-tokens", str(QWEN35_NEW_TOKENS), "--temperature", "0"],
                                cwd=lat.cwd, capture_output=True)
        if result.returncode != 0:
            raise CheckFailed(f"{name}: lat generate: exit {result.returncode}: {result.stderr.decode(errors='replace')}")
        printed = result.stdout.decode("utf-8", errors="replace")
        if printed != expected + "\n":
            lat_ids = [int(x) for x in lat("tokenizer", "encode", "--tokenizer", checkpoint, "--text", prompt).split()]
            if lat_ids != ids:
                raise CheckFailed(f"{name}: ids of {prompt!r}: transformers {ids} vs lat {lat_ids}")
            raise CheckFailed(f"{name}: prompt {k}: lat generate printed {printed!r}, transformers decodes "
                              f"{expected!r} (ids {new}; smallest margin {margin:.3g})")
    return margin


def check_qwen35_end_to_end(lat, work, text):
    """(e): generate from a Qwen3.5 directory with its real tokenizer, fine-tune it on text
    (data.tokenizer left to init_from's), export the result and compare with transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = "Qwen3.5 directory with its real tokenizer"
    base = work / "e_qwen35"
    hf_dir = base / "hf"
    model, tokenizer = qwen35_model_dir(hf_dir)
    margin = check_greedy_text(name + ", as saved", lat, hf_dir, model, tokenizer, QWEN35_PROMPTS)

    run = base / "finetune"
    run.mkdir()
    (run / "text.txt").write_text(text[:8000] + Path(MULTILINGUAL).read_text(encoding="utf-8"), encoding="utf-8")
    # The model keys as `lat info` prints them for a run config (its last block, indented by 2).
    info = lat("info", hf_dir).split("(copy them into a run config to fine-tune with init_from)\n", 1)[1]
    model_keys = "".join(line[2:].split("  #")[0] + "\n" for line in info.splitlines() if line.strip())
    (run / "config.yaml").write_text(FINETUNE_CONFIG.format(init_from=hf_dir, model_keys=model_keys, seed=SEED),
                                     encoding="utf-8")
    Lat(lat.exe, run)("train", "config.yaml")
    losses = [json.loads(line) for line in (run / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    val = [r["val_loss"] for r in losses if "val_loss" in r]
    if len(val) < 2 or not val[-1] < val[0]:
        raise CheckFailed(f"{name}: fine-tuning: val loss did not fall: {val}")
    tuned = base / "tuned_hf"
    lat("export", "--checkpoint", run / "run", "--format", "hf", "--out", tuned)
    if (tuned / "tokenizer.json").read_bytes() != (hf_dir / "tokenizer.json").read_bytes():
        raise CheckFailed(f"{name}: {tuned}/tokenizer.json differs from {hf_dir}/tokenizer.json")
    tuned_model = AutoModelForCausalLM.from_pretrained(tuned, dtype="float32").eval()
    tuned_tokenizer = AutoTokenizer.from_pretrained(tuned)
    tuned_margin = check_greedy_text(name + ", fine-tuned", lat, run / "run", tuned_model, tuned_tokenizer,
                                     QWEN35_PROMPTS[1:])
    return name, (f"{len(tokenizer)} tokens, {model.config.vocab_size} rows; generate prints transformers' greedy "
                  f"text on {len(QWEN35_PROMPTS)} prompts (smallest margin {margin:.2e}); fine-tuned with "
                  f"data.tokenizer from init_from: val loss {val[0]:.3f} -> {val[-1]:.3f}; its hf export in "
                  f"transformers gives lat's greedy text on the non-ASCII prompt (smallest margin {tuned_margin:.2e})")


# --- (f) lat tokenizer train's directory in transformers --------------------------------------

def check_trained_tokenizer(lat, work, text_path):
    """`lat tokenizer train` (bpe) writes a directory whose tokenizer_config.json makes
    AutoTokenizer give lat's ids on Shakespeare and tests/data/multilingual.txt."""
    from transformers import AutoTokenizer

    name = "lat tokenizer train in AutoTokenizer"
    out = work / "f_trained"
    lat("tokenizer", "train", "--vocab-size", 2000, "--out", out, text_path, MULTILINGUAL)
    auto = AutoTokenizer.from_pretrained(out)
    for path in (Path(text_path), Path(MULTILINGUAL)):
        text = path.read_bytes().decode("utf-8")
        ids = [int(x) for x in lat("tokenizer", "encode", "--tokenizer", out, path.resolve()).split()]
        expected = auto.encode(text, add_special_tokens=False)
        if ids != expected:
            at = next((i for i, (a, b) in enumerate(zip(ids, expected)) if a != b), min(len(ids), len(expected)))
            raise CheckFailed(f"{name}: {path.name}: ids differ at {at}: lat {ids[at:at + 8]} vs "
                              f"{type(auto).__name__} {expected[at:at + 8]}")
    # Characters neither file holds come out of byte-fallback pieces, which transformers must
    # decode to their bytes, not to their names ("<0xE2>").
    rare = "a snowman \u2603, a clef \U0001D11E\n\n  two  spaces\tand a tab\n"
    ids = [int(x) for x in lat("tokenizer", "encode", "--tokenizer", out, "--text", rare).split()]
    if auto.decode(ids) != rare:
        raise CheckFailed(f"{name}: {type(auto).__name__}.decode of lat's ids of {rare!r} gives {auto.decode(ids)!r}")
    return name, (f"{type(auto).__name__} gives lat's ids on {Path(text_path).name} and {Path(MULTILINGUAL).name} "
                  f"and decodes byte-fallback pieces to their text")


# --- (g) granitemoehybrid: lat -> transformers, transformers -> lat, round trip ------------

GRANITE_LAT_CONFIG = """\
model:
  d_model: 48
  n_layers: 3
  n_heads: 2
  layers: "mamba2,attn,mamba2"
  tie_embeddings: false
  attn:
    n_heads: 4
    head_dim: 12
    n_kv_heads: 2
  mamba:
    d_state: 16
    head_dim: 12
    n_groups: 2
    chunk_size: 16
""" + LAT_CONFIG[LAT_CONFIG.index("data:"):]  # data and train as (a)'s


@contextlib.contextmanager
def one_torch_thread():
    """torch on one thread for the granite checks' tiny models: threads gain nothing there, and
    on a busy machine their spin waits made each cached step's depthwise conv1d take 80 ms
    instead of 0.1 ms."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def check_lat_to_granite(lat, work, text):
    """A lat-trained mamba2 + attn model (2 groups of B and C, grouped-query attention with a
    head size apart from d_model / heads) exported with `lat export --format hf` and loaded by
    transformers as GraniteMoeHybridForCausalLM."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = "lat->transformers (granitemoehybrid, mamba2 + attn)"
    run = work / "e_lat"
    lat_run = train_tiny_model(lat.exe, run, text, GRANITE_LAT_CONFIG.format(out_dir="run", seed=SEED))
    vocab = lat_vocab(lat_run, run / "run", run / "lat_export")
    hf_dir = run / "hf"
    lat_run("export", "--checkpoint", run / "run", "--format", "hf", "--out", hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype="float32").eval()
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    if type(model).__name__ != "GraniteMoeHybridForCausalLM":
        raise CheckFailed(f"{name}: {hf_dir} loads as {type(model).__name__} ({model.config.model_type}), "
                          "expected GraniteMoeHybridForCausalLM (granitemoehybrid)")
    return name, compare_model(name, lat_run, run / "run", hf_dir, model, tokenizer, vocab, run)


def granite_config(vocab_size, tie, rope, layer_types):
    """Small dense granitemoehybrid dimensions that exercise every mapping: 8 mamba heads of 12
    in 2 groups of B and C, grouped-query attention (4 heads, 2 kv heads) of head size 16 apart
    from hidden_size / heads, attention_multiplier lat's 1/sqrt(head_dim), the other
    multipliers 1."""
    from transformers import GraniteMoeHybridConfig

    return GraniteMoeHybridConfig(
        vocab_size=vocab_size, hidden_size=48, intermediate_size=96, shared_intermediate_size=96,
        num_hidden_layers=len(layer_types), layer_types=layer_types, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, attention_multiplier=16 ** -0.5, mamba_n_heads=8, mamba_d_head=12, mamba_n_groups=2,
        mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=16, num_local_experts=0,
        position_embedding_type="rope" if rope else None, rms_norm_eps=1e-6, tie_word_embeddings=tie,
        max_position_embeddings=32768, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def spread_granite_weights(model):
    """spread_weights for granitemoehybrid: its norms scale by w (x * w), so they move around
    one; the mamba layers' A_log, dt_bias, D and conv1d.bias are jittered."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 0.25)
            elif name.endswith("conv1d.weight"):
                p.normal_(0.0, p.shape[-1] ** -0.5)
            elif name.endswith("norm.weight") or name.endswith(".D"):
                p.uniform_(0.5, 1.5)
            elif name.endswith("A_log") or name.endswith("dt_bias") or name.endswith("conv1d.bias"):
                p.uniform_(-1.0, 1.0)
            elif p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
            else:
                raise CheckFailed(f"spread_granite_weights: no rule for parameter {name} {tuple(p.shape)}")


def check_transformers_to_lat_granite(lat, work, vocab, tie, rope):
    """A random GraniteMoeHybridForCausalLM saved with save_pretrained, read by lat: with RoPE a
    mamba, attention, mamba stack; without (position_embedding_type null), mamba layers only,
    since lat's attention always rotates."""
    import torch
    from transformers import AutoTokenizer, GraniteMoeHybridForCausalLM

    layer_types = ["mamba", "attention", "mamba"] if rope else ["mamba", "mamba"]
    name = (f"transformers->lat (granitemoehybrid, {'tied' if tie else 'untied'}, "
            f"{'rope, ' if rope else 'no rope, '}{', '.join(layer_types)})")
    base = work / f"e_{int(tie)}{int(rope)}"
    torch.manual_seed(SEED)
    model = GraniteMoeHybridForCausalLM(granite_config(len(vocab), tie, rope, layer_types)).float().eval()
    spread_granite_weights(model)
    hf_dir = base / "hf"
    model.save_pretrained(hf_dir)
    write_char_tokenizer(hf_dir, vocab)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    # transformers 5.24's hybrid cache asks an attention layer for the sequence length, so a
    # model of mamba layers only runs (and generates) without it there.
    use_cache = "attention" in layer_types
    model.config.use_cache = use_cache
    # The reference runs in float64 on the saved float32 weights: Mamba2Mixer's forward and
    # cached step computed without rounding of their own, against lat's float32.
    model = model.double()
    figures = compare_model(name, lat, hf_dir, hf_dir, model, tokenizer, vocab, base, min_margin=MIN_MARGIN,
                            use_cache=use_cache)
    return name, figures + ", transformers in float64", hf_dir


def check_granite_refusal(lat, work, vocab):
    """A granitemoehybrid with attention layers and no RoPE: lat's attention always rotates, so
    `--checkpoint DIR` refuses it naming position_embedding_type, and writes nothing."""
    from transformers import GraniteMoeHybridForCausalLM

    name = "refusal (granitemoehybrid, attention without rope)"
    hf_dir = work / "e_norope" / "hf"
    GraniteMoeHybridForCausalLM(granite_config(len(vocab), True, False, ["mamba", "attention"])).save_pretrained(hf_dir)
    out = hf_dir.parent / "lat_hf"
    result = subprocess.run([lat.exe, "export", "--checkpoint", str(hf_dir), "--format", "hf", "--out", str(out)],
                            cwd=lat.cwd, capture_output=True, encoding="utf-8")
    expected = ("position_embedding_type: null (lat's attention layers always apply RoPE; lat honours only \"rope\" "
                "in a model with attention layers)")
    if result.returncode == 0 or expected not in result.stderr or out.exists():
        raise CheckFailed(f"{name}: expected a failing export naming {expected!r} and no {out}, got exit "
                          f"{result.returncode}: {result.stderr.strip()!r}")
    return name, f"exit {result.returncode}: {result.stderr.strip().splitlines()[-1]}"


# --- (h) kimi_linear: lat -> transformers, transformers -> lat, round trip -----------------

KIMI_LAT_CONFIG = """\
model:
  d_model: 48
  n_layers: 3
  n_heads: 2
  head_dim: 16
  layers: "kda,mla,kda"
  tie_embeddings: false
  attn:
    n_heads: 4
  mla:
    kv_lora_rank: 16
    qk_nope_head_dim: 8
    qk_rope_head_dim: 4
    v_head_dim: 12
  linear:
    chunk_size: 16
""" + LAT_CONFIG[LAT_CONFIG.index("data:"):]  # data and train as (a)'s


def check_lat_to_kimi(lat, work, text):
    """A lat-trained kda + mla model (2 kda heads of 16, 4 mla heads over a latent of 16 with a
    shared key part of 4) exported with `lat export --format hf` and loaded by transformers as
    KimiLinearForCausalLM."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = "lat->transformers (kimi_linear, kda + mla)"
    run = work / "h_lat"
    lat_run = train_tiny_model(lat.exe, run, text, KIMI_LAT_CONFIG.format(out_dir="run", seed=SEED))
    vocab = lat_vocab(lat_run, run / "run", run / "lat_export")
    hf_dir = run / "hf"
    lat_run("export", "--checkpoint", run / "run", "--format", "hf", "--out", hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype="float32").eval()
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    if type(model).__name__ != "KimiLinearForCausalLM":
        raise CheckFailed(f"{name}: {hf_dir} loads as {type(model).__name__} ({model.config.model_type}), "
                          "expected KimiLinearForCausalLM (kimi_linear)")
    return name, compare_model(name, lat_run, run / "run", hf_dir, model, tokenizer, vocab, run)


def kimi_config(vocab_size, tie, q_lora_rank, mlp_layer_types=None):
    """Small kimi_linear dimensions that exercise every mapping: kda, mla, kda layers (4 kda
    heads of 12; 4 mla heads, latent 16, key parts 8 + 4, value head 12), every MLP dense."""
    from transformers import KimiLinearConfig

    return KimiLinearConfig(
        vocab_size=vocab_size, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
        layer_types=["linear_attention", "full_attention", "linear_attention"],
        mlp_layer_types=mlp_layer_types or ["dense"] * 3, num_local_experts=0, num_attention_heads=4,
        num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=q_lora_rank, qk_nope_head_dim=8, qk_rope_head_dim=4,
        v_head_dim=12, linear_head_dim=12, linear_num_heads=4, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
        tie_word_embeddings=tie, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def spread_kimi_weights(model):
    """spread_weights for kimi_linear: its norms scale by w, so they move around one; A_log
    and dt_bias are jittered around their initial range."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 0.25)
            elif name.endswith("conv1d.weight"):
                p.normal_(0.0, p.shape[-1] ** -0.5)
            elif name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            elif name.endswith("A_log") or name.endswith("dt_bias"):
                p.uniform_(-1.0, 1.0)
            elif p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
            else:
                raise CheckFailed(f"spread_kimi_weights: no rule for parameter {name} {tuple(p.shape)}")


def check_transformers_to_lat_kimi(lat, work, vocab, tie, q_lora_rank):
    """A random KimiLinearForCausalLM saved with save_pretrained, read by lat."""
    import torch
    from transformers import AutoTokenizer, KimiLinearForCausalLM

    name = f"transformers->lat (kimi_linear, {'tied' if tie else 'untied'}, q_lora_rank {q_lora_rank})"
    base = work / f"h_{int(tie)}"
    torch.manual_seed(SEED)
    model = KimiLinearForCausalLM(kimi_config(len(vocab), tie, q_lora_rank)).float().eval()
    spread_kimi_weights(model)
    if tie:  # KimiLinearForCausalLM ties nothing itself: a tied model's lm_head is a copy
        with torch.no_grad():
            model.lm_head.weight.copy_(model.model.embed_tokens.weight)
    hf_dir = base / "hf"
    model.save_pretrained(hf_dir)
    write_char_tokenizer(hf_dir, vocab)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    # The reference runs in float64 on the saved float32 weights: transformers' chunked and
    # recurrent KDA computed without rounding of their own, against lat's float32.
    model = model.double()
    figures = compare_model(name, lat, hf_dir, hf_dir, model, tokenizer, vocab, base, min_margin=MIN_MARGIN)
    return name, figures + ", transformers in float64", hf_dir


def check_kimi_refusal(lat, work, vocab):
    """A kimi_linear with MoE layers: lat has a dense MLP in every layer, so `--checkpoint DIR`
    refuses it naming mlp_layer_types, and writes nothing."""
    from transformers import KimiLinearForCausalLM

    name = "refusal (kimi_linear, MoE layers)"
    hf_dir = work / "h_moe" / "hf"
    config = kimi_config(len(vocab), True, None, ["dense", "sparse", "sparse"])
    config.num_local_experts, config.num_experts_per_tok, config.moe_intermediate_size = 4, 2, 16
    KimiLinearForCausalLM(config).save_pretrained(hf_dir)
    out = hf_dir.parent / "lat_hf"
    result = subprocess.run([lat.exe, "export", "--checkpoint", str(hf_dir), "--format", "hf", "--out", str(out)],
                            cwd=lat.cwd, capture_output=True, encoding="utf-8")
    expected = ("mlp_layer_types[1]: \"sparse\" (lat honours only \"dense\": a dense MLP in every layer, "
                "no experts)")
    if result.returncode == 0 or expected not in result.stderr or out.exists():
        raise CheckFailed(f"{name}: expected a failing export naming {expected!r} and no {out}, got exit "
                          f"{result.returncode}: {result.stderr.strip()!r}")
    return name, f"exit {result.returncode}: {result.stderr.strip().splitlines()[-1]}"


def run_kimi_checks(lat, work, text):
    """(h), printing one line per check; returns its seconds."""
    import time

    start = time.monotonic()
    with one_torch_thread():
        name, figures = check_lat_to_kimi(lat, work, text)
        print(f"ok  {name}: {figures}", flush=True)
        for tie, q_lora_rank in ((False, None), (True, 8)):
            name, figures, hf_dir = check_transformers_to_lat_kimi(lat, work, sorted(set(text)), tie, q_lora_rank)
            print(f"ok  {name}: {figures}", flush=True)
            name, figures = check_round_trip(lat, work, hf_dir)
            print(f"ok  {name}: {figures}", flush=True)
        name, figures = check_kimi_refusal(lat, work, sorted(set(text)))
        print(f"ok  {name}: {figures}", flush=True)
    return time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lat", default="build/lat", help="the lat executable (default build/lat)")
    parser.add_argument("--text", default="data/tinyshakespeare.txt", help="training text of (a)")
    parser.add_argument("--keep", help="work in this directory (created) and keep it, instead of a temporary one")
    parser.add_argument("--only", choices=["kimi"], help="run only this family's checks ((h) kimi_linear)")
    args = parser.parse_args()
    try:
        refuse_gpu_only_kernels()
        # Local directories only, and no per-kernel fallback notices or progress bars on stderr.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        import torch
        import transformers

        transformers.utils.logging.disable_progress_bar()

        torch.manual_seed(SEED)
        if not Path(args.lat).is_file():
            raise CheckFailed(f"no lat executable at {args.lat} (make build)")
        if not Path(args.text).is_file():
            raise CheckFailed(f"no training text at {args.text} (make data)")
        text = Path(args.text).read_text(encoding="utf-8")[:TEXT_CHARS] + TEXT_EXTRA
        work = Path(args.keep or tempfile.mkdtemp(prefix="check_hf_export.")).resolve()
        work.mkdir(parents=True, exist_ok=True)
        lat = Lat(args.lat, work)
        try:
            if args.only == "kimi":
                print(f"kimi_linear checks: {run_kimi_checks(lat, work, text):.0f} s", flush=True)
                return 0
            for tie, zero_centered in ((True, True), (False, False)):
                name, figures = check_lat_to_transformers(lat, work, text, tie, zero_centered)
                print(f"ok  {name}: {figures}", flush=True)
            for tie in (False, True):
                name, figures, hf_dir = check_transformers_to_lat(lat, work, sorted(set(text)), tie)
                print(f"ok  {name}: {figures}", flush=True)
                name, figures = check_round_trip(lat, work, hf_dir)
                print(f"ok  {name}: {figures}", flush=True)
            with one_torch_thread():
                name, figures = check_lat_to_granite(lat, work, text)
                print(f"ok  {name}: {figures}", flush=True)
                for tie, rope in ((False, True), (True, False)):
                    name, figures, hf_dir = check_transformers_to_lat_granite(lat, work, sorted(set(text)), tie, rope)
                    print(f"ok  {name}: {figures}", flush=True)
                    name, figures = check_round_trip(lat, work, hf_dir)
                    print(f"ok  {name}: {figures}", flush=True)
                name, figures = check_granite_refusal(lat, work, sorted(set(text)))
                print(f"ok  {name}: {figures}", flush=True)
            print(f"kimi_linear checks: {run_kimi_checks(lat, work, text):.0f} s", flush=True)
            for kind in ("sentencepiece", "bpe", "bpe, saved by transformers"):
                name, figures = check_subword_tokenizer(lat, work, text, kind)
                print(f"ok  {name}: {figures}", flush=True)
            name, figures = check_qwen35_end_to_end(lat, work, text)
            print(f"ok  {name}: {figures}", flush=True)
            name, figures = check_trained_tokenizer(lat, work, Path(args.text).resolve())
            print(f"ok  {name}: {figures}", flush=True)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    except CheckFailed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    print("check_hf_export: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
