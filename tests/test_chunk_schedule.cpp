// The CPU chunk kernel of chunk_delta_rule and chunk_gated_delta_rule spreads a call over
// the threads in one of two schedules (chunk_gated_delta_rule_cpu.cpp, Schedule): per head
// (one loop over heads running every phase of a head's chunks) when the call has at least
// as many heads, B*H, as threads, else per phase (one loop per phase). Both must give the
// same bits: the outputs, final states and every gradient, in fp32 and in bf16, for each
// gate regime, with and without cu_seqlens (where every sequence is its own call with H
// heads) and with the in-kernel L2 norm. The thread count selects the schedule: 1 thread,
// and as many threads as heads, run per head; one thread more than heads runs per phase.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "lat/ops.h"
#include "lat/precision.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Gate;

struct ScheduleCase {
  Gate gate = Gate::none;  // none: chunk_delta_rule; else chunk_gated_delta_rule
  bool packed = false;     // one row of sequences with cu_seqlens
  bool l2norm = false;     // q, k normalized in the op
  Precision precision = Precision::fp32;
};

std::string schedule_case_name(const ::testing::TestParamInfo<ScheduleCase>& info) {
  const ScheduleCase& c = info.param;
  return std::string(testing::gate_name(c.gate)) + (c.packed ? "_packed" : "") + (c.l2norm ? "_l2" : "") +
         (c.precision == Precision::bf16 ? "_bf16" : "_fp32");
}

std::vector<ScheduleCase> schedule_cases() {
  std::vector<ScheduleCase> cases;
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (Gate gate : {Gate::none, Gate::zero, Gate::mild, Gate::strong})
      for (bool packed : {false, true}) cases.push_back({gate, packed, false, precision});
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (bool packed : {false, true}) cases.push_back({Gate::mild, packed, true, precision});
  return cases;
}

// Unpacked: B = 2, H = 2 (4 heads), T = 200 in chunks of 64 (a partial last chunk), K = V
// = 64. Packed: one row of sequences ending inside and on chunk edges of 16, 1-token ones
// included (each call has H = 2 heads), K = 32, V = 48.
constexpr int64_t kH = 2;
const std::vector<int64_t> kLengths = {5, 1, 16, 11, 1, 32, 17, 1};

struct Prepared {
  testing::DeltaInputs in;
  Tensor cu_seqlens;  // undefined when unpacked
  int chunk_size = 64;
  int64_t heads_per_call = 0;
};

Prepared prepare(const ScheduleCase& c) {
  Prepared r;
  if (!c.packed) {
    r.in = testing::make_delta_inputs({{2, 200, kH, 64, 64, c.gate, true, false, 7}, c.l2norm, 64});
    r.heads_per_call = 2 * kH;
    return r;
  }
  int64_t T = 0;
  std::vector<int64_t> offsets{0};
  for (int64_t L : kLengths) offsets.push_back(T += L);
  const int64_t N = static_cast<int64_t>(kLengths.size()), K = 32, V = 48;
  r.in = testing::make_delta_inputs({{1, T, kH, K, V, c.gate, false, false, 11}, c.l2norm, 16});
  Generator gen(13);
  r.in.base.initial_state = Tensor::randn({N, kH, K, V}, gen);
  r.in.base.d_final_state = Tensor::randn({N, kH, K, V}, gen);
  r.cu_seqlens = Tensor::from_vector(offsets, {N + 1});
  r.chunk_size = 16;
  r.heads_per_call = kH;
  return r;
}

testing::DeltaOp op_of(const ScheduleCase& c, const Prepared& r) {
  return [c, cu = r.cu_seqlens, C = r.chunk_size](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                                   const Tensor& beta, const Tensor& h0) {
    const PrecisionGuard guard(c.precision);  // the tape node keeps it for backward
    return c.gate == Gate::none ? chunk_delta_rule(q, k, v, beta, {}, h0, true, c.l2norm, C, cu)
                                : chunk_gated_delta_rule(q, k, v, g, beta, {}, h0, true, c.l2norm, C, cu);
  };
}

testing::DeltaResult run_at(int threads, const ScheduleCase& c, const Prepared& r) {
  const int before = get_num_threads();
  set_num_threads(threads);
  testing::DeltaResult out = testing::run_delta(op_of(c, r), r.in, DType::f32);
  set_num_threads(before);
  return out;
}

std::vector<uint32_t> bits(const Tensor& t) {
  if (!t.defined()) return {};
  const std::vector<float> x = t.to_vector<float>();
  std::vector<uint32_t> b(x.size());
  std::memcpy(b.data(), x.data(), x.size() * sizeof(float));
  return b;
}

void expect_same_bits(const std::string& name, const Tensor& got, const Tensor& want) {
  const std::vector<uint32_t> a = bits(got), b = bits(want);
  ASSERT_EQ(a.size(), b.size()) << name;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(a[i], b[i]) << name << " element " << i << ": " << got.to_vector<float>()[i] << " vs "
                          << want.to_vector<float>()[i];
}

void expect_same_bits(const testing::DeltaResult& got, const testing::DeltaResult& want) {
  expect_same_bits("o", got.base.o, want.base.o);
  expect_same_bits("final_state", got.base.final_state, want.base.final_state);
  expect_same_bits("dq", got.base.dq, want.base.dq);
  expect_same_bits("dk", got.base.dk, want.base.dk);
  expect_same_bits("dv", got.base.dv, want.base.dv);
  expect_same_bits("dg", got.base.dg, want.base.dg);
  expect_same_bits("dbeta", got.dbeta, want.dbeta);
  expect_same_bits("d_initial_state", got.base.d_initial_state, want.base.d_initial_state);
}

class ChunkSchedule : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(ChunkSchedule, PerHeadAndPerPhaseGiveTheSameBits) {
  const ScheduleCase& c = GetParam();
  const Prepared r = prepare(c);
  const testing::DeltaResult per_head = run_at(1, c, r);
  ASSERT_EQ(per_head.base.dg.defined(), c.gate != Gate::none);
  {
    SCOPED_TRACE("per head, as many threads as heads");
    expect_same_bits(run_at(static_cast<int>(r.heads_per_call), c, r), per_head);
  }
  {
    SCOPED_TRACE("per phase, one thread more than heads");
    expect_same_bits(run_at(static_cast<int>(r.heads_per_call) + 1, c, r), per_head);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ChunkSchedule, ::testing::ValuesIn(schedule_cases()), schedule_case_name);

}  // namespace
}  // namespace lat
