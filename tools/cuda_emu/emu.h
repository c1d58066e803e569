// CPU emulation of the CUDA kernel model, for checking lat's kernels on machines without a
// GPU (tools/cuda_emu/run.sh). A launch runs the grid's blocks one after another, each
// with blockDim std::threads: __syncthreads is a barrier of the block, warp shuffles go
// through a per-warp barrier, __shared__ variables are statics (one block is alive at a
// time), dynamic shared memory is one NaN-filled buffer. It checks indexing, masking,
// synchronization structure (a missing barrier or a shuffle not reached by a whole warp
// hangs or fails) and the launch limits; it does not model timing, memory ordering
// between unsynchronized threads, or numerics of the GPU's math library.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct emu_uint3 {
  unsigned x = 0, y = 0, z = 0;
};

extern thread_local emu_uint3 threadIdx;
extern thread_local emu_uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static

// CUDA's math overloads live in the global namespace.
using std::exp;
using std::expm1;
using std::fabs;
using std::log;
using std::log1p;
using std::max;
using std::min;
using std::pow;
using std::sqrt;
using std::tanh;

namespace emu {

// The barriers and the shuffle exchange of the block an emulated thread belongs to.
struct BlockContext {
  std::barrier<>* block;
  std::vector<std::unique_ptr<std::barrier<>>>* warps;
  std::vector<double>* exchange;
};
extern thread_local BlockContext context;

float* dynamic_shared();
// Aborts on a launch CUDA would refuse (block size, grid limits, shared memory).
void check_launch(dim3 grid, dim3 block, size_t shared_bytes);

// kernel<<<grid, block, shared, stream>>>(args) becomes Launch(grid, block, shared, stream).run(kernel, args).
struct Launch {
  dim3 grid, block;
  Launch(dim3 g, dim3 b, size_t shared_bytes = 0, void* = nullptr) : grid(g), block(b) {
    check_launch(g, b, shared_bytes);
  }
  template <class... P, class... A>
  void run(void (*kernel)(P...), A&&... args) {
    const unsigned n = block.x * block.y * block.z;
    std::barrier<> block_barrier(n);
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (unsigned w = 0; w < (n + 31) / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, n - 32 * w)));
    std::vector<double> exchange(n);
    const std::tuple<std::decay_t<P>...> params(static_cast<std::decay_t<P>>(args)...);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n; ++t) {
      threads.emplace_back([&, t] {
        context = {&block_barrier, &warps, &exchange};
        blockDim = block;
        gridDim = grid;
        threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        for (unsigned z = 0; z < grid.z; ++z)
          for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
              blockIdx = {x, y, z};
              std::apply(kernel, params);
              block_barrier.arrive_and_wait();
            }
      });
    }
    for (auto& thread : threads) thread.join();
  }
};

}  // namespace emu

inline void __syncthreads() { emu::context.block->arrive_and_wait(); }

// Every lane of the warp writes its value, waits, reads its source lane's, waits.
template <class T, class SourceLane>
T emu_shuffle(T v, SourceLane source) {
  static_assert(sizeof(T) <= sizeof(double));
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  auto& barrier = *(*emu::context.warps)[warp];
  double slot = 0.0;
  std::memcpy(&slot, &v, sizeof(T));
  (*emu::context.exchange)[tid] = slot;
  barrier.arrive_and_wait();
  const double from = (*emu::context.exchange)[warp * 32 + source(lane)];
  T r;
  std::memcpy(&r, &from, sizeof(T));
  barrier.arrive_and_wait();
  return r;
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  return emu_shuffle(v, [offset](int lane) { return lane ^ offset; });
}
template <class T>
T __shfl_down_sync(unsigned, T v, int offset) {
  return emu_shuffle(v, [offset](int lane) { return lane + offset < 32 ? lane + offset : lane; });
}

template <class T>
T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
