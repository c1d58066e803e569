#!/usr/bin/env bash
# `make fuzz`: every harness built in BUILD_DIR (tests/fuzz/fuzz_<name>) first replays its seed
# corpus (tests/fuzz/corpus/<name>/) and its recorded crashes (tests/fuzz/crashes/<name>/, if
# any) one file at a time, then fuzzes for SECONDS. New inputs go to BUILD_DIR/fuzz/<name>/corpus
# (kept between runs; the committed corpus is only read), crashing inputs to
# BUILD_DIR/fuzz/<name>/. Prints per harness the executions, coverage (libFuzzer's cov: and ft:)
# and each finding's file; exits 1 when any replay or fuzzing run found something in lat. A
# finding whose innermost frame is inside libhdf5 (a bug of the system library on a damaged
# file) is printed but does not fail the run.
#   tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS
set -uo pipefail
build=$(realpath "${1:?usage: run_fuzz.sh BUILD_DIR SECONDS}")
seconds=${2:?usage: run_fuzz.sh BUILD_DIR SECONDS}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# A finding: a crash or sanitizer report, an input running over 10 s, over 2 GB resident, or
# one allocation over 1 GB. The allocation limit is half the RSS one: an input that allocates
# and fills 1.5 GB once leaves the process that large, and with equal limits the RSS limit
# would then trip on some later, innocent input instead of this one.
limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024)
export OMP_NUM_THREADS=1
# Findings are told apart by the function names in their stack traces (in_libhdf5 below), so
# the sanitizers need LLVM's symbolizer (Debian's llvm-14, which `tools/install_deps.sh fuzz`
# installs, has it outside PATH). Without names every finding would count as lat's.
symbolizer=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer || ls /usr/lib/llvm-*/bin/llvm-symbolizer 2>/dev/null | tail -n 1)}
[[ -x $symbolizer ]] || { echo "error: run_fuzz: no llvm-symbolizer (tools/install_deps.sh fuzz installs llvm-14)" >&2; exit 1; }
export ASAN_SYMBOLIZER_PATH=$symbolizer UBSAN_SYMBOLIZER_PATH=$symbolizer

harnesses=("$build"/tests/fuzz/fuzz_*)
[[ -x ${harnesses[0]} ]] || { echo "error: run_fuzz: no harnesses in $build/tests/fuzz" >&2; exit 1; }

# The stack frames of the finding in libFuzzer's LOG outside the sanitizer and libFuzzer
# runtimes and the standard library, innermost first.
frames() {
  grep -E '^ +#[0-9]+ ' "$1" |
    grep -vE 'sanitizer|fuzzer::|__asan|__interceptor|malloc|operator new|libc\.so|libstdc|abort|raise|pthread_kill|__cxa|__gnu_cxx|terminate| in std::'
}

# Whether the finding in LOG happened inside libhdf5: of its frames in libhdf5 or in lat, the
# innermost is libhdf5's. A bug of the system's HDF5 library on a damaged file, which lat
# cannot fix (reproducers in tests/fuzz/crashes/README.md): reported, not a failure of lat.
# A libhdf5 frame is told by its library's path, as its static functions have no name (an
# out-of-memory report's stack can hold only such a frame: libhdf5 sizes a variable-length
# string's buffer from the length the damaged file gives).
in_libhdf5() {
  # One awk, no pipeline: under pipefail an early-exiting grep would fail the pipe by SIGPIPE.
  awk 'BEGIN { r = 1 } /^ +#[0-9]+ / && (/ in lat::/ || /libhdf5/) { r = ($0 ~ /libhdf5/) ? 0 : 1; exit }
       END { exit r }' "$1"
}

# The finding in libFuzzer's LOG: its first error lines, the top two frames outside the
# sanitizer and libFuzzer runtimes and the standard library, and the first frame in lat.
describe() {
  grep -E -m 2 "ERROR: |runtime error|terminate called|what\(\)|fuzz: " "$1" | cut -c1-200
  local frames
  frames=$(frames "$1")
  { head -2 <<< "$frames"; grep -m 1 ' in lat::' <<< "$frames"; } | awk '!seen[$0]++' |
    sed -E 's/ \(BuildId: [0-9a-f]+\)//; s/std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >/std::string/g; s/^ +/    /' |
    cut -c1-200
}

found=0
summary=()
for harness in "${harnesses[@]}"; do
  name=${harness##*/fuzz_}
  work=$build/fuzz/$name
  mkdir -p "$work/corpus"

  replayed=0
  libhdf5=0
  for input in "$src/tests/fuzz/corpus/$name"/* "$src/tests/fuzz/crashes/$name"/*; do
    [[ -f $input ]] || continue
    replayed=$((replayed + 1))
    if ! "$harness" "${limits[@]}" "$input" > "$work/replay.log" 2>&1; then
      if in_libhdf5 "$work/replay.log"; then
        libhdf5=$((libhdf5 + 1))
        continue
      fi
      echo "== fuzz_$name: replay of ${input#"$src"/} FAILED:"
      describe "$work/replay.log"
      summary+=("fuzz_$name: replay FAILED on ${input#"$src"/}")
      found=1
    fi
  done
  echo "== fuzz_$name: replayed $replayed files ($libhdf5 still failing inside libhdf5, as recorded); fuzzing for ${seconds}s"

  "$harness" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/" \
    "$work/corpus" "$src/tests/fuzz/corpus/$name" > "$work/fuzz.log" 2>&1
  rc=$?
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log" | tail -1)
  coverage=$(grep -E '^#[0-9]+.*cov: ' "$work/fuzz.log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+')
  line="fuzz_$name: ${executions:-?} executions, ${coverage:-no coverage line}"
  if [[ $rc -ne 0 ]]; then
    artifact=$(sed -n 's/.*Test unit written to //p' "$work/fuzz.log" | tail -1)
    if in_libhdf5 "$work/fuzz.log"; then
      echo "== fuzz_$name: libhdf5 finding (inside the system HDF5 library, not lat; fuzzing stopped there): ${artifact:-no input written}"
      line+=", stopped at a libhdf5 finding: ${artifact:-see $work/fuzz.log}"
    else
      echo "== fuzz_$name: FOUND (rc $rc): ${artifact:-no input written}; log $work/fuzz.log"
      line+=", FOUND: ${artifact:-see $work/fuzz.log}"
      found=1
    fi
    describe "$work/fuzz.log"
  fi
  summary+=("$line")
done

echo "== fuzz summary (${seconds}s per harness)"
printf '%s\n' "${summary[@]}"
exit $found
