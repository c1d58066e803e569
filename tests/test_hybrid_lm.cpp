// HybridLM: parameter names (DESIGN.md, Checkpoint), step-by-step decoding with every mixer
// kind against the full forward pass, packed documents (cu_seqlens) against each document
// alone, GPT-2 initialization, tied embeddings, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "lat/lat.h"
#include "layers/hybrid_lm.h"
#include "tests/expect_error.h"
#include "tests/threads_testing.h"

namespace lat {
namespace {

using testing::expect_error;

HybridLMConfig small_config(std::vector<std::string> layers, int64_t d_model = 16, int64_t n_heads = 2) {
  HybridLMConfig c;
  c.vocab_size = 11;
  c.layers = std::move(layers);
  c.mixer.d_model = d_model;
  c.mixer.n_heads = n_heads;
  // Mamba-2's defaults (head_dim 64, d_state 128) are sized for d_model 768 and up.
  c.mixer.mamba.head_dim = d_model / 2;
  c.mixer.mamba.d_state = 8;
  c.mixer.mamba.chunk_size = 4;
  return c;
}

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(name);
  return out;
}

Tensor random_ids(int64_t B, int64_t T, int64_t vocab, Generator& gen) {
  std::vector<int64_t> ids(static_cast<size_t>(B * T));
  for (int64_t& id : ids) id = gen.randint(vocab);
  return Tensor::from_vector(ids, {B, T});
}

// The standard deviation of a tensor's elements around zero (the init mean).
double rms(const Tensor& t) {
  double s = 0.0;
  for (float v : t.to_vector<float>()) s += static_cast<double>(v) * v;
  return std::sqrt(s / static_cast<double>(t.numel()));
}

TEST(HybridLM, ParameterNamesFollowDesign) {
  Generator gen(1);
  HybridLMConfig c = small_config({"attn", "gdn"});
  c.mixer.use_gate = true;
  HybridLM model(c, gen);
  const std::vector<std::string> expected = {
      "embeddings.weight",
      "layers.0.attn_norm.weight",
      "layers.0.attn.q_proj.weight",
      "layers.0.attn.k_proj.weight",
      "layers.0.attn.v_proj.weight",
      "layers.0.attn.o_proj.weight",
      "layers.0.mlp_norm.weight",
      "layers.0.mlp.gate_proj.weight",
      "layers.0.mlp.up_proj.weight",
      "layers.0.mlp.down_proj.weight",
      "layers.1.attn_norm.weight",
      "layers.1.attn.q_proj.weight",
      "layers.1.attn.k_proj.weight",
      "layers.1.attn.v_proj.weight",
      "layers.1.attn.b_proj.weight",
      "layers.1.attn.a_proj.weight",
      "layers.1.attn.A_log",
      "layers.1.attn.dt_bias",
      "layers.1.attn.q_conv1d.weight",
      "layers.1.attn.k_conv1d.weight",
      "layers.1.attn.v_conv1d.weight",
      "layers.1.attn.g_proj.weight",
      "layers.1.attn.o_norm.weight",
      "layers.1.attn.o_proj.weight",
      "layers.1.mlp_norm.weight",
      "layers.1.mlp.gate_proj.weight",
      "layers.1.mlp.up_proj.weight",
      "layers.1.mlp.down_proj.weight",
      "norm.weight",
      "lm_head.weight",
  };
  EXPECT_EQ(names_of(model), expected);
  const auto params = model.named_parameters();
  EXPECT_EQ(params.front().second.shape(), (Shape{11, 16}));
  EXPECT_EQ(params.back().second.shape(), (Shape{11, 16}));  // lm_head [vocab, d_model] ([out, in])
}

TEST(HybridLM, TiedEmbeddingsHaveNoHeadAndUseTheTable) {
  Generator gen(2);
  HybridLMConfig c = small_config({"attn"});
  c.tie_embeddings = true;
  HybridLM model(c, gen);
  const std::vector<std::string> names = names_of(model);
  EXPECT_EQ(names.back(), "norm.weight");
  for (const std::string& n : names) EXPECT_NE(n, "lm_head.weight");

  Generator g(3);
  Tensor ids = random_ids(1, 5, 11, g);
  Tensor logits = model.forward(ids);
  ASSERT_EQ(logits.shape(), (Shape{1, 5, 11}));
  backward(sum(logits * logits));
  Tensor table = model.named_parameters().front().second;
  ASSERT_TRUE(table.grad().defined());
  // The rows of tokens absent from `ids` are not looked up: their gradient can only come
  // through the tied head.
  std::vector<bool> present(11, false);
  for (int64_t id : ids.to_vector<int64_t>()) present[static_cast<size_t>(id)] = true;
  for (int64_t v = 0; v < 11; ++v) {
    if (present[static_cast<size_t>(v)]) continue;
    double norm = 0.0;
    for (int64_t j = 0; j < 16; ++j) norm += std::abs(table.grad().at({v, j}));
    EXPECT_GT(norm, 0.0) << "row " << v << " of the tied table got no gradient from the head";
  }
}

// Step-by-step decoding (a prompt, single tokens, a middle piece) reproduces the full forward
// pass for a pattern holding every mixer kind; chunk_size 4 makes both the chunked prompt
// path (T > chunk) and the recurrent paths run.
TEST(HybridLM, StepDecodingMatchesForward) {
  Generator gen(4);
  HybridLMConfig c = small_config({"attn", "linear_attn", "simple_gla", "retention", "delta_net", "gdn", "attn"});
  c.mixer.chunk_size = 4;
  HybridLM model(c, gen);
  const int64_t B = 2, T = 13, V = c.vocab_size;
  Tensor ids = random_ids(B, T, V, gen);
  Tensor full;
  {
    NoGradGuard no_grad;
    full = model.forward(ids);
  }
  HybridLMState state = model.make_states(B);
  ASSERT_EQ(state.layers.size(), c.layers.size());
  std::vector<Tensor> pieces;
  const std::vector<std::pair<int64_t, int64_t>> cuts = {{0, 6}, {6, 7}, {7, 8}, {8, 11}, {11, 12}, {12, 13}};
  for (const auto& [begin, end] : cuts) pieces.push_back(model.step(slice(ids, 1, begin, end), state));
  EXPECT_EQ(state.tokens, T);
  Tensor stepped = concat(pieces, 1);
  ASSERT_EQ(stepped.shape(), full.shape());
  EXPECT_LT(relative_error(stepped, full), 1e-4);
  // Per position too: a large error at one token is not hidden by the rest.
  for (int64_t t = 0; t < T; ++t)
    EXPECT_LT(relative_error(slice(stepped, 1, t, t + 1), slice(full, 1, t, t + 1)), 1e-4) << "position " << t;
  EXPECT_EQ(tape_size(), 0u) << "step() must not record on the tape";
}

// One training step's forward and backward with every mixer kind gives the same loss and
// gradients, bit for bit, at every thread count: what makes training losses reproducible
// across thread counts. Sizes past the short convolution's parallel threshold, with an odd
// number of rows (B * T = 291).
TEST(HybridLM, LossAndGradientsAreTheSameBitsAtEveryThreadCount) {
  struct Step {
    float loss = 0;
    std::vector<std::vector<float>> grads;
  };
  const auto steps = testing::at_thread_counts([] {
    Generator gen(5);
    HybridLMConfig c = small_config({"attn", "linear_attn", "simple_gla", "retention", "delta_net", "gdn"}, 64, 2);
    c.mixer.chunk_size = 16;
    HybridLM model(c, gen);
    const int64_t B = 3, T = 97;
    const Tensor ids = random_ids(B, T, c.vocab_size, gen), targets = random_ids(B * T, 1, c.vocab_size, gen);
    const Tensor loss = cross_entropy(model.forward(ids).reshape({B * T, c.vocab_size}), targets.reshape({B * T}));
    backward(loss);
    Step s{static_cast<float>(loss.item()), {}};
    for (const auto& [name, p] : model.named_parameters()) s.grads.push_back(p.grad().to_vector<float>());
    return s;
  });
  Generator gen(5);
  HybridLM names(small_config({"attn", "linear_attn", "simple_gla", "retention", "delta_net", "gdn"}, 64, 2), gen);
  const auto params = names.named_parameters();
  auto differing = [](const std::vector<float>& a, const std::vector<float>& b) {
    int64_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
  };
  for (size_t run : {1, 2}) {
    EXPECT_EQ(steps[run].loss, steps[0].loss) << run + 1 << " threads vs 1";
    ASSERT_EQ(steps[run].grads.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      ASSERT_EQ(steps[run].grads[i].size(), steps[0].grads[i].size()) << params[i].first;
      EXPECT_EQ(differing(steps[run].grads[i], steps[0].grads[i]), 0)
          << "elements of d " << params[i].first << " that differ, " << run + 1 << " threads vs 1";
    }
  }
}

// ---- packed documents (cu_seqlens) ----------------------------------------------------------

Tensor offsets_tensor(const std::vector<int64_t>& offsets) {
  return Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())});
}

// A window of two rows of 20 tokens holding documents back to back (a 1-token one, ones
// across the chunks of 4, the row start 20 implied): each document's logits equal those of
// the document alone, and so do the parameter gradients of a loss on its logits only, for a
// model of each mixer kind.
TEST(HybridLM, DocumentInPackedWindowEqualsDocumentAlone) {
  const std::vector<std::pair<int64_t, int64_t>> docs{{0, 3}, {3, 4}, {4, 13}, {13, 20}, {20, 26}, {26, 40}};
  const Tensor cu = offsets_tensor({0, 3, 4, 13, 26, 40});
  for (const std::string& kind : mixer_kinds()) {
    SCOPED_TRACE(kind);
    Generator gen(8);
    HybridLMConfig c = small_config({kind, kind});
    c.mixer.chunk_size = 4;
    c.init_std = 0.2;  // gates and attention far from their uniform regimes
    HybridLM model(c, gen);
    const int64_t B = 2, T = 20, V = c.vocab_size;
    const Tensor ids = random_ids(B, T, V, gen), flat_ids = ids.reshape({1, B * T});
    Tensor packed;
    {
      NoGradGuard no_grad;
      packed = model.forward(ids, cu).reshape({1, B * T, V});
      for (const auto& [begin, end] : docs) {
        Tensor alone = model.forward(slice(flat_ids, 1, begin, end));
        EXPECT_LT(relative_error(slice(packed, 1, begin, end), alone), 1e-5)
            << "document [" << begin << ", " << end << ")";
      }
    }
    // Gradients: a loss on the logits of document [4, 13) only reaches what that document reads.
    const Tensor w = Tensor::randn({1, 9, V}, gen);
    backward(sum(slice(model.forward(ids, cu).reshape({1, B * T, V}), 1, 4, 13) * w));
    std::vector<Tensor> packed_grads;
    for (auto& [name, p] : model.named_parameters()) packed_grads.push_back(p.grad());
    model.zero_grad();
    backward(sum(model.forward(slice(flat_ids, 1, 4, 13)) * w));
    size_t i = 0;
    for (auto& [name, p] : model.named_parameters())
      EXPECT_LT(relative_error(packed_grads[i++], p.grad()), 1e-5) << name;
  }
}

// Padding invariance: a row padded after its end, the padding given as a sequence of its
// own, gives the unpadded row's logits, whatever the padding ids; a full row next to it is
// its own sequence. Without documents, cu_seqlens of the rows alone changes nothing.
TEST(HybridLM, PaddedRowEqualsUnpaddedRow) {
  Generator gen(9);
  HybridLMConfig c = small_config({"gdn", "attn", "simple_gla", "linear_attn", "delta_net", "retention"});
  c.mixer.chunk_size = 4;
  c.init_std = 0.2;
  HybridLM model(c, gen);
  const int64_t B = 2, T = 16, L = 11, V = c.vocab_size;
  NoGradGuard no_grad;
  Tensor ids = random_ids(B, T, V, gen);
  const Tensor cu = offsets_tensor({0, L, 2 * T});  // row 0: [0, L) and padding [L, T); row 1 whole
  const Tensor padded = model.forward(ids, cu);
  const Tensor row0 = model.forward(slice(slice(ids, 0, 0, 1), 1, 0, L));
  const Tensor row1 = model.forward(slice(ids, 0, 1, 2));
  EXPECT_LT(relative_error(slice(slice(padded, 0, 0, 1), 1, 0, L), row0), 1e-5);
  EXPECT_LT(relative_error(slice(padded, 0, 1, 2), row1), 1e-5);
  for (int64_t t = L; t < T; ++t) ids.set({0, t}, static_cast<double>((t * 7) % V));  // other padding ids
  EXPECT_LT(relative_error(slice(slice(model.forward(ids, cu), 0, 0, 1), 1, 0, L), row0), 1e-5);
  EXPECT_LT(relative_error(model.forward(ids, offsets_tensor({0, 2 * T})), model.forward(ids)), 1e-5);
}

TEST(HybridLM, InvalidCuSeqlensNameIt) {
  Generator gen(10);
  HybridLM model(small_config({"gdn", "attn"}), gen);
  const Tensor ids = random_ids(2, 5, 11, gen);
  expect_error(
      [&] {
        model.forward(ids, offsets_tensor({0, 3, 9}));
      },
      {"HybridLM::forward: cu_seqlens: expected c_N = T = 10", "got c_2 = 9"});
  expect_error(
      [&] {
        model.forward(ids, offsets_tensor({0, 3, 3, 10}));
      },
      {"HybridLM::forward: cu_seqlens: expected strictly increasing offsets", "c_2 = 3 after c_1 = 3"});
  expect_error(
      [&] {
        model.forward(ids, Tensor::from_vector({0.0f, 10.0f}, {2}));
      },
      {"HybridLM::forward: cu_seqlens: expected dtype i64, got f32"});
  expect_error(
      [&] {
        model.forward(ids, offsets_tensor({2, 10}));
      },
      {"HybridLM::forward: cu_seqlens: expected c_0 = 0, got 2"});
}

TEST(HybridLM, Gpt2Initialization) {
  Generator gen(5);
  HybridLMConfig c = small_config({"gdn", "attn", "gdn", "attn"}, 64, 4);
  HybridLM model(c, gen);
  const double out_std = 0.02 / std::sqrt(2.0 * 4);
  for (const auto& [name, t] : model.named_parameters()) {
    const bool is_norm = name.find("norm.weight") != std::string::npos;
    const bool is_out = name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
    const bool is_proj = name.find("_proj.weight") != std::string::npos;
    if (is_norm) {
      EXPECT_EQ(rms(t), 1.0) << name;
    } else if (is_out) {
      EXPECT_NEAR(rms(t), out_std, 0.1 * out_std) << name;
    } else if (is_proj && t.numel() >= 1024) {  // a/b projections [H, D] are too small to estimate
      EXPECT_NEAR(rms(t), 0.02, 0.002) << name;
    }
  }
  EXPECT_NEAR(rms(model.named_parameters().front().second), 0.02, 0.004);  // embeddings [11, 64]
}

TEST(HybridLM, Errors) {
  Generator gen(6);
  expect_error([&] { HybridLM(small_config({"attn", "mamba"}), gen); }, {"mamba", "gdn"});
  expect_error([&] { HybridLM(small_config({}), gen); }, {"HybridLM: layers: expected at least one mixer kind"});
  HybridLM model(small_config({"attn"}), gen);
  expect_error([&] { model.forward(Tensor::zeros({2, 3})); },
               {"HybridLM::forward: ids: expected [B, T] i64, got [2, 3] f32"});  // f32 ids
  expect_error([&] { model.forward(Tensor::zeros({6}, DType::i64)); },
               {"HybridLM::forward: ids: expected [B, T] i64, got [6] i64"});  // not [B, T]
  expect_error([&] { model.forward(Tensor::full({1, 2}, 11, DType::i64)); },
               {"embedding: ids: id 11 at position [0, 0] is out of range [0, 11)"});  // id == vocab
  HybridLMState state = model.make_states(2);
  expect_error([&] { model.step(Tensor::zeros({3, 1}, DType::i64), state); },  // batch 3 vs 2
               {"HybridLM::step: ids: expected [2, T >= 1] for a state of 1 layers", "got [3, 1]"});
}

}  // namespace
}  // namespace lat
