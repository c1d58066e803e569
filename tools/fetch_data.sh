#!/usr/bin/env bash
# Puts tinyshakespeare.txt (Karpathy's char-rnn corpus, 1,115,394 bytes) into the repo's
# ignored data/ folder: a copy of the shared one when present, else a download.
# Idempotent: does nothing when a file of the right size is already there.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target="$repo/data/tinyshakespeare.txt"
url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
expected_bytes=1115394

size_ok() { [[ -f "$1" && $(stat -c %s "$1") -eq $expected_bytes ]]; }

size_ok "$target" && exit 0
mkdir -p "$repo/data"

for source in "${LAT_SHARED_DATA:+$LAT_SHARED_DATA/tinyshakespeare.txt}" "$repo/../shared/data/tinyshakespeare.txt"; do
  if [[ -n "$source" ]] && size_ok "$source"; then
    install -m 0644 "$source" "$target.tmp"
    mv "$target.tmp" "$target"
    echo "fetch_data: copied $source -> data/tinyshakespeare.txt"
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
