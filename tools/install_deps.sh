#!/usr/bin/env bash
# Installs the Debian packages lat needs, only those missing. Idempotent and silent when
# everything is already there; otherwise one line says what it installed.
#   tools/install_deps.sh        what make train, test and bench need
#   tools/install_deps.sh fuzz   that plus what make fuzz needs
#   tools/install_deps.sh interop   that plus what make interop needs (a virtualenv with pip)
set -euo pipefail

packages=(
  build-essential cmake ccache
  libdnnl-dev ocl-icd-opencl-dev libhdf5-dev zlib1g-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  libpcre2-dev libutf8proc-dev libsentencepiece-dev
  openmpi-bin libopenmpi-dev
  python3-torch python3-numpy python3-h5py
  gnuplot-nox
  curl
)
# make fuzz: clang; libFuzzer and the sanitizer runtimes (only recommended by clang, so
# --no-install-recommends leaves them out); clang's OpenMP runtime and omp.h; llvm-14 for
# llvm-symbolizer (named stack frames, by which run_fuzz.sh tells lat's findings from libhdf5's).
if [[ ${1:-} == fuzz ]]; then
  packages+=(clang libclang-rt-14-dev libomp-14-dev llvm-14)
fi
if [[ ${1:-} == interop ]]; then
  packages+=(python3-venv)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "error: install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >/dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: installed ${missing[*]}"
