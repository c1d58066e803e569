// CUDA kernels of the single-token decoding steps (recurrent_step_*): one block per
// (batch, head), one thread per state column, the state [K, Vs] updated in place in f32.
// Each column of the state evolves on its own in every recurrence, so no thread waits for
// another once q and k are in shared memory.
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "layers/linear_attention/decay_kernels.h"
#include "layers/linear_attention/delta_kernels.h"
#include "layers/linear_attention/kda_kernels.h"

namespace lat::linear_attention {
namespace {

constexpr int kMaxK = 256;

// S = a S + k [v, 1?]^T, r = scale S^T q; o = r[:V] or r[:V] / (r[V] + eps).
__global__ void step_decay_kernel(int64_t K, int64_t V, bool normalize, float eps, const float* q, const float* k,
                                  const float* v, const float* g, float scale, float* state, float* o) {
  __shared__ float qs[kMaxK], ks[kMaxK];
  extern __shared__ float r[];  // Vs readouts
  const int64_t bh = blockIdx.x, Vs = normalize ? V + 1 : V;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
    qs[i] = q[bh * K + i];
    ks[i] = k[bh * K + i];
  }
  __syncthreads();
  const float a = g != nullptr ? expf(g[bh]) : 1.0f;
  float* S = state + bh * K * Vs;
  for (int64_t col = threadIdx.x; col < Vs; col += blockDim.x) {
    const float vv = col < V ? v[bh * V + col] : 1.0f;
    float acc = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      const float s = a * S[i * Vs + col] + ks[i] * vv;
      S[i * Vs + col] = s;
      acc += qs[i] * s;
    }
    r[col] = scale * acc;
  }
  __syncthreads();
  for (int64_t col = threadIdx.x; col < V; col += blockDim.x)
    o[bh * V + col] = normalize ? r[col] / (r[V] + eps) : r[col];
}

// L2 norm of a shared vector of length K in place (eps 1e-6, as the chunk ops).
__device__ void l2norm_shared(float* x, int64_t K, float* partial) {
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) s += x[i] * x[i];
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += partial[w];
  const float inv = 1.0f / sqrtf(total + 1e-6f);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) x[i] *= inv;
  __syncthreads();
}

// S_a = a S, u = beta (v - S_a^T k), S = S_a + k u^T, o = scale S^T q (per column).
__global__ void step_delta_kernel(int64_t K, int64_t V, bool l2norm, const float* q, const float* k, const float* v,
                                  const float* g, const float* beta, float scale, float* state, float* o) {
  __shared__ float qs[kMaxK], ks[kMaxK], partial[lat::cuda::kBlock / 32];
  const int64_t bh = blockIdx.x;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
    qs[i] = q[bh * K + i];
    ks[i] = k[bh * K + i];
  }
  __syncthreads();
  if (l2norm) {
    l2norm_shared(qs, K, partial);
    l2norm_shared(ks, K, partial);
  }
  const float a = g != nullptr ? expf(g[bh]) : 1.0f, b = beta[bh];
  float* S = state + bh * K * V;
  for (int64_t col = threadIdx.x; col < V; col += blockDim.x) {
    float p = 0.0f;
    for (int64_t i = 0; i < K; ++i) p += a * S[i * V + col] * ks[i];
    const float u = b * (v[bh * V + col] - p);
    float acc = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      const float s = a * S[i * V + col] + ks[i] * u;
      S[i * V + col] = s;
      acc += qs[i] * s;
    }
    o[bh * V + col] = scale * acc;
  }
}

// KDA's step, the per-key-channel decay a_i = e^{g_i}: S_a = Diag(a) S, u = beta (v - S_a^T k),
// S = S_a + k u^T, o = scale S^T q (per column).
__global__ void step_kda_kernel(int64_t K, int64_t V, bool l2norm, const float* q, const float* k, const float* v,
                                const float* g, const float* beta, float scale, float* state, float* o) {
  __shared__ float qs[kMaxK], ks[kMaxK], as[kMaxK], partial[lat::cuda::kBlock / 32];
  const int64_t bh = blockIdx.x;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
    qs[i] = q[bh * K + i];
    ks[i] = k[bh * K + i];
    as[i] = expf(fminf(g[bh * K + i], 0.0f));
  }
  __syncthreads();
  if (l2norm) {
    l2norm_shared(qs, K, partial);
    l2norm_shared(ks, K, partial);
  }
  const float b = beta[bh];
  float* S = state + bh * K * V;
  for (int64_t col = threadIdx.x; col < V; col += blockDim.x) {
    float p = 0.0f;
    for (int64_t i = 0; i < K; ++i) p += as[i] * S[i * V + col] * ks[i];
    const float u = b * (v[bh * V + col] - p);
    float acc = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      const float s = as[i] * S[i * V + col] + ks[i] * u;
      S[i * V + col] = s;
      acc += qs[i] * s;
    }
    o[bh * V + col] = scale * acc;
  }
}

void check_step(int64_t BH, int64_t K) {
  LAT_CHECK(K >= 1 && K <= kMaxK, "recurrent step (cuda): K: expected 1.." << kMaxK << ", got " << K);
  LAT_CHECK(BH >= 1 && BH < (int64_t{1} << 31), "recurrent step (cuda): B*H = " << BH << " out of range");
}

}  // namespace

void recurrent_step_decay_cuda(const DecayParams& p, float* state, float* o) {
  const int64_t BH = p.B * p.H;
  check_step(BH, p.K);
  lat::cuda::DeviceGuard guard(p.device);
  const size_t smem = static_cast<size_t>(p.Vs()) * sizeof(float);
  step_decay_kernel<<<static_cast<unsigned>(BH), lat::cuda::kBlock, smem, lat::cuda::current_stream(p.device)>>>(
      p.K, p.V, p.normalize, kNormEps, p.q, p.k, p.v, p.g, p.scale, state, o);
  LAT_CUDA_CHECK_LAUNCH();
}

void recurrent_step_delta_cuda(const DeltaParams& p, float* state, float* o) {
  const int64_t BH = p.B * p.H;
  check_step(BH, p.K);
  lat::cuda::DeviceGuard guard(p.device);
  step_delta_kernel<<<static_cast<unsigned>(BH), lat::cuda::kBlock, 0, lat::cuda::current_stream(p.device)>>>(
      p.K, p.V, p.use_qk_l2norm_in_kernel, p.q, p.k, p.v, p.g, p.beta, p.scale, state, o);
  LAT_CUDA_CHECK_LAUNCH();
}

void recurrent_step_kda_cuda(const KdaParams& p, float* state, float* o) {
  const int64_t BH = p.B * p.H;
  check_step(BH, p.K);
  lat::cuda::DeviceGuard guard(p.device);
  step_kda_kernel<<<static_cast<unsigned>(BH), lat::cuda::kBlock, 0, lat::cuda::current_stream(p.device)>>>(
      p.K, p.V, p.use_qk_l2norm_in_kernel, p.q, p.k, p.v, p.gk, p.beta, p.scale, state, o);
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::linear_attention
