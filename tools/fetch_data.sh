#!/usr/bin/env bash
# Puts tinyshakespeare.txt (Karpathy's char-rnn corpus, 1,115,394 bytes) into the repo's
# ignored data/ folder: a copy of the shared one when present, else a download. Then cuts
# shakespeare_heldout.txt from it: the last 111,540 bytes, which are the val split of
# configs/shakespeare_hybrid.yaml (val_fraction 0.1: n_train = int(0.9 n)), so the base model
# never trains on them; configs/shakespeare_finetune.yaml fine-tunes the base model on them.
# Idempotent: does nothing when files of the right size are already there.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target="$repo/data/tinyshakespeare.txt"
url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
expected_bytes=1115394
heldout="$repo/data/shakespeare_heldout.txt"
heldout_bytes=111540

size_ok() { [[ -f "$1" && $(stat -c %s "$1") -eq $expected_bytes ]]; }

make_heldout() {
  [[ -f "$heldout" && $(stat -c %s "$heldout") -eq $heldout_bytes ]] && return 0
  tail -c "$heldout_bytes" "$target" > "$heldout.tmp"
  mv "$heldout.tmp" "$heldout"
  echo "fetch_data: wrote data/shakespeare_heldout.txt (the last $heldout_bytes bytes)"
}

if size_ok "$target"; then
  make_heldout
  exit 0
fi
mkdir -p "$repo/data"

for source in "${LAT_SHARED_DATA:+$LAT_SHARED_DATA/tinyshakespeare.txt}" "$repo/../shared/data/tinyshakespeare.txt"; do
  if [[ -n "$source" ]] && size_ok "$source"; then
    install -m 0644 "$source" "$target.tmp"
    mv "$target.tmp" "$target"
    echo "fetch_data: copied $source -> data/tinyshakespeare.txt"
    make_heldout
    exit 0
  fi
done

curl -fsSL --retry 3 -o "$target.tmp" "$url" || { rm -f "$target.tmp"; echo "error: fetch_data: download of $url failed" >&2; exit 1; }
if ! size_ok "$target.tmp"; then
  echo "error: fetch_data: $url gave $(stat -c %s "$target.tmp") bytes, expected $expected_bytes" >&2
  rm -f "$target.tmp"
  exit 1
fi
mv "$target.tmp" "$target"
echo "fetch_data: downloaded $url -> data/tinyshakespeare.txt"
make_heldout
