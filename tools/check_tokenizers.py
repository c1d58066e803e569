#!/usr/bin/env python3
"""Checks that lat's tokenizers give the real libraries' ids (`make interop`).

Usage (inside the virtualenv `make interop` creates):
  .venv-interop/bin/python tools/check_tokenizers.py [--lat build/lat] [--vocab-dir DIR]
                                                     [--shakespeare FILE] [--keep DIR]

Four checks, one table:
  1. Real byte-level BPE vocabularies: llama.cpp's test vocabularies gpt-2, llama-bpe (Llama-3),
     qwen2 and qwen35 (GGUF files with tokenization test vectors, from the llama-cpp-python
     source package: downloaded once with `pip download` into --vocab-dir, only those files
     kept). Each is rebuilt as the Hugging Face tokenizer.json its model ships (tokens, merges
     and special tokens from the GGUF; normalizer and pre-tokenizer as the model's own file has
     them); HF tokenizers' ids must equal the test vectors (this validates the rebuild), then
     lat's ids (`lat tokenizer encode`) must equal HF's on every test vector's text, on
     Shakespeare and on tests/data/multilingual.txt, and `lat tokenizer decode` must give each
     text back byte for byte (after the tokenizer's normalizer: Qwen2's NFC).
  2. SentencePiece: a BPE model trained on Shakespeare with the sentencepiece package (byte
     fallback, identity normalization, so that every text round-trips); lat's ids must equal
     sentencepiece's and those of AutoTokenizer.from_pretrained on the model's directory.
  3. transformers round trip: AutoTokenizer loads a directory with a rebuilt tokenizer.json and
     save_pretrained writes it again (transformers adds its own post-processor and config);
     lat reads the re-saved tokenizer.json and must give the same ids.
  4. Encoding throughput on one thread, GPT-2's vocabulary, Shakespeare: HF tokenizers (Rust)
     and lat in the same run, printed as lat's speed over HF's. lat's time is that of
     `lat tokenizer encode FILE` minus that of an empty text (process start and tokenizer load).

Ids are compared without special tokens added (`add_special_tokens=False`): lat's encode adds
none. Exit 0 when every id and every round trip agrees; otherwise 1, after the table, with the
first mismatch of each row shown in context.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from interop_common import (DEFAULT_VOCAB_DIR, FAMILIES, VOCABS, CheckFailed, fetch_vocabularies,
                            rebuild_tokenizer_json, write_tokenizer_dir)

# One thread for HF's Rust tokenizers, set before they are imported (rayon reads it once).
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

TEST_SEPARATOR = "\n__ggml_vocab_test__\n"
REPO = Path(__file__).resolve().parent.parent
MULTILINGUAL = REPO / "tests/data/multilingual.txt"
# `lat tokenizer decode` takes the ids as arguments: texts are decoded in pieces of at most
# this many bytes so that the argument list stays far below the kernel's limit (2 MiB).
DECODE_PIECE_BYTES = 64 * 1024
SPM_VOCAB_SIZE = 2000
TIMING_REPEATS = 3


# ---------------------------------------------------------------------------------------------
# Vocabularies (fetched and rebuilt as tokenizer.json by interop_common): test vectors


def read_test_vectors(vocab_dir: Path, name: str):
    """The .inp texts and the .out ids of one vocabulary, as [(text, ids)]."""
    base = vocab_dir / f"ggml-vocab-{name}.gguf"
    texts = base.with_name(base.name + ".inp").read_bytes().decode("utf-8").split(TEST_SEPARATOR)[:-1]
    lines = base.with_name(base.name + ".out").read_bytes().decode("utf-8").split("\n")[:-1]
    if len(texts) != len(lines):
        raise CheckFailed(f"{base}.inp has {len(texts)} tests but {base}.out has {len(lines)} lines")
    return [(text, [int(i) for i in line.split()]) for text, line in zip(texts, lines)]


# ---------------------------------------------------------------------------------------------
# lat's side


class Lat:
    """`lat tokenizer encode|decode` on one tokenizer file."""

    def __init__(self, lat: str, tokenizer: Path, scratch: Path):
        self.lat, self.tokenizer, self.scratch = lat, str(tokenizer), scratch

    def run(self, args):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        result = subprocess.run([self.lat, "tokenizer", *args, "--tokenizer", self.tokenizer], capture_output=True,
                                env=env)
        if result.returncode != 0:
            raise CheckFailed(f"lat tokenizer {args[0]} --tokenizer {self.tokenizer}: exit {result.returncode}: "
                          + result.stderr.decode(errors="replace").strip())
        return result.stdout

    def encode_file(self, path: Path):
        return [int(i) for i in self.run(["encode", str(path)]).split()]

    def encode(self, text: str):
        path = self.scratch / "text.txt"
        path.write_bytes(text.encode("utf-8"))
        return self.encode_file(path)

    def decode(self, ids) -> bytes:
        return self.run(["decode", *map(str, ids)]) if ids else b""


# ---------------------------------------------------------------------------------------------
# Comparison and the table


@dataclass
class Row:
    vocab: str
    texts: str
    cases: int = 0
    mismatches: int = 0
    first: str = ""
    notes: list = field(default_factory=list)

    def compare(self, case: str, text: str, expected, actual, expected_name: str, actual_name: str, show=None):
        self.cases += 1
        if expected == actual:
            return
        self.mismatches += 1
        if not self.first:
            self.first = describe_mismatch(case, text, expected, actual, expected_name, actual_name, show)

    def compare_text(self, case: str, text: str, decoded: bytes, who: str):
        self.cases += 1
        original = text.encode("utf-8")
        if decoded == original:
            return
        self.mismatches += 1
        if not self.first:
            at = next((i for i, (a, b) in enumerate(zip(original, decoded)) if a != b), min(len(original), len(decoded)))
            self.first = (f"{case}: {who} decode(encode(text)) differs from the text at byte {at} of {len(original)}: "
                          f"text {original[max(0, at - 20):at + 20]!r}, decoded {decoded[max(0, at - 20):at + 20]!r}")


def describe_mismatch(case, text, expected, actual, expected_name, actual_name, show):
    at = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))
    lo = max(0, at - 3)
    def window(ids):
        part = ids[lo:at + 4]
        return f"{part}" + (f" {[show(i) for i in part]}" if show else "")
    head = text[:60] if len(text) < 200 else "..."
    return (f"{case} ({len(text)} chars{', ' + repr(head) if len(text) < 200 else ''}): "
            f"first difference at token {at} ({expected_name} {len(expected)} ids, {actual_name} {len(actual)}): "
            f"{expected_name} {window(expected)}, {actual_name} {window(actual)}")


def print_table(rows):
    print()
    header = f"{'vocab':<22} {'texts':<46} {'cases':>6} {'mismatches':>10}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row.vocab:<22} {row.texts:<46} {row.cases:>6} {row.mismatches:>10}")
    for row in rows:
        if row.first:
            print(f"\nfirst mismatch of {row.vocab} / {row.texts}:\n  {row.first}")


def decode_pieces(text: str):
    """text split at line ends into pieces of at most DECODE_PIECE_BYTES bytes (a longer line is
    one piece)."""
    pieces, current, size = [], [], 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode("utf-8"))
        if current and size + n > DECODE_PIECE_BYTES:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += n
    if current:
        pieces.append("".join(current))
    return pieces


def unicode_to_byte():
    """The inverse of the byte-level BPE alphabet (GPT-2's bytes_to_unicode): printable bytes
    stand for themselves, the others for the code points from 256 on, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    inverse, extra = {chr(b): b for b in printable}, 0
    for b in range(256):
        if b not in printable:
            inverse[chr(256 + extra)] = b
            extra += 1
    return inverse


def byte_level_chunks(ids, token_of, max_ids):
    """ids split into runs of at most about max_ids, each starting at a token whose first byte
    starts a UTF-8 character, so that every run decodes to whole characters."""
    inverse = unicode_to_byte()
    chunks, start = [], 0
    for i in range(len(ids)):
        if i - start >= max_ids and (inverse[token_of(ids[i])[0]] & 0xC0) != 0x80:
            chunks.append(ids[start:i])
            start = i
    chunks.append(ids[start:])
    return chunks


def check_byte_level_round_trip(row: Row, lat: Lat, name: str, text: str, ids, token_of):
    """lat decode(ids) == text, where ids are lat's ids of text and text is already normalized as
    the tokenizer normalizes (NFC for Qwen2). Byte-level BPE decodes token by token, so the ids
    go to `lat tokenizer decode` in runs and the outputs are joined."""
    max_ids = DECODE_PIECE_BYTES // 8
    decoded = b"".join(lat.decode(chunk) for chunk in byte_level_chunks(ids, token_of, max_ids))
    row.compare_text(name, text, decoded, "lat")


def check_round_trip(row: Row, lat: Lat, name: str, text: str):
    """lat decode(lat encode(text)) == text, piece by piece for long texts (SentencePiece drops
    the space it adds before the first piece, so its decode is not token by token)."""
    pieces = decode_pieces(text) if len(text.encode("utf-8")) > DECODE_PIECE_BYTES else [text]
    for k, piece in enumerate(pieces):
        case = name if len(pieces) == 1 else f"{name} piece {k}"
        row.compare_text(case, piece, lat.decode(lat.encode(piece)), "lat")


# ---------------------------------------------------------------------------------------------
# The four checks


def check_real_vocabularies(args, scratch: Path, corpora, rows):
    from tokenizers import Tokenizer
    vocab_dir = Path(args.vocab_dir).expanduser()
    fetch_vocabularies(vocab_dir)
    rebuilt = {}
    for name in VOCABS:
        tokenizer_json = rebuild_tokenizer_json(vocab_dir / f"ggml-vocab-{name}.gguf", FAMILIES[name])
        directory = scratch / name
        write_tokenizer_dir(directory, tokenizer_json)
        rebuilt[name] = directory
        hf = Tokenizer.from_file(str(directory / "tokenizer.json"))
        show = hf.id_to_token
        vectors = read_test_vectors(vocab_dir, name)

        row = Row(name, "HF vs llama.cpp's .out (rebuild)")
        for k, (text, ids) in enumerate(vectors):
            row.compare(f"test {k}", text, ids, hf.encode(text, add_special_tokens=False).ids, ".out", "HF", show)
        rows.append(row)

        lat = Lat(args.lat, directory / "tokenizer.json", scratch)
        # One lat process per text (each loads the tokenizer); the decode check reuses the ids.
        texts = {f"test {k}": text for k, (text, _) in enumerate(vectors)}
        lat_ids = {case: lat.encode(text) for case, text in texts.items()}
        row = Row(name, "lat vs HF: .inp tests")
        for case, text in texts.items():
            row.compare(case, text, hf.encode(text, add_special_tokens=False).ids, lat_ids[case], "HF", "lat", show)
        rows.append(row)
        for corpus_name, text in corpora.items():
            lat_ids[corpus_name] = lat.encode(text)
            row = Row(name, f"lat vs HF: {corpus_name}")
            row.compare(corpus_name, text, hf.encode(text, add_special_tokens=False).ids, lat_ids[corpus_name], "HF",
                        "lat", show)
            rows.append(row)
        # A normalizer changes the text for good (NFC joins "e" + U+0301): decode gives the
        # normalized text back, in HF as in lat.
        def normalized(text):
            return hf.normalizer.normalize_str(text) if hf.normalizer else text
        row = Row(name, "lat decode(encode(text)) == normalized text")
        all_tests = [i for case in texts for i in lat_ids[case]]
        check_byte_level_round_trip(row, lat, "all .inp tests, joined", "".join(map(normalized, texts.values())),
                                    all_tests, show)
        for corpus_name, text in corpora.items():
            check_byte_level_round_trip(row, lat, corpus_name, normalized(text), lat_ids[corpus_name], show)
        rows.append(row)
        print(f"== {name}: done", flush=True)
    return rebuilt


def train_sentencepiece(directory: Path, text_file: Path):
    """A BPE SentencePiece model trained on text_file: directory/tokenizer.model and a
    tokenizer_config.json for AutoTokenizer."""
    import sentencepiece as spm
    directory.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=str(text_file), model_prefix=str(directory / "tokenizer"), model_type="bpe",
        vocab_size=SPM_VOCAB_SIZE, character_coverage=1.0, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, split_digits=True, num_threads=1, minloglevel=2)
    # SentencePieceBackend runs libsentencepiece itself; LlamaTokenizer (the fast conversion) splits
    # runs of spaces differently (" " -> one piece where sentencepiece gives two).
    config = {"tokenizer_class": "SentencePieceBackend", "model_max_length": 1 << 30, "add_bos_token": False,
              "add_eos_token": False}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def check_sentencepiece(args, scratch: Path, corpora, shakespeare: Path, rows):
    import sentencepiece as spm
    from transformers import AutoTokenizer
    directory = scratch / "sentencepiece"
    train_sentencepiece(directory, shakespeare)
    sp = spm.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))
    auto = AutoTokenizer.from_pretrained(str(directory))
    lat = Lat(args.lat, directory / "tokenizer.model", scratch)
    show = sp.id_to_piece
    vocab_dir = Path(args.vocab_dir).expanduser()
    texts = {f"test {k}": text for k, (text, _) in enumerate(read_test_vectors(vocab_dir, "gpt-2"))}
    texts.update(corpora)

    name = f"sentencepiece bpe {SPM_VOCAB_SIZE}"
    vs_spm, vs_auto = Row(name, "lat vs sentencepiece: .inp tests + texts"), Row(name, "lat vs AutoTokenizer")
    round_trip = Row(name, "lat decode(encode(text)) == text")
    for case, text in texts.items():
        ids = lat.encode(text)
        vs_spm.compare(case, text, sp.encode(text), ids, "sentencepiece", "lat", show)
        vs_auto.compare(case, text, auto.encode(text, add_special_tokens=False), ids, "AutoTokenizer", "lat", show)
        check_round_trip(round_trip, lat, case, text)
    rows.extend([vs_spm, vs_auto, round_trip])
    print("== sentencepiece: done", flush=True)


def check_transformers_round_trip(args, scratch: Path, rebuilt, corpora, rows):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    for name in ["gpt-2", "qwen35"]:
        saved = scratch / f"{name}-saved"
        AutoTokenizer.from_pretrained(str(rebuilt[name])).save_pretrained(str(saved))
        hf = Tokenizer.from_file(str(rebuilt[name] / "tokenizer.json"))
        lat = Lat(args.lat, saved / "tokenizer.json", scratch)
        row = Row(name, "lat on transformers' re-saved file vs HF")
        for corpus_name, text in corpora.items():
            row.compare(corpus_name, text, hf.encode(text, add_special_tokens=False).ids, lat.encode(text), "HF",
                        "lat", hf.id_to_token)
        rows.append(row)
    print("== transformers round trip: done", flush=True)


def best_time(run):
    best = float("inf")
    for _ in range(TIMING_REPEATS):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def measure_throughput(args, scratch: Path, rebuilt, shakespeare: Path):
    from tokenizers import Tokenizer
    text = shakespeare.read_bytes().decode("utf-8")
    megabytes = len(text.encode("utf-8")) / 1e6
    hf = Tokenizer.from_file(str(rebuilt["gpt-2"] / "tokenizer.json"))
    hf_seconds = best_time(lambda: hf.encode(text, add_special_tokens=False))
    lat = Lat(args.lat, rebuilt["gpt-2"] / "tokenizer.json", scratch)
    empty = scratch / "empty.txt"
    empty.write_bytes(b"")
    startup = best_time(lambda: lat.encode_file(empty))
    lat_seconds = best_time(lambda: lat.encode_file(shakespeare)) - startup
    print(f"\nthroughput, 1 thread, gpt-2 vocabulary, {shakespeare.name} ({megabytes:.2f} MB): "
          f"HF tokenizers {megabytes / hf_seconds:.2f} MB/s, lat {megabytes / lat_seconds:.2f} MB/s "
          f"(encode minus {startup:.2f} s of start and load): lat/HF = {hf_seconds / lat_seconds:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lat", default=str(REPO / "build/lat"))
    parser.add_argument("--vocab-dir", default=DEFAULT_VOCAB_DIR,
                        help="where llama.cpp's test vocabularies are kept (fetched when missing)")
    parser.add_argument("--shakespeare", default=str(REPO / "data/tinyshakespeare.txt"))
    parser.add_argument("--keep", help="write the rebuilt tokenizers here instead of a temporary directory")
    args = parser.parse_args()

    shakespeare = Path(args.shakespeare)
    # Bytes decoded, not read_text: universal newlines would turn \r\n into \n.
    corpora = {"shakespeare": shakespeare.read_bytes().decode("utf-8"),
               "multilingual.txt": MULTILINGUAL.read_bytes().decode("utf-8")}
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        scratch = Path(args.keep or temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            rebuilt = check_real_vocabularies(args, scratch, corpora, rows)
            check_sentencepiece(args, scratch, corpora, shakespeare, rows)
            check_transformers_round_trip(args, scratch, rebuilt, corpora, rows)
            print_table(rows)
            measure_throughput(args, scratch, rebuilt, shakespeare)
        except CheckFailed as failure:
            print_table(rows)
            print(f"\ncheck_tokenizers: {failure}")
            return 1
    failed = [row for row in rows if row.mismatches]
    print(f"\ncheck_tokenizers: {'FAILED: ' + str(len(failed)) + ' rows with mismatches' if failed else 'all agree'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
