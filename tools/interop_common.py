"""What the interop checks (`make interop`) share: running lat, training a tiny lat model, and
llama.cpp's test vocabularies rebuilt as the Hugging Face tokenizer.json files of their models.

Imported by tools/check_hf_export.py, tools/check_gguf_export.py and tools/check_tokenizers.py
(run as scripts, so tools/ is on the import path).
"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path


class CheckFailed(Exception):
    """One line naming the check, what was expected and what was found."""


class Lat:
    """Runs the lat executable in a work directory; a failing command raises CheckFailed with
    its stderr's last line. `threads`: lat's OpenMP threads (OMP_NUM_THREADS; None: lat's
    default)."""

    def __init__(self, exe, cwd, threads=None):
        self.exe, self.cwd = str(Path(exe).resolve()), cwd
        self.env = dict(os.environ, OMP_NUM_THREADS=str(threads)) if threads else None

    def __call__(self, *args):
        """lat's stdout, decoded as UTF-8 with no newline translation ("\r\n" stays)."""
        result = subprocess.run([self.exe, *map(str, args)], cwd=self.cwd, env=self.env, capture_output=True)
        if result.returncode != 0:
            last = (result.stderr.decode("utf-8", errors="replace").strip().splitlines() or ["(no stderr)"])[-1]
            raise CheckFailed(f"lat {' '.join(map(str, args))}: exit {result.returncode}: {last}")
        return result.stdout.decode("utf-8")

    def encode(self, tokenizer, text):
        """`lat tokenizer encode` of `text` with `tokenizer` (a run directory, checkpoint or file)."""
        return [int(x) for x in self("tokenizer", "encode", "--tokenizer", tokenizer, "--text", text).split()]

    def greedy(self, checkpoint, prompt, new_tokens):
        """The text `lat generate --temperature 0` appends to `prompt` in `new_tokens` tokens."""
        out = self("generate", "--checkpoint", checkpoint, "--prompt", prompt, "--max-new-tokens", new_tokens,
                   "--temperature", 0)
        if not out.startswith(prompt) or not out.endswith("\n"):
            raise CheckFailed(f"lat generate: expected the prompt, the continuation and a newline, got {out!r}")
        return out[len(prompt):-1]

    def check_logits_file(self, checkpoint, ids, out_dir, fmt="hf"):
        """`lat export --format <fmt> --check-tokens` of `ids` into out_dir; returns the path of
        its check_logits.safetensors ("logits": lat's forward [T, vocab], "logits_step": its
        token-by-token generation path)."""
        self("export", "--checkpoint", checkpoint, "--format", fmt, "--out", out_dir,
             "--check-tokens", ",".join(map(str, ids)))
        return Path(out_dir) / "check_logits.safetensors"


def train_tiny_model(lat_exe, run_dir, text, config, threads=None):
    """Trains a lat model in run_dir (created) on `text` (written as run_dir/text.txt) with the
    config YAML `config` (written as run_dir/config.yaml; its data.path is text.txt, its out_dir
    relative to run_dir). Returns a Lat working in run_dir on `threads` threads (see Lat)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "text.txt").write_text(text, encoding="utf-8")
    (run_dir / "config.yaml").write_text(config, encoding="utf-8")
    lat = Lat(lat_exe, run_dir, threads)
    lat("train", "config.yaml")
    return lat


# ---------------------------------------------------------------------------------------------
# llama.cpp's test vocabularies (GGUF files with tokenization test vectors), fetched once

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
SOURCE_DIR = "llama_cpp_python-0.3.36/vendor/llama.cpp/models"
VOCABS = ["gpt-2", "llama-bpe", "qwen2", "qwen35"]
VOCAB_FILE_SUFFIXES = ["", ".inp", ".out"]
DEFAULT_VOCAB_DIR = "~/.cache/lat/llama-cpp-python-0.3.36"


def fetch_vocabularies(vocab_dir: Path, names=VOCABS):
    """Makes vocab_dir hold ggml-vocab-NAME.gguf{,.inp,.out} for every name in `names`, taken
    from the llama-cpp-python source package (`pip download`) when one is missing."""
    wanted = [f"ggml-vocab-{name}.gguf{suffix}" for name in names for suffix in VOCAB_FILE_SUFFIXES]
    if all((vocab_dir / name).is_file() for name in wanted):
        return
    vocab_dir.mkdir(parents=True, exist_ok=True)
    print(f"== fetching llama.cpp's test vocabularies ({LLAMA_CPP_PYTHON} source package) into {vocab_dir}")
    with tempfile.TemporaryDirectory() as download:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", "llama-cpp-python",
                        "--no-deps", "-d", download, LLAMA_CPP_PYTHON], check=True)
        archives = list(Path(download).glob("*.tar.gz"))
        if len(archives) != 1:
            raise CheckFailed(f"pip download {LLAMA_CPP_PYTHON}: expected one .tar.gz, got {archives}")
        with tarfile.open(archives[0]) as tar:
            for name in wanted:
                member = tar.extractfile(f"{SOURCE_DIR}/{name}")
                if member is None:
                    raise CheckFailed(f"{archives[0].name} has no {SOURCE_DIR}/{name}")
                (vocab_dir / name).write_bytes(member.read())


# The pre-tokenizer patterns of the models' own tokenizer.json files (Llama-3: Meta-Llama-3-8B;
# Qwen2: Qwen1.5-7B; Qwen3.5: Qwen3.5's, which adds combining marks \p{M} to letters).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(add_prefix_space, trim_offsets, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": use_regex}


def split_then_byte_level(pattern, trim_offsets):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        byte_level(False, trim_offsets, False)]}


@dataclass
class Family:
    """What a model's tokenizer.json has beyond the GGUF's tokens and merges."""
    normalizer: dict | None
    pre_tokenizer: dict
    post_processor: dict
    decoder: dict
    ignore_merges: bool
    special_normalized: bool = False


def llama3_post_processor(bos_id):
    bos = "<|begin_of_text|>"
    return {"type": "Sequence", "processors": [
        byte_level(True, False, True),
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}]}


FAMILIES = {
    "gpt-2": Family(None, byte_level(False, True, True), byte_level(True, False, True), byte_level(True, True, True),
                    ignore_merges=False, special_normalized=True),
    "llama-bpe": Family(None, split_then_byte_level(LLAMA3_PATTERN, True), llama3_post_processor(128000),
                        byte_level(True, True, True), ignore_merges=True),
    "qwen2": Family({"type": "NFC"}, split_then_byte_level(QWEN2_PATTERN, False), byte_level(False, False, False),
                    byte_level(False, False, False), ignore_merges=False),
    # No normalizer: qwen35's test vectors keep a decomposed "é" as "e" + U+0301 (NFC would join them).
    "qwen35": Family(None, split_then_byte_level(QWEN35_PATTERN, False), byte_level(False, False, False),
                     byte_level(False, False, False), ignore_merges=False),
}

# GGUF token types (llama.cpp's llama_token_type): normal, control (special), user-defined.
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3


def rebuild_tokenizer_json(gguf_path: Path, family: Family) -> dict:
    """The Hugging Face tokenizer.json of the model whose vocabulary gguf_path holds."""
    import gguf
    reader = gguf.GGUFReader(str(gguf_path))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    merges = reader.fields["tokenizer.ggml.merges"].contents()
    # User-defined tokens in these files are the converter's padding ([PAD151646]...), not in the
    # models' tokenizer.json.
    vocab = {token: i for i, (token, kind) in enumerate(zip(tokens, types)) if kind == TOKEN_NORMAL}
    added = [{"id": i, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": family.special_normalized, "special": True}
             for i, (token, kind) in enumerate(zip(tokens, types)) if kind == TOKEN_CONTROL]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": family.normalizer, "pre_tokenizer": family.pre_tokenizer,
            "post_processor": family.post_processor, "decoder": family.decoder,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": family.ignore_merges, "vocab": vocab, "merges": merges}}


def write_tokenizer_dir(directory: Path, tokenizer_json: dict):
    """A directory AutoTokenizer.from_pretrained loads: tokenizer.json and tokenizer_config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer_json, ensure_ascii=False), encoding="utf-8")
    special = [t["content"] for t in tokenizer_json["added_tokens"]]
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30,
              "bos_token": special[0], "eos_token": special[0]}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
