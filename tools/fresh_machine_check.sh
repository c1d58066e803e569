#!/usr/bin/env bash
# Proves that a bare Debian 12 gets from nothing to a passing `make test`, `make fuzz` and
# `make interop` (what .ci/run runs) and a finished `make train` with the project's own files
# alone: builds a minimal Debian 12 root (debootstrap --variant=minbase bookworm), installs
# only make and sudo in it (what a user types before the README's first command), copies a
# clean clone of HEAD and the shared data beside it, and runs `make test`, `make fuzz
# FUZZ_SECONDS=10`, `make interop` and `make train` inside (chroot, /proc and /dev mounted,
# unmounted on exit). Prints PASS with the figures, or FAIL naming the first failing command
# with its last lines. Needs root; takes about 40-50 minutes on 2 cores. Too slow for CI:
# run it whenever tools/install_deps.sh, a find_package or the Makefile changes.
#
#   tools/fresh_machine_check.sh [ROOT_DIR]     (default /var/tmp/lat-fresh-root, made anew)
#   MIRROR=URL to override the Debian mirror (default: the host's first apt source)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=${1:-/var/tmp/lat-fresh-root}
data_dir="$repo/../shared/data"
log_dir=$(mktemp -d /tmp/lat-fresh-check.XXXXXX)

die() { echo "FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "fresh_machine_check: needs root (debootstrap and chroot)"
[[ -f "$data_dir/tinyshakespeare.txt" ]] || die "no $data_dir/tinyshakespeare.txt to copy in"

host_mirror() {
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | head -n 1 | awk '{print $2}')
  [[ -n "$uri" ]] || uri=$(grep -hs '^deb ' /etc/apt/sources.list | head -n 1 | awk '{print $2}')
  [[ -n "$uri" ]] || die "no Debian mirror in the host's apt sources; set MIRROR"
  echo "$uri"
}
mirror=${MIRROR:-$(host_mirror)}

mounted=()
cleanup() {
  local m
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT

# Runs one step, its output to a log; on failure prints the command and the log's tail.
step() {
  local name=$1; shift
  local log="$log_dir/$name.log"
  local start=$SECONDS
  echo "== $name: $*"
  if ! "$@" > "$log" 2>&1; then
    echo "FAIL: $name ($*), last lines of $log:"
    tail -n 40 "$log"
    exit 1
  fi
  echo "   $name took $((SECONDS - start)) s"
}
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 TERM=dumb bash -c "$1"; }

command -v debootstrap > /dev/null || step install-debootstrap \
  bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap'

[[ -e "$root" ]] && { umount -R "$root"/{proc,dev} 2>/dev/null || true; rm -rf --one-file-system "$root"; }
step debootstrap debootstrap --variant=minbase bookworm "$root" "$mirror"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# Where the host reaches the Python registry through a TLS proxy whose CA only the host trusts
# (its /etc/pip.conf names that bundle), the root's pip gets the same bundle under a path of
# its own (the root's ca-certificates package rewrites /etc/ssl/certs). A machine on the open
# internet needs neither; make interop installs nothing for it.
host_pip_cert=$(awk -F' *= *' '$1 == "cert" { print $2 }' /etc/pip.conf 2>/dev/null || true)
if [[ -n $host_pip_cert && -f $host_pip_cert ]]; then
  cp "$host_pip_cert" "$root/etc/host-pip-ca.crt"
  printf '[global]\ncert = /etc/host-pip-ca.crt\n' > "$root/etc/pip.conf"
fi
for m in proc dev; do
  mkdir -p "$root/$m"
  if [[ $m == proc ]]; then mount -t proc proc "$root/proc"; else mount --bind /dev "$root/dev"; fi
  mounted+=("$root/$m")
done

step user-packages in_root 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make sudo'
packages_before=$(in_root "dpkg-query -W -f='\${Status}\n' | grep -c 'install ok installed'")

mkdir -p "$root/work/shared"
git clone --quiet --no-local "$repo" "$root/work/lat"
cp -r "$data_dir" "$root/work/shared/data"

test_start=$SECONDS
step make-test in_root 'cd /work/lat && make test'
test_seconds=$((SECONDS - test_start))
fuzz_start=$SECONDS
step make-fuzz in_root 'cd /work/lat && make fuzz FUZZ_SECONDS=10'
fuzz_seconds=$((SECONDS - fuzz_start))
interop_start=$SECONDS
step make-interop in_root 'cd /work/lat && make interop'
interop_seconds=$((SECONDS - interop_start))
train_start=$SECONDS
step make-train in_root 'cd /work/lat && make train'
train_seconds=$((SECONDS - train_start))

packages_after=$(in_root "dpkg-query -W -f='\${Status}\n' | grep -c 'install ok installed'")
# The figures are read from the logs; a line that is not found leaves its figure empty.
summary=$(grep -E 'tests passed' "$log_dir/make-test.log" | tail -n 1 || true)
skipped=$(grep -cE '\*\*\*Skipped' "$log_dir/make-test.log" || true)
skipped_not_cuda=$(grep -E '\*\*\*Skipped' "$log_dir/make-test.log" | grep -vE 'Cuda|MixedDevices' || true)
val_loss=$(grep -E 'val loss .* on the whole val split' "$log_dir/make-train.log" | tail -n 1 || true)
finished=$(grep -E '^finished at step' "$log_dir/make-train.log" | tail -n 1 || true)

echo "PASS: a bare Debian 12 root ran make test, make fuzz, make interop and make train"
echo "  packages: $packages_before after make+sudo, $packages_after after make test (installed by install_deps.sh, fuzz packages included: $((packages_after - packages_before)))"
echo "  make test: ${test_seconds} s (install, build, tests): $summary"
echo "  skipped: $skipped (CUDA: no GPU); other skips: ${skipped_not_cuda:-none}"
echo "  make fuzz: ${fuzz_seconds} s (clang install, build, seed replay, 10 s per harness)"
echo "  make interop: ${interop_seconds} s (virtualenv with torch and transformers downloaded, checks): $(grep -c '^ok' "$log_dir/make-interop.log" || true) checks ok"
echo "  make train: ${train_seconds} s (build included): $finished"
echo "  $val_loss"
echo "  logs: $log_dir"
