// CPU kernels of the fused causal attention (layers/fused/attention_op.h): plain structs of
// pointers, sizes and strides in, no framework tensors.
#pragma once
#include <cstdint>

#include "lat/precision.h"
#include "layers/fused/attention_args.h"

namespace lat::attention_cpu {

/// The call's pointers, sizes and visibility (attention_args.h), the same for both backends.
using attention::Args;

/// Forward: writes o (contiguous [B, Tq, H, Dv]) and lse ([B, H, Tq]; may be nullptr when
/// no backward follows). OpenMP over (batch, head, query tile). `precision` bf16 (float only,
/// and only where cpu::has_avx512_bf16(); fp32 otherwise) rounds the inputs of the products
/// Q K^T and P V to bf16 and accumulates in fp32; the softmax stays fp32. The caller reads
/// the thread's compute precision: the OpenMP threads do not share it.
template <class S>
void forward(const Args<S>& a, Precision precision, S* o, S* lse);

/// Backward from do_ [B, Tq, H, Dv], the forward's o and lse: writes dq [B, Tq, H, D],
/// dk [B, Tk, Hkv, D], dv [B, Tk, Hkv, Dv] (contiguous; q, k, v batch strides must be the
/// contiguous ones). OpenMP over (batch, kv head, span of query tiles): a task owns the dq
/// rows of its queries and sums the dk, dv of its keys over the group's query heads in its
/// own buffer, which it writes out when it is its kv head's only span (B Hkv >= 16), else the
/// spans' buffers are added in span order after: no two threads write one row, and the
/// result does not depend on the thread count. `precision` as in forward,
/// for the products Q K^T, dO V^T, P^T dO, dS K and dS^T Q.
template <class S>
void backward(const Args<S>& a, Precision precision, const S* o, const S* lse, const S* do_, S* dq, S* dk, S* dv);

}  // namespace lat::attention_cpu
