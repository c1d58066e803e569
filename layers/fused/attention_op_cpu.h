// CPU kernels of the fused causal attention (layers/fused/attention_op.h): plain structs of
// pointers, sizes and strides in, no framework tensors.
#pragma once
#include <cstdint>

#include "layers/fused/attention_args.h"

namespace lat::attention_cpu {

/// The call's pointers, sizes and visibility (attention_args.h), the same for both backends.
using attention::Args;

/// Forward: writes o (contiguous [B, Tq, H, Dv]) and lse ([B, H, Tq]; may be nullptr when
/// no backward follows). OpenMP over (batch, head, query tile).
template <class S>
void forward(const Args<S>& a, S* o, S* lse);

/// Backward from do_ [B, Tq, H, Dv], the forward's o and lse: writes dq [B, Tq, H, D],
/// dk [B, Tk, Hkv, D], dv [B, Tk, Hkv, Dv] (contiguous; q, k, v batch strides must be the
/// contiguous ones). dq: OpenMP over (batch, head, query tile); dk, dv: over (batch, kv
/// head, key tile), summing the query heads of the group, so no two threads write one row.
template <class S>
void backward(const Args<S>& a, const S* o, const S* lse, const S* do_, S* dq, S* dk, S* dv);

}  // namespace lat::attention_cpu
