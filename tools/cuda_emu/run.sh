#!/usr/bin/env bash
# Runs lat's CUDA code on the CPU through the emulator of emu.h, for checking kernels where
# no GPU is at hand (slow: one OS thread per CUDA thread; use small shapes).
#
#   tools/cuda_emu/run.sh BUILD_DIR TARGET [ARGS...]
#
# BUILD_DIR is a CUDA build (LAT_CUDA=ON, or AUTO with nvcc) in which the library and the
# CMake target TARGET (e.g. test_cuda_ops, test_cuda_linear_attention, lat_cli) are built.
# Every .cu file is rewritten as C++ (transform.py) and compiled with g++ against the
# emulated runtime; the library's C++ objects are reused as they are; TARGET is relinked
# into BUILD_DIR/cuda_emu/ without the CUDA libraries and run with ARGS (LAT_POISON=1 is
# set, as under ctest; NCCL is a one-rank stand-in, cuBLAS a reference gemm). CUDA_EMU_JOBS=N
# limits the parallel g++ jobs (default: all cores).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
(($# >= 2)) || { echo "usage: tools/cuda_emu/run.sh BUILD_DIR TARGET [ARGS...]" >&2; exit 2; }
build=$(cd "$1" && pwd)
target=$2
shift 2
work="$build/cuda_emu"
mkdir -p "$work/src" "$work/obj"
flags=(-std=c++20 -O1 -DLAT_WITH_CUDA -include "$here/emu.h" -I"$here" -I"$repo" -I"$repo/include"
       -I"$build/generated" -w)

# 1. Each .cu as C++, and the emulator, compiled where the object is missing or older than its
# source or any header it read (g++'s dependency file), CUDA_EMU_JOBS at a time (default: all
# cores). A failed compile stops the script with the compiler's messages and leaves no object.
jobs=${CUDA_EMU_JOBS:-$(nproc)}
((jobs >= 1)) || { echo "cuda_emu: CUDA_EMU_JOBS must be at least 1, got '$jobs'" >&2; exit 2; }
up_to_date() {  # OBJ: exists and is newer than everything its .d file lists
  local obj=$1 dep
  [[ -f $obj && -f ${obj%.o}.d ]] || return 1
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "${obj%.o}.d"); do
    [[ -f $dep && ! $dep -nt $obj ]] || return 1
  done
}
pids=() objs=() failed=0
finish_oldest() {  # waits for the oldest compile job; prints its messages if it failed
  local pid=${pids[0]} obj=${objs[0]}
  pids=("${pids[@]:1}") objs=("${objs[@]:1}")
  if ! wait "$pid"; then
    echo "cuda_emu: compiling $(basename "${obj%.o}").cpp failed:" >&2
    cat "${obj%.o}.log" >&2
    failed=1
  fi
}
compile() {  # SRC OBJ
  local src=$1 obj=$2
  up_to_date "$obj" && return 0
  ((${#pids[@]} < jobs)) || finish_oldest
  rm -f "$obj"
  g++ "${flags[@]}" -MMD -MF "${obj%.o}.d" -c "$src" -o "$obj" >"${obj%.o}.log" 2>&1 &
  pids+=($!) objs+=("$obj")
}
all_objs=()
for f in $(cd "$repo" && find autograd layers optim train -name '*.cu' | sort); do
  out="$work/src/$(echo "$f" | tr / _).cpp"
  obj="$work/obj/$(basename "$out" .cpp).o"
  python3 "$here/transform.py" "$repo/$f" "$out.new"
  if cmp -s "$out.new" "$out"; then rm "$out.new"; else mv "$out.new" "$out"; fi
  compile "$out" "$obj"
  all_objs+=("$obj")
done
compile "$here/emu.cpp" "$work/obj/emu.o"
all_objs+=("$work/obj/emu.o")
while ((${#pids[@]} > 0)); do finish_oldest; done
((failed == 0)) || { echo "cuda_emu: compile failed (messages above)" >&2; exit 1; }
# The one-rank NCCL and the reference cuBLAS that lat's dlopen finds first (nccl_emu.cpp,
# cublas_emu.cpp).
if [[ ! "$work/libnccl.so.2" -nt "$here/nccl_emu.cpp" ]]; then
  g++ -std=c++20 -O1 -shared -fPIC "$here/nccl_emu.cpp" -o "$work/libnccl.so.2"
fi
if [[ ! "$work/libcublas.so.13" -nt "$here/cublas_emu.cpp" || ! "$work/libcublas.so.13" -nt "$here/cublas_v2.h" ]]; then
  g++ -std=c++20 -O1 -shared -fPIC -I"$here" "$here/cublas_emu.cpp" -o "$work/libcublas.so.13"
fi

# 2. The library: its C++ objects plus the emulated kernels.
rm -f "$work/liblat_emu.a"
ar rcs "$work/liblat_emu.a" $(find "$build/CMakeFiles/lat.dir" -name '*.cpp.o' | sort) "${all_objs[@]}"

# 3. TARGET's link line with liblat.a swapped for it and the CUDA libraries dropped.
link=$(find "$build" -path "*/CMakeFiles/$target.dir/link.txt" | head -1)
[[ -n $link ]] || { echo "cuda_emu: no link.txt for target $target in $build" >&2; exit 1; }
link_dir=$(dirname "$(dirname "$(dirname "$link")")")
python3 - "$link" "$work" >"$work/link.sh" <<'PY'
import os, shlex, sys
link, work = sys.argv[1], sys.argv[2]
words = shlex.split(open(link).read())
out, skip_next = [], False
for i, w in enumerate(words):
    if skip_next:
        skip_next = False
        continue
    if w == '-o':
        name = os.path.basename(words[i + 1])
        out += ['-o', os.path.join(work, name)]
        skip_next = True
    elif w.endswith('liblat.a'):
        out.append(os.path.join(work, 'liblat_emu.a'))
    elif '/cuda/' in w or w.startswith('-lcud') or 'cublas' in w or 'culibos' in w:
        continue
    else:
        out.append(w)
print(' '.join(shlex.quote(w) for w in out))
PY
(cd "$link_dir" && bash "$work/link.sh")
exe=$(sed -n 's/.* -o \([^ ]*\) .*/\1/p' "$work/link.sh")
LAT_POISON=1 LD_LIBRARY_PATH="$work${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$exe" "$@"
