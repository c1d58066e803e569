// `lat export --format gguf` (train/files/gguf_*.h): the file is read back by a small GGUF
// reader written here from the format's description (header, every key-value pair, tensor
// infos, 32-byte aligned offsets and data), and its values are compared with the lat tensors
// they come from: f32 bit for bit after llama.cpp's transforms (norms, -exp(A_log), value heads
// tiled, kimi's kv_b_proj split per head, appended token rows), f16 / bf16 / q8_0 within their rounding. f16 and q8_0 by known
// answers; refusals name what llama.cpp cannot express and write nothing.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <nlohmann/json.hpp>

#include "autograd/cpu/bf16.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/subword_model.h"
#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/export.h"
#include "train/files/gguf_tokenizer.h"
#include "train/files/gguf_writer.h"
#include "train/files/hf_weights.h"
#include "train/files/safetensors.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

// 12 characters, one of them two bytes in UTF-8; id 1 is the space.
const std::string kVocab = "\n abcdefghi\xc3\xa9";
constexpr int64_t kVocabSize = 12;

// gdn with 4 value heads over 2 key heads (tiled in the file), gated attention with one kv head
// and half rotary; every matrix row a multiple of 32 (q8_0's block).
const std::string kShape =
    "  d_model: 32\n  n_layers: 2\n  n_heads: 2\n  head_dim: 8\n  expand_v: 1.0\n  layers: \"gdn,attn\"\n"
    "  intermediate_size: 64\n  tie_embeddings: false\n  norm_zero_centered: false\n"
    "  linear: {n_v_heads: 4, chunk_size: 4}\n"
    "  attn: {n_heads: 2, head_dim: 16, n_kv_heads: 1, output_gate: true, qk_norm: true, rope_fraction: 0.5}\n";

/// One metadata value as read: numbers (every integer, float and bool type) or strings, one
/// entry for a scalar.
struct Value {
  uint32_t type = 0, element_type = 0;
  std::vector<double> numbers;
  std::vector<std::string> strings;
};

struct TensorInfo {
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
};

/// A GGUF file parsed as the format describes it; every read is bounds-checked.
struct GgufFile {
  uint32_t version = 0;
  std::map<std::string, Value> kv;
  std::vector<std::string> kv_order;
  std::map<std::string, TensorInfo> tensors;
  std::vector<std::string> tensor_order;
  uint64_t data_start = 0;
  std::string bytes;

  explicit GgufFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
    size_t pos = 0;
    EXPECT_EQ(bytes.substr(0, 4), "GGUF");
    pos = 4;
    version = read<uint32_t>(pos);
    const auto n_tensors = read<uint64_t>(pos), n_kv = read<uint64_t>(pos);
    for (uint64_t i = 0; i < n_kv; ++i) {
      const std::string key = read_string(pos);
      Value v;
      v.type = read<uint32_t>(pos);
      if (v.type == 9) {
        v.element_type = read<uint32_t>(pos);
        const auto n = read<uint64_t>(pos);
        for (uint64_t j = 0; j < n; ++j) read_value(v.element_type, pos, v);
      } else {
        read_value(v.type, pos, v);
      }
      kv_order.push_back(key);
      kv[key] = v;
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      const std::string name = read_string(pos);
      TensorInfo t;
      const auto n_dims = read<uint32_t>(pos);
      for (uint32_t d = 0; d < n_dims; ++d) t.ne.push_back(read<uint64_t>(pos));
      t.type = read<uint32_t>(pos);
      t.offset = read<uint64_t>(pos);
      tensor_order.push_back(name);
      tensors[name] = t;
    }
    data_start = (pos + 31) / 32 * 32;
  }

  template <typename T>
  T read(size_t& pos) const {
    if (pos + sizeof(T) > bytes.size()) throw std::runtime_error("GGUF read past the end");
    T v;
    std::memcpy(&v, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string read_string(size_t& pos) const {
    const auto n = read<uint64_t>(pos);
    if (pos + n > bytes.size()) throw std::runtime_error("GGUF string past the end");
    std::string s = bytes.substr(pos, n);
    pos += n;
    return s;
  }
  void read_value(uint32_t type, size_t& pos, Value& v) const {
    switch (type) {
      case 4: v.numbers.push_back(read<uint32_t>(pos)); break;
      case 5: v.numbers.push_back(read<int32_t>(pos)); break;
      case 6: v.numbers.push_back(read<float>(pos)); break;
      case 7: v.numbers.push_back(read<uint8_t>(pos)); break;
      case 8: v.strings.push_back(read_string(pos)); break;
      default: throw std::runtime_error("GGUF value type " + std::to_string(type) + " not expected here");
    }
  }
  double number(const std::string& key) const { return kv.at(key).numbers.at(0); }
  std::string string(const std::string& key) const { return kv.at(key).strings.at(0); }

  /// The tensor's stored bytes.
  std::string data(const std::string& name, size_t size) const {
    return bytes.substr(data_start + tensors.at(name).offset, size);
  }
  /// An f32 tensor's values.
  std::vector<float> f32(const std::string& name) const {
    uint64_t n = 1;
    for (uint64_t d : tensors.at(name).ne) n *= d;
    std::vector<float> v(n);
    const std::string raw = data(name, n * 4);
    std::memcpy(v.data(), raw.data(), raw.size());
    return v;
  }
};

/// Values of `tensor` in row-major order.
std::vector<float> values_of(const lat::NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t.to_vector<float>();
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

class GgufExportTest : public TempDirTest {
 protected:
  /// A checkpoint of kShape with seeded random values in every tensor (norms around 1 and 0),
  /// tokenizer `tokenizer` (char: kVocab; "none" for a model trained on token ids).
  lat::NamedTensors save(const std::string& file, const std::string& shape = kShape,
                         const std::string& tokenizer = "char") {
    const lat::Config cfg = model_config(shape);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 0.7f);
    lat::Generator gen(1);
    lat::HybridLM model(lat::hybrid_lm_config(cfg.model, kVocabSize), gen);
    lat::Checkpoint c;
    c.config_yaml = lat::to_yaml(cfg);
    c.tokenizer_type = tokenizer;
    if (tokenizer == "char") c.tokenizer_vocab = kVocab;
    for (const auto& [name, t] : model.named_parameters()) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      for (float& x : v) x = normal(rng);
      c.model.emplace_back(name, lat::Tensor::from_vector(v, t.shape()));
    }
    lat::save_checkpoint(path(file), c);
    return c.model;
  }

  std::vector<std::string> export_gguf(const std::string& checkpoint, const std::string& out,
                                       const std::string& dtype = "f32") {
    lat::ExportOptions o;
    o.checkpoint = path(checkpoint);
    o.format = "gguf";
    o.out_dir = path(out);
    o.dtype = dtype;
    return lat::export_model(o);
  }
};

TEST(GgufWriter, HalfRoundingKnownAnswers) {
  EXPECT_EQ(lat::float_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(lat::float_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(lat::float_to_f16(0.1f), 0x2E66);
  EXPECT_EQ(lat::float_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(lat::float_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(lat::float_to_f16(65520.0f), 0x7C00);             // the tie rounds to even: infinity
  EXPECT_EQ(lat::float_to_f16(1.0f + 0x1p-11f), 0x3C00);      // tie -> even
  EXPECT_EQ(lat::float_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);  // tie -> even
  EXPECT_EQ(lat::float_to_f16(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(lat::float_to_f16(0x1p-25f), 0x0000);             // tie -> even (zero)
  EXPECT_EQ(lat::float_to_f16(3 * 0x1p-25f), 0x0002);         // tie -> even
  EXPECT_EQ(lat::float_to_f16(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(lat::float_to_f16(std::nanf("")), 0x7E00);
  for (float x : {0.3f, -1234.5f, 7e-6f, 0.999f})
    EXPECT_NEAR(lat::f16_to_float(lat::float_to_f16(x)), x, std::fabs(x) * 0x1p-11f + 0x1p-25f) << x;
}

TEST(GgufWriter, Q8ZeroKnownBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = 0.25f * static_cast<float>(j - 20);  // amax 5
  x[3] = 0.0f;
  const std::vector<uint8_t> q = lat::quantize_q8_0(x);
  ASSERT_EQ(q.size(), 34u);
  const uint16_t scale = static_cast<uint16_t>(q[0] | q[1] << 8);
  EXPECT_EQ(scale, lat::float_to_f16(5.0f / 127.0f));
  const float d = 5.0f / 127.0f;
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(static_cast<int8_t>(q[static_cast<size_t>(2 + j)]),
              static_cast<int8_t>(std::roundf(x[static_cast<size_t>(j)] * (1.0f / d))))
        << j;
  EXPECT_EQ(static_cast<int8_t>(q[2]), -127);  // -5 / d
  EXPECT_EQ(static_cast<int8_t>(q[2 + 3]), 0);
  EXPECT_EQ(lat::quantize_q8_0(std::vector<float>(32, 0.0f)), std::vector<uint8_t>(34, 0));
}

TEST_F(GgufExportTest, F32FileHoldsEveryKeyAndTensorAsLlamaCppReadsThem) {
  const lat::NamedTensors lat_tensors = save("m.h5");
  EXPECT_EQ(export_gguf("m.h5", "out/model.gguf"), std::vector<std::string>{path("out/model.gguf")});
  const GgufFile f(path("out/model.gguf"));
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.string("general.architecture"), "qwen35");
  EXPECT_EQ(f.number("general.alignment"), 32);
  EXPECT_EQ(f.number("general.file_type"), 0);
  const std::map<std::string, double> numbers = {
      {"qwen35.embedding_length", 32},       {"qwen35.block_count", 2},
      {"qwen35.feed_forward_length", 64},    {"qwen35.attention.head_count", 2},
      {"qwen35.attention.head_count_kv", 1}, {"qwen35.attention.key_length", 16},
      {"qwen35.attention.value_length", 16}, {"qwen35.rope.dimension_count", 8},
      {"qwen35.ssm.state_size", 8},          {"qwen35.ssm.group_count", 2},
      {"qwen35.ssm.time_step_rank", 4},      {"qwen35.ssm.inner_size", 32},
      {"qwen35.context_length", 32768},      {"tokenizer.ggml.bos_token_id", 12},
      {"tokenizer.ggml.eos_token_id", 12},   {"tokenizer.ggml.padding_token_id", 12},
      {"tokenizer.ggml.add_bos_token", 0},   {"tokenizer.ggml.add_eos_token", 0},
      {"tokenizer.ggml.add_space_prefix", 0}};
  for (const auto& [key, value] : numbers) EXPECT_EQ(f.number(key), value) << key;
  EXPECT_EQ(f.kv.at("qwen35.rope.dimension_sections").numbers, (std::vector<double>{2, 1, 1, 0}));
  EXPECT_EQ(f.kv.at("qwen35.attention.recurrent_layers").element_type, 7u);
  EXPECT_EQ(f.kv.at("qwen35.attention.recurrent_layers").numbers, (std::vector<double>{1, 0}));
  EXPECT_EQ(f.string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.kv.at("tokenizer.ggml.tokens").strings,
            (std::vector<std::string>{"\n", "\xe2\x96\x81", "a", "b", "c", "d", "e", "f", "g", "h", "i", "\xc3\xa9",
                                      "<|endoftext|>"}));
  std::vector<double> types(12, 1);
  types.push_back(3);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.token_type").numbers, types);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.scores").numbers, std::vector<double>(13, 0.0));
  EXPECT_EQ(f.string("general.name"), "lat");
  EXPECT_EQ(f.number("qwen35.ssm.conv_kernel"), 4);
  EXPECT_EQ(f.kv.at("qwen35.attention.layer_norm_rms_epsilon").type, 6u);
  EXPECT_EQ(f.kv.at("qwen35.rope.freq_base").type, 6u);
  const std::vector<std::string> keys = {"general.architecture",
                                         "general.name",
                                         "general.alignment",
                                         "general.file_type",
                                         "qwen35.context_length",
                                         "qwen35.embedding_length",
                                         "qwen35.block_count",
                                         "qwen35.feed_forward_length",
                                         "qwen35.attention.head_count",
                                         "qwen35.attention.head_count_kv",
                                         "qwen35.attention.key_length",
                                         "qwen35.attention.value_length",
                                         "qwen35.attention.layer_norm_rms_epsilon",
                                         "qwen35.rope.freq_base",
                                         "qwen35.rope.dimension_count",
                                         "qwen35.rope.dimension_sections",
                                         "qwen35.ssm.conv_kernel",
                                         "qwen35.ssm.state_size",
                                         "qwen35.ssm.group_count",
                                         "qwen35.ssm.time_step_rank",
                                         "qwen35.ssm.inner_size",
                                         "qwen35.attention.recurrent_layers",
                                         "tokenizer.ggml.model",
                                         "tokenizer.ggml.tokens",
                                         "tokenizer.ggml.token_type",
                                         "tokenizer.ggml.scores",
                                         "tokenizer.ggml.bos_token_id",
                                         "tokenizer.ggml.eos_token_id",
                                         "tokenizer.ggml.padding_token_id",
                                         "tokenizer.ggml.add_bos_token",
                                         "tokenizer.ggml.add_eos_token",
                                         "tokenizer.ggml.add_space_prefix",
                                         "tokenizer.ggml.remove_extra_whitespaces"};
  EXPECT_EQ(f.kv_order, keys);

  const std::vector<std::string> names = {"token_embd.weight",
                                          "blk.0.attn_norm.weight",
                                          "blk.0.attn_qkv.weight",
                                          "blk.0.ssm_conv1d.weight",
                                          "blk.0.attn_gate.weight",
                                          "blk.0.ssm_alpha.weight",
                                          "blk.0.ssm_beta.weight",
                                          "blk.0.ssm_a",
                                          "blk.0.ssm_dt.bias",
                                          "blk.0.ssm_norm.weight",
                                          "blk.0.ssm_out.weight",
                                          "blk.0.post_attention_norm.weight",
                                          "blk.0.ffn_gate.weight",
                                          "blk.0.ffn_up.weight",
                                          "blk.0.ffn_down.weight",
                                          "blk.1.attn_norm.weight",
                                          "blk.1.attn_q.weight",
                                          "blk.1.attn_k.weight",
                                          "blk.1.attn_v.weight",
                                          "blk.1.attn_output.weight",
                                          "blk.1.attn_q_norm.weight",
                                          "blk.1.attn_k_norm.weight",
                                          "blk.1.post_attention_norm.weight",
                                          "blk.1.ffn_gate.weight",
                                          "blk.1.ffn_up.weight",
                                          "blk.1.ffn_down.weight",
                                          "output_norm.weight",
                                          "output.weight"};
  EXPECT_EQ(f.tensor_order, names);
  // Offsets: 32-aligned, in order, each tensor right after the previous one's padded data.
  uint64_t offset = 0;
  for (const std::string& name : f.tensor_order) {
    const TensorInfo& t = f.tensors.at(name);
    EXPECT_EQ(t.type, 0u) << name;
    EXPECT_EQ(t.offset, offset) << name;
    uint64_t n = 4;
    for (uint64_t d : t.ne) n *= d;
    offset += (n + 31) / 32 * 32;
  }
  EXPECT_EQ(f.data_start % 32, 0u);
  EXPECT_EQ(f.bytes.size(), f.data_start + offset);

  EXPECT_EQ(f.tensors.at("token_embd.weight").ne, (std::vector<uint64_t>{32, 13}));
  EXPECT_EQ(f.tensors.at("blk.0.ssm_conv1d.weight").ne, (std::vector<uint64_t>{4, 64}));
  EXPECT_EQ(f.tensors.at("blk.0.ssm_out.weight").ne, (std::vector<uint64_t>{32, 32}));
  EXPECT_EQ(f.tensors.at("blk.1.attn_q.weight").ne, (std::vector<uint64_t>{32, 64}));

  // The embeddings, then a zero row for the appended end-of-text token.
  std::vector<float> embd = values_of(lat_tensors, "embeddings.weight");
  embd.resize(13 * 32, 0.0f);
  EXPECT_EQ(f.f32("token_embd.weight"), embd);
  // Plain norms: llama.cpp scales by w, as lat.
  EXPECT_EQ(f.f32("output_norm.weight"), values_of(lat_tensors, "norm.weight"));
  EXPECT_EQ(f.f32("blk.1.attn_q_norm.weight"), values_of(lat_tensors, "layers.1.attn.q_norm.weight"));
  EXPECT_EQ(f.f32("blk.0.ssm_norm.weight"), values_of(lat_tensors, "layers.0.attn.o_norm.weight"));
  // Value heads grouped by key head (g * 2 + j) in lat, tiled (j * 2 + g) in the file: heads 1
  // and 2 swap.
  const std::vector<int> tiled = {0, 2, 1, 3};
  const std::vector<float> a_log = values_of(lat_tensors, "layers.0.attn.A_log");
  const std::vector<float> ssm_a = f.f32("blk.0.ssm_a");
  for (int h = 0; h < 4; ++h) EXPECT_EQ(ssm_a[static_cast<size_t>(h)], -std::exp(a_log[static_cast<size_t>(tiled[h])]));
  const std::vector<float> q = values_of(lat_tensors, "layers.0.attn.q_proj.weight");
  const std::vector<float> k = values_of(lat_tensors, "layers.0.attn.k_proj.weight");
  const std::vector<float> v = values_of(lat_tensors, "layers.0.attn.v_proj.weight");
  std::vector<float> qkv = q;
  qkv.insert(qkv.end(), k.begin(), k.end());
  for (int h = 0; h < 4; ++h)  // value heads of 8 rows of 32
    qkv.insert(qkv.end(), v.begin() + tiled[h] * 8 * 32, v.begin() + (tiled[h] + 1) * 8 * 32);
  EXPECT_EQ(f.f32("blk.0.attn_qkv.weight"), qkv);
  const std::vector<float> o = values_of(lat_tensors, "layers.0.attn.o_proj.weight");
  const std::vector<float> ssm_out = f.f32("blk.0.ssm_out.weight");
  for (int row = 0; row < 32; ++row)
    for (int h = 0; h < 4; ++h)
      for (int w = 0; w < 8; ++w)
        EXPECT_EQ(ssm_out[static_cast<size_t>(row * 32 + h * 8 + w)],
                  o[static_cast<size_t>(row * 32 + tiled[h] * 8 + w)]);
  std::vector<float> head = values_of(lat_tensors, "lm_head.weight");
  head.resize(13 * 32, 0.0f);
  EXPECT_EQ(f.f32("output.weight"), head);
}

// mamba2 (I = 64 in 4 heads of 16, 2 groups of d_state 8) and attention with one kv head and
// half rotary, zero-centred norms: llama.cpp's granitehybrid.
const std::string kGraniteShape =
    "  d_model: 32\n  n_layers: 2\n  n_heads: 2\n  layers: \"mamba2,attn\"\n"
    "  intermediate_size: 64\n  tie_embeddings: false\n  norm_zero_centered: true\n"
    "  mamba: {d_state: 8, head_dim: 16, expand: 2, n_groups: 2, conv_size: 4, chunk_size: 4}\n"
    "  attn: {n_heads: 2, head_dim: 16, n_kv_heads: 1, rope_fraction: 0.5}\n";

/// `shape` (kGraniteShape by default) with `from` replaced by `to`.
std::string granite_shape_with(const std::string& from, const std::string& to,
                               const std::string& shape = kGraniteShape) {
  std::string s = shape;
  s.replace(s.find(from), from.size(), to);
  return s;
}

TEST_F(GgufExportTest, GraniteHybridFileHoldsMambaAndAttentionLayersAsLlamaCppReadsThem) {
  const lat::NamedTensors lat_tensors = save("g.h5", kGraniteShape);
  export_gguf("g.h5", "g.gguf");
  const GgufFile f(path("g.gguf"));
  EXPECT_EQ(f.string("general.architecture"), "granitehybrid");
  const std::vector<std::string> keys = {"general.architecture",
                                         "general.name",
                                         "general.alignment",
                                         "general.file_type",
                                         "granitehybrid.context_length",
                                         "granitehybrid.embedding_length",
                                         "granitehybrid.block_count",
                                         "granitehybrid.feed_forward_length",
                                         "granitehybrid.attention.head_count",
                                         "granitehybrid.attention.head_count_kv",
                                         "granitehybrid.attention.key_length",
                                         "granitehybrid.attention.value_length",
                                         "granitehybrid.attention.layer_norm_rms_epsilon",
                                         "granitehybrid.attention.scale",
                                         "granitehybrid.embedding_scale",
                                         "granitehybrid.residual_scale",
                                         "granitehybrid.logit_scale",
                                         "granitehybrid.rope.freq_base",
                                         "granitehybrid.rope.dimension_count",
                                         "granitehybrid.rope.scaling.finetuned",
                                         "granitehybrid.ssm.conv_kernel",
                                         "granitehybrid.ssm.state_size",
                                         "granitehybrid.ssm.group_count",
                                         "granitehybrid.ssm.inner_size",
                                         "granitehybrid.ssm.time_step_rank",
                                         "tokenizer.ggml.model",
                                         "tokenizer.ggml.tokens",
                                         "tokenizer.ggml.token_type",
                                         "tokenizer.ggml.scores",
                                         "tokenizer.ggml.bos_token_id",
                                         "tokenizer.ggml.eos_token_id",
                                         "tokenizer.ggml.padding_token_id",
                                         "tokenizer.ggml.add_bos_token",
                                         "tokenizer.ggml.add_eos_token",
                                         "tokenizer.ggml.add_space_prefix",
                                         "tokenizer.ggml.remove_extra_whitespaces"};
  EXPECT_EQ(f.kv_order, keys);
  const std::map<std::string, double> numbers = {{"granitehybrid.context_length", 32768},
                                                 {"granitehybrid.embedding_length", 32},
                                                 {"granitehybrid.block_count", 2},
                                                 {"granitehybrid.feed_forward_length", 64},
                                                 {"granitehybrid.attention.head_count", 2},
                                                 {"granitehybrid.attention.key_length", 16},
                                                 {"granitehybrid.attention.value_length", 16},
                                                 {"granitehybrid.attention.scale", 0.25},
                                                 {"granitehybrid.embedding_scale", 1},
                                                 {"granitehybrid.residual_scale", 1},
                                                 {"granitehybrid.logit_scale", 1},
                                                 {"granitehybrid.rope.freq_base", 10000},
                                                 {"granitehybrid.rope.dimension_count", 8},
                                                 {"granitehybrid.rope.scaling.finetuned", 1},
                                                 {"granitehybrid.ssm.conv_kernel", 4},
                                                 {"granitehybrid.ssm.state_size", 8},
                                                 {"granitehybrid.ssm.group_count", 2},
                                                 {"granitehybrid.ssm.inner_size", 64},
                                                 {"granitehybrid.ssm.time_step_rank", 4}};
  for (const auto& [key, value] : numbers) EXPECT_EQ(f.number(key), value) << key;
  EXPECT_EQ(f.kv.at("granitehybrid.attention.scale").type, 6u);
  EXPECT_EQ(f.kv.at("granitehybrid.rope.scaling.finetuned").type, 7u);
  // 0 kv heads marks the recurrent layer.
  EXPECT_EQ(f.kv.at("granitehybrid.attention.head_count_kv").numbers, (std::vector<double>{0, 1}));

  const std::vector<std::string> names = {"token_embd.weight",
                                          "blk.0.attn_norm.weight",
                                          "blk.0.ssm_in.weight",
                                          "blk.0.ssm_conv1d.weight",
                                          "blk.0.ssm_conv1d.bias",
                                          "blk.0.ssm_dt.bias",
                                          "blk.0.ssm_a",
                                          "blk.0.ssm_d",
                                          "blk.0.ssm_norm.weight",
                                          "blk.0.ssm_out.weight",
                                          "blk.0.ffn_norm.weight",
                                          "blk.0.ffn_gate.weight",
                                          "blk.0.ffn_up.weight",
                                          "blk.0.ffn_down.weight",
                                          "blk.1.attn_norm.weight",
                                          "blk.1.attn_q.weight",
                                          "blk.1.attn_k.weight",
                                          "blk.1.attn_v.weight",
                                          "blk.1.attn_output.weight",
                                          "blk.1.ffn_norm.weight",
                                          "blk.1.ffn_gate.weight",
                                          "blk.1.ffn_up.weight",
                                          "blk.1.ffn_down.weight",
                                          "output_norm.weight",
                                          "output.weight"};
  EXPECT_EQ(f.tensor_order, names);
  // ne: innermost first. in_proj: 2 I + 2 G N + H = 128 + 32 + 4 rows; C = I + 2 G N = 96.
  const std::map<std::string, std::vector<uint64_t>> shapes = {{"token_embd.weight", {32, 13}},
                                                               {"blk.0.ssm_in.weight", {32, 164}},
                                                               {"blk.0.ssm_conv1d.weight", {4, 96}},
                                                               {"blk.0.ssm_conv1d.bias", {96}},
                                                               {"blk.0.ssm_dt.bias", {4}},
                                                               {"blk.0.ssm_a", {1, 4}},
                                                               {"blk.0.ssm_d", {1, 4}},
                                                               {"blk.0.ssm_norm.weight", {32, 2}},
                                                               {"blk.0.ssm_out.weight", {64, 32}},
                                                               {"blk.1.attn_q.weight", {32, 32}},
                                                               {"blk.1.attn_k.weight", {32, 16}},
                                                               {"blk.1.attn_v.weight", {32, 16}},
                                                               {"blk.1.attn_output.weight", {32, 32}},
                                                               {"output.weight", {32, 13}}};
  for (const auto& [name, ne] : shapes) EXPECT_EQ(f.tensors.at(name).ne, ne) << name;
  for (const std::string& name : f.tensor_order) EXPECT_EQ(f.tensors.at(name).type, 0u) << name;

  const auto same = [&](const std::string& gguf, const std::string& lat) {
    EXPECT_EQ(f.f32(gguf), values_of(lat_tensors, lat)) << gguf;
  };
  same("blk.0.ssm_in.weight", "layers.0.attn.in_proj.weight");
  same("blk.0.ssm_conv1d.weight", "layers.0.attn.conv1d.weight");
  same("blk.0.ssm_conv1d.bias", "layers.0.attn.conv1d.bias");
  same("blk.0.ssm_dt.bias", "layers.0.attn.dt_bias");
  same("blk.0.ssm_d", "layers.0.attn.D");
  same("blk.0.ssm_norm.weight", "layers.0.attn.norm.weight");  // the gated norm scales by w
  same("blk.0.ssm_out.weight", "layers.0.attn.out_proj.weight");
  same("blk.1.attn_v.weight", "layers.1.attn.v_proj.weight");
  same("blk.1.attn_output.weight", "layers.1.attn.o_proj.weight");
  same("blk.1.ffn_down.weight", "layers.1.mlp.down_proj.weight");
  const std::vector<float> a_log = values_of(lat_tensors, "layers.0.attn.A_log");
  const std::vector<float> ssm_a = f.f32("blk.0.ssm_a");
  for (size_t h = 0; h < 4; ++h) EXPECT_EQ(ssm_a[h], -std::exp(a_log[h])) << h;
  // Zero-centred norms: llama.cpp scales by the stored 1 + w.
  for (const auto& [gguf, lat] :
       std::map<std::string, std::string>{{"blk.0.attn_norm.weight", "layers.0.attn_norm.weight"},
                                          {"blk.1.ffn_norm.weight", "layers.1.mlp_norm.weight"},
                                          {"output_norm.weight", "norm.weight"}}) {
    std::vector<float> scale = values_of(lat_tensors, lat);
    for (float& x : scale) x += 1.0f;
    EXPECT_EQ(f.f32(gguf), scale) << gguf;
  }
  // RoPE on 8 of 16 dims: lat's pair (j, j + 4) becomes rows (2j, 2j + 1) of each head; rows
  // 8..15 stay.
  const std::vector<int> row_from = {0, 4, 1, 5, 2, 6, 3, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (const auto& [name, heads] : std::map<std::string, int>{{"q", 2}, {"k", 1}}) {
    const std::vector<float> w = values_of(lat_tensors, "layers.1.attn." + name + "_proj.weight");
    std::vector<float> expected;
    for (int h = 0; h < heads; ++h)
      for (int r : row_from)
        expected.insert(expected.end(), w.begin() + (h * 16 + r) * 32, w.begin() + (h * 16 + r + 1) * 32);
    EXPECT_EQ(f.f32("blk.1.attn_" + name + ".weight"), expected) << name;
  }
  std::vector<float> embd = values_of(lat_tensors, "embeddings.weight");
  embd.resize(13 * 32, 0.0f);
  EXPECT_EQ(f.f32("token_embd.weight"), embd);
  std::vector<float> head = values_of(lat_tensors, "lm_head.weight");
  head.resize(13 * 32, 0.0f);
  EXPECT_EQ(f.f32("output.weight"), head);
}

TEST_F(GgufExportTest, GraniteHybridTiedWithoutConvBiasStoresZeroBiasAndNoOutput) {
  save("g.h5", granite_shape_with("conv_size: 4", "conv_size: 4, conv_bias: false",
                                  granite_shape_with("tie_embeddings: false", "tie_embeddings: true")));
  export_gguf("g.h5", "g.gguf", "q8_0");
  const GgufFile f(path("g.gguf"));
  EXPECT_EQ(f.tensors.count("output.weight"), 0u);
  EXPECT_EQ(f.tensors.at("blk.0.ssm_conv1d.bias").type, 0u);
  EXPECT_EQ(f.f32("blk.0.ssm_conv1d.bias"), std::vector<float>(96, 0.0f));
  EXPECT_EQ(f.tensors.at("blk.0.ssm_in.weight").type, 8u);  // q8_0: rows of 32
  EXPECT_EQ(f.tensors.at("blk.0.ssm_norm.weight").type, 0u);
  EXPECT_EQ(f.tensors.at("blk.0.ssm_conv1d.weight").type, 0u);
}

TEST_F(GgufExportTest, GraniteHybridRefusalsNameTheLayerAndKeyAndWriteNothing) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Without attn layers the attn-only n_kv_heads is refused by the config (model.attn.n_kv_heads).
      {granite_shape_with("n_kv_heads: 1, ", "", granite_shape_with("\"mamba2,attn\"", "\"mamba2,gdn\"")),
       "export --format gguf: layer 1 (gdn): a gdn mixer: llama.cpp's granitehybrid has mamba2 and attn layers only"},
      {granite_shape_with("rope_fraction: 0.5", "rope_fraction: 0.5, output_gate: true"),
       "export --format gguf: layer 1 (attn): model.attn.output_gate true: llama.cpp's granitehybrid does not gate "
       "the attention output (expected false)"},
      {granite_shape_with("rope_fraction: 0.5", "rope_fraction: 0.5, qk_norm: true"),
       "export --format gguf: layer 1 (attn): model.attn.qk_norm true: llama.cpp's granitehybrid does not normalize "
       "q and k (expected false)"},
      {granite_shape_with("rope_fraction: 0.5", "rope_fraction: 0.5, window_size: 8"),
       "export --format gguf: layer 1 (attn): model.attn.window_size 8: llama.cpp's granitehybrid has no sliding "
       "window (expected 0)"},
      {granite_shape_with("expand: 2", "expand: 4"),
       "export --format gguf: layer 0 (mamba2): model.mamba.expand 4: llama.cpp's granitehybrid asserts d_inner = 2 "
       "d_model (expected 2)"},
      {granite_shape_with("chunk_size: 4", "chunk_size: 4, proj_bias: true"),
       "export --format gguf: layer 0 (mamba2): model.mamba.proj_bias true: llama.cpp's granitehybrid has no in_proj "
       "or out_proj bias (expected false)"},
      {granite_shape_with("chunk_size: 4", "chunk_size: 4, time_step_limit: [0.0, 0.5]"),
       "export --format gguf: layer 0 (mamba2): model.mamba.time_step_limit [0, 0.5]: llama.cpp's granitehybrid does "
       "not clamp dt (expected [0, inf])"},
      {granite_shape_with("n_kv_heads: 1, ", "", granite_shape_with("\"mamba2,attn\"", "\"mamba2\"")),
       "export --format gguf: model.layers has no attn layer: llama.cpp's granitehybrid keeps a KV cache and aborts "
       "on a model without attention layers (expected mamba2 and attn layers)"},
  };
  for (const auto& [shape, message] : cases) {
    save("bad.h5", shape);
    lat::testing::expect_error<lat::ConfigError>([&] { export_gguf("bad.h5", "bad.gguf"); }, {message});
    EXPECT_FALSE(fs::exists(path("bad.gguf"))) << message;
  }
  save("ids.h5", kGraniteShape, "none");
  lat::testing::expect_error<lat::ConfigError>(
      [&] { export_gguf("ids.h5", "bad.gguf"); },
      {"export --format gguf: the model has no tokenizer (it was trained on token ids)"});
  EXPECT_FALSE(fs::exists(path("bad.gguf")));
}

TEST_F(GgufExportTest, HalfBf16AndQ8ZeroHoldTheF32ValuesWithinTheirRounding) {
  save("m.h5");
  export_gguf("m.h5", "f32.gguf");
  const GgufFile reference(path("f32.gguf"));
  for (const std::string dtype : {"f16", "bf16", "q8_0"}) {
    export_gguf("m.h5", dtype + ".gguf", dtype);
    const GgufFile f(path(dtype + ".gguf"));
    EXPECT_EQ(f.number("general.file_type"),
              (std::map<std::string, double>{{"f16", 1}, {"bf16", 32}, {"q8_0", 7}}.at(dtype)));
    EXPECT_EQ(f.tensor_order, reference.tensor_order);
    for (const std::string& name : f.tensor_order) {
      const TensorInfo& t = f.tensors.at(name);
      EXPECT_EQ(t.offset % 32, 0u);
      const std::vector<float> x = reference.f32(name);
      const bool kept_f32 = t.ne.size() == 1 || name.find("norm") != std::string::npos ||
                            name.find("ssm_conv1d") != std::string::npos;
      if (kept_f32) {
        EXPECT_EQ(t.type, 0u) << dtype << " " << name;
        EXPECT_EQ(f.f32(name), x) << name;
        continue;
      }
      const std::string raw = f.data(name, dtype == "q8_0" ? x.size() / 32 * 34 : x.size() * 2);
      auto u16 = [&](size_t byte) {
        return static_cast<uint16_t>(static_cast<uint8_t>(raw[byte]) | static_cast<uint8_t>(raw[byte + 1]) << 8);
      };
      if (dtype == "f16") {
        EXPECT_EQ(t.type, 1u) << name;
        for (size_t i = 0; i < x.size(); ++i)
          ASSERT_NEAR(lat::f16_to_float(u16(2 * i)), x[i], std::fabs(x[i]) * 0x1p-11f + 0x1p-25f) << name << " " << i;
      } else if (dtype == "bf16") {
        EXPECT_EQ(t.type, 30u) << name;
        for (size_t i = 0; i < x.size(); ++i)
          ASSERT_NEAR(lat::cpu::bf16_to_float(u16(2 * i)), x[i], std::fabs(x[i]) * 0x1p-8f) << name << " " << i;
      } else {
        EXPECT_EQ(t.type, 8u) << name;
        for (size_t b = 0; b < x.size() / 32; ++b) {
          const float d = lat::f16_to_float(u16(b * 34));
          float amax = 0.0f;
          for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
          for (size_t j = 0; j < 32; ++j) {
            const float value = d * static_cast<float>(static_cast<int8_t>(raw[b * 34 + 2 + j]));
            ASSERT_NEAR(value, x[b * 32 + j], d / 2 + amax * 0x1p-10f) << name << " block " << b << " " << j;
          }
        }
      }
    }
  }
}

TEST_F(GgufExportTest, ByteTokenizerIsGptTwoBytesWithoutMerges) {
  const lat::GgufVocabulary v = lat::gguf_vocabulary(lat::Tokenizer::byte(), 256);
  EXPECT_EQ(v.model, "gpt2");
  ASSERT_EQ(v.tokens.size(), 257u);
  EXPECT_EQ(v.tokens['a'], "a");
  EXPECT_EQ(v.tokens[' '], "\xc4\xa0");   // U+0120, GPT-2's space
  EXPECT_EQ(v.tokens['\n'], "\xc4\x8a");  // U+010A
  EXPECT_EQ(v.tokens[0xff], "\xc3\xbf");  // U+00FF stands for itself
  EXPECT_EQ(v.tokens[256], "<|endoftext|>");
  EXPECT_EQ(v.end_of_text_id, 256);
  EXPECT_TRUE(v.merges.empty());
}

/// A subword model that only carries its tokenizer.json (gguf_vocabulary reads nothing else).
class TokenizerJsonModel : public lat::SubwordModel {
 public:
  TokenizerJsonModel(std::string json, int64_t vocab_size) : json_(std::move(json)), vocab_size_(vocab_size) {}
  const std::string& type() const override { return type_; }
  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<int64_t> encode(std::string_view) const override { return {}; }
  std::string decode(const std::vector<int64_t>&) const override { return ""; }
  bool splits_after_newline() const override { return false; }
  bool has_token(int64_t id) const override { return id >= 0 && id < vocab_size_; }
  const std::string& file_contents() const override { return json_; }
  const char* file_name() const override { return "tokenizer.json"; }

 private:
  std::string type_ = "bpe", json_;
  int64_t vocab_size_;
};

lat::Tokenizer bpe_tokenizer(const std::string& pattern) {
  const nlohmann::json j = {
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"\xc4\xa0", 3}}},
        {"merges", nlohmann::json::array({"a b", nlohmann::json::array({"\xc4\xa0", "a"})})}}},
      {"added_tokens", nlohmann::json::array({{{"id", 5}, {"content", "<|im_end|>"}, {"special", true}},
                                              {{"id", 6}, {"content", "<think>"}, {"special", false}}})},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         nlohmann::json::array({{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}}, {{"type", "ByteLevel"}}})}}}};
  return lat::Tokenizer::subword(std::make_shared<TokenizerJsonModel>(j.dump(), 7));
}

TEST_F(GgufExportTest, BpeTokenizerJsonKeepsTokensInIdOrderMergesInRankOrderAndNamesItsPreTokenizer) {
  const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const lat::GgufVocabulary v = lat::gguf_vocabulary(bpe_tokenizer(qwen2), 8);  // one embedding row more
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "qwen2");
  EXPECT_EQ(v.tokens, (std::vector<std::string>{"a", "b", "ab", "\xc4\xa0", "[PAD4]", "<|im_end|>", "<think>", "[PAD7]",
                                                "<|endoftext|>"}));
  EXPECT_EQ(v.token_types, (std::vector<int32_t>{1, 1, 1, 1, 5, 3, 4, 5, 3}));
  EXPECT_EQ(v.merges, (std::vector<std::string>{"a b", "\xc4\xa0 a"}));
  EXPECT_EQ(v.end_of_text_id, 8);
  lat::testing::expect_error<lat::ConfigError>(
      [] { lat::gguf_vocabulary(bpe_tokenizer("\\w+"), 7); },
      {"export --format gguf: tokenizer bpe: pre-tokenizer pattern '\\w+' is none of llama.cpp's"});
  lat::testing::expect_error<lat::ConfigError>(
      [] { lat::gguf_vocabulary(lat::Tokenizer::byte(), 100); },
      {"export --format gguf: tokenizer byte: 256 tokens, more than the model's 100 embedding rows"});
}

/// A SentencePiece model trained on a few lines with `options` (key=value over lat's usual ones:
/// bpe, byte fallback, identity normalization, no dummy prefix), as its serialized bytes.
std::string train_sentencepiece(const std::string& dir, const std::unordered_map<std::string, std::string>& options) {
  const std::string input = dir + "/spm_input.txt";
  std::ofstream(input) << "the cat sat on the mat\nthe dog sat on the log\nnaive cafe ate the rest\n";
  std::unordered_map<std::string, std::string> args = {{"input", input},
                                                       {"model_type", "bpe"},
                                                       {"vocab_size", "300"},
                                                       {"byte_fallback", "true"},
                                                       {"character_coverage", "1"},
                                                       {"normalization_rule_name", "identity"},
                                                       {"add_dummy_prefix", "false"},
                                                       {"remove_extra_whitespaces", "false"},
                                                       {"minloglevel", "2"},
                                                       {"hard_vocab_limit", "false"}};
  for (const auto& [k, v] : options) args[k] = v;
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, nullptr, &model);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return model;
}

TEST_F(GgufExportTest, SentencePieceBpeKeepsPiecesScoresAndTypes) {
  const std::string contents = train_sentencepiece(path(""), {});
  const lat::Tokenizer t = lat::Tokenizer::subword(lat::sentencepiece_model(contents, "m.model"));
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(contents).ok());
  const lat::GgufVocabulary v = lat::gguf_vocabulary(t, t.vocab_size());
  EXPECT_EQ(v.model, "llama");
  ASSERT_EQ(static_cast<int>(v.tokens.size()), sp.GetPieceSize());  // "</s>" is EOS: nothing appended
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    EXPECT_EQ(v.tokens[static_cast<size_t>(id)], sp.IdToPiece(id));
    EXPECT_EQ(v.scores[static_cast<size_t>(id)], sp.GetScore(id));
    const int32_t type = sp.IsUnknown(id) ? 2 : sp.IsControl(id) ? 3 : sp.IsByte(id) ? 6 : sp.IsUnused(id) ? 5 : 1;
    EXPECT_EQ(v.token_types[static_cast<size_t>(id)], type) << id;
  }
  EXPECT_EQ(v.token_types[static_cast<size_t>(sp.PieceToId("<0x41>"))], 6);
  EXPECT_EQ(v.end_of_text_id, sp.eos_id());
  EXPECT_EQ(v.unknown_id, sp.unk_id());
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_FALSE(v.remove_extra_whitespaces);

  const std::string unigram = train_sentencepiece(path(""), {{"model_type", "unigram"}});
  lat::testing::expect_error<lat::ConfigError>(
      [&] { lat::gguf_vocabulary(lat::Tokenizer::subword(lat::sentencepiece_model(unigram, "u.model")), 300); },
      {"export --format gguf: tokenizer sentencepiece: a unigram model: llama.cpp's llama tokenizer merges pieces by "
       "score"});
  const std::string nfkc = train_sentencepiece(path(""), {{"normalization_rule_name", "nmt_nfkc"}});
  lat::testing::expect_error<lat::ConfigError>(
      [&] { lat::gguf_vocabulary(lat::Tokenizer::subword(lat::sentencepiece_model(nfkc, "n.model")), 300); },
      {"export --format gguf: tokenizer sentencepiece: normalization rule 'nmt_nfkc': llama.cpp's llama tokenizer "
       "does not normalize text (expected identity)"});
}

TEST_F(GgufExportTest, RefusalsNameTheFeatureAndWriteNothing) {
  save("gva.h5", [] {
    std::string s = kShape;
    s.replace(s.find("expand_v: 1.0"), 13, "expand_v: 2.0");
    return s;
  }());
  lat::testing::expect_error<lat::ConfigError>(
      [&] { export_gguf("gva.h5", "a.gguf"); },
      {"export --format gguf: layer 0 (gdn): value head dim 16",
       "llama.cpp's qwen35 needs it equal to the key head dim 8 (expected model.expand_v 1)"});
  save("gdn_only.h5", [] {
    std::string s = kShape;
    s.replace(s.find("\"gdn,attn\""), 10, "\"gdn\"");
    s.replace(s.find("n_kv_heads: 1, "), 15, "");  // attn-only: refused without attn layers
    return s;
  }());
  lat::testing::expect_error<lat::ConfigError>(
      [&] { export_gguf("gdn_only.h5", "a.gguf"); },
      {"export --format gguf: model.layers has no attn layer: llama.cpp's qwen35 keeps a recurrent "
       "state and a KV cache and aborts on a model without either kind (expected both gdn and attn "
       "layers)"});
  save("ids.h5", kShape, "none");
  lat::testing::expect_error<lat::ConfigError>(
      [&] { export_gguf("ids.h5", "a.gguf"); },
      {"export --format gguf: the model has no tokenizer (it was trained on token ids)"});
  save("m.h5");
  lat::testing::expect_error<lat::ConfigError>(
      [&] { export_gguf("m.h5", "a.gguf", "q4_0"); },
      {"export: --dtype: expected f32, f16, bf16 or q8_0 for --format gguf, got 'q4_0'"});
  lat::testing::expect_error<lat::ConfigError>(
      [&] { export_gguf("m.h5", "a.bin"); },
      {"export: --out '" + path("a.bin") + "': expected a file name ending in .gguf for --format gguf"});
  EXPECT_FALSE(fs::exists(path("a.gguf")));
  EXPECT_FALSE(fs::exists(path("a.bin")));
  lat::testing::expect_error<lat::ConfigError>(
      [] { lat::gguf_vocabulary(lat::Tokenizer::char_from_vocab("ab\xe2\x96\x81"), 3); },
      {"export --format gguf: tokenizer char: the vocabulary holds", "escaped space"});
}

// kda (2 heads of 16) and mla (2 heads over a latent of 8, key parts 4 + 2, values of 6), tied,
// zero-centred norms: llama.cpp's kimi-linear.
const std::string kKimiShape =
    "  d_model: 32\n  n_layers: 2\n  n_heads: 2\n  head_dim: 16\n  layers: \"kda,mla\"\n"
    "  intermediate_size: 64\n  tie_embeddings: true\n  norm_zero_centered: true\n"
    "  mla: {kv_lora_rank: 8, qk_nope_head_dim: 4, qk_rope_head_dim: 2, v_head_dim: 6}\n";

TEST_F(GgufExportTest, KimiLinearFileHoldsKdaAndMlaLayersAsLlamaCppReadsThem) {
  const lat::NamedTensors lat_tensors = save("k.h5", kKimiShape);
  export_gguf("k.h5", "k.gguf");
  const GgufFile f(path("k.gguf"));
  EXPECT_EQ(f.string("general.architecture"), "kimi-linear");
  const std::map<std::string, double> numbers = {{"kimi-linear.context_length", 32768},
                                                 {"kimi-linear.embedding_length", 32},
                                                 {"kimi-linear.block_count", 2},
                                                 {"kimi-linear.feed_forward_length", 64},
                                                 {"kimi-linear.attention.head_count", 2},
                                                 {"kimi-linear.attention.key_length", 8 + 2},
                                                 {"kimi-linear.attention.key_length_mla", 4 + 2},
                                                 {"kimi-linear.attention.value_length_mla", 6},
                                                 {"kimi-linear.attention.kv_lora_rank", 8},
                                                 {"kimi-linear.rope.dimension_count", 2},
                                                 {"kimi-linear.ssm.conv_kernel", 4},
                                                 {"kimi-linear.kda.head_dim", 16},
                                                 {"kimi-linear.leading_dense_block_count", 2},
                                                 {"kimi-linear.expert_feed_forward_length", 64},
                                                 {"kimi-linear.expert_shared_count", 0},
                                                 {"kimi-linear.expert_gating_func", 2}};
  for (const auto& [key, value] : numbers) EXPECT_EQ(f.number(key), value) << key;
  EXPECT_FLOAT_EQ(f.number("kimi-linear.attention.layer_norm_rms_epsilon"), 1e-6f);
  // 0 marks the kda layer; the mla layer's cache is one latent "head".
  EXPECT_EQ(f.kv.at("kimi-linear.attention.head_count_kv").numbers, (std::vector<double>{0, 1}));

  const std::vector<std::string> names = {"token_embd.weight",
                                          "blk.0.attn_norm.weight",
                                          "blk.0.attn_q.weight",
                                          "blk.0.attn_k.weight",
                                          "blk.0.attn_v.weight",
                                          "blk.0.ssm_conv1d_q.weight",
                                          "blk.0.ssm_conv1d_k.weight",
                                          "blk.0.ssm_conv1d_v.weight",
                                          "blk.0.ssm_f_a.weight",
                                          "blk.0.ssm_f_b.weight",
                                          "blk.0.ssm_a",
                                          "blk.0.ssm_dt.bias",
                                          "blk.0.ssm_beta.weight",
                                          "blk.0.ssm_g_a.weight",
                                          "blk.0.ssm_g_b.weight",
                                          "blk.0.ssm_norm.weight",
                                          "blk.0.attn_output.weight",
                                          "blk.0.ffn_norm.weight",
                                          "blk.0.ffn_gate.weight",
                                          "blk.0.ffn_up.weight",
                                          "blk.0.ffn_down.weight",
                                          "blk.1.attn_norm.weight",
                                          "blk.1.attn_q.weight",
                                          "blk.1.attn_kv_a_mqa.weight",
                                          "blk.1.attn_kv_a_norm.weight",
                                          "blk.1.attn_k_b.weight",
                                          "blk.1.attn_v_b.weight",
                                          "blk.1.attn_output.weight",
                                          "blk.1.ffn_norm.weight",
                                          "blk.1.ffn_gate.weight",
                                          "blk.1.ffn_up.weight",
                                          "blk.1.ffn_down.weight",
                                          "output_norm.weight",
                                          "output.weight"};
  EXPECT_EQ(f.tensor_order, names);
  // ne: innermost first.
  const std::map<std::string, std::vector<uint64_t>> shapes = {{"blk.0.ssm_conv1d_v.weight", {4, 1, 32}},
                                                               {"blk.0.ssm_f_a.weight", {32, 16}},
                                                               {"blk.0.ssm_f_b.weight", {16, 32}},
                                                               {"blk.0.ssm_a", {1, 2}},
                                                               {"blk.0.ssm_dt.bias", {32}},
                                                               {"blk.0.ssm_beta.weight", {32, 2}},
                                                               {"blk.0.ssm_norm.weight", {16}},
                                                               {"blk.1.attn_q.weight", {32, 2 * 6}},
                                                               {"blk.1.attn_kv_a_mqa.weight", {32, 10}},
                                                               {"blk.1.attn_k_b.weight", {4, 8, 2}},
                                                               {"blk.1.attn_v_b.weight", {8, 6, 2}},
                                                               {"blk.1.attn_output.weight", {12, 32}},
                                                               {"output.weight", {32, 13}}};
  for (const auto& [name, ne] : shapes) EXPECT_EQ(f.tensors.at(name).ne, ne) << name;

  const auto same = [&](const std::string& gguf, const std::string& lat) {
    EXPECT_EQ(f.f32(gguf), values_of(lat_tensors, lat)) << gguf;
  };
  same("blk.0.attn_k.weight", "layers.0.attn.k_proj.weight");
  same("blk.0.ssm_conv1d_q.weight", "layers.0.attn.q_conv1d.weight");
  same("blk.0.ssm_f_b.weight", "layers.0.attn.f_b_proj.weight");
  same("blk.0.ssm_dt.bias", "layers.0.attn.dt_bias");
  same("blk.0.ssm_beta.weight", "layers.0.attn.b_proj.weight");
  same("blk.0.ssm_g_b.weight", "layers.0.attn.g_b_proj.weight");
  same("blk.0.ssm_norm.weight", "layers.0.attn.o_norm.weight");  // scales by w in both
  same("blk.1.attn_kv_a_mqa.weight", "layers.1.attn.kv_a_proj_with_mqa.weight");
  same("blk.1.attn_kv_a_norm.weight", "layers.1.attn.kv_a_layernorm.weight");
  same("blk.1.attn_output.weight", "layers.1.attn.o_proj.weight");
  const std::vector<float> a_log = values_of(lat_tensors, "layers.0.attn.A_log");
  const std::vector<float> ssm_a = f.f32("blk.0.ssm_a");
  for (size_t h = 0; h < 2; ++h) EXPECT_EQ(ssm_a[h], -std::exp(a_log[h])) << h;
  // kv_b_proj [2 (4 + 6), 8]: head h's key row j is k_b[h][c][j], its value row j is v_b[h][j][c].
  const std::vector<float> kv_b = values_of(lat_tensors, "layers.1.attn.kv_b_proj.weight");
  const std::vector<float> k_b = f.f32("blk.1.attn_k_b.weight"), v_b = f.f32("blk.1.attn_v_b.weight");
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 8; ++c) {
      for (int j = 0; j < 4; ++j) EXPECT_EQ(k_b[(h * 8 + c) * 4 + j], kv_b[(h * 10 + j) * 8 + c]) << h << c << j;
      for (int j = 0; j < 6; ++j) EXPECT_EQ(v_b[(h * 6 + j) * 8 + c], kv_b[(h * 10 + 4 + j) * 8 + c]) << h << c << j;
    }
  std::vector<float> norm = values_of(lat_tensors, "layers.1.mlp_norm.weight");
  for (float& x : norm) x += 1.0f;  // zero-centred: llama.cpp scales by the stored 1 + w
  EXPECT_EQ(f.f32("blk.1.ffn_norm.weight"), norm);
  // Tied: llama.cpp requires output, so the embeddings are written again.
  std::vector<float> embd = values_of(lat_tensors, "embeddings.weight");
  embd.resize(13 * 32, 0.0f);
  EXPECT_EQ(f.f32("token_embd.weight"), embd);
  EXPECT_EQ(f.f32("output.weight"), embd);
}

TEST_F(GgufExportTest, KimiLinearRefusalsNameTheLayerAndKeyAndWriteNothing) {
  const auto kimi_with = [](const std::string& from, const std::string& to) {
    std::string s = kKimiShape;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  struct Case {
    std::string shape;
    std::string message;
  };
  const std::vector<Case> cases = {
      {kimi_with("v_head_dim: 6", "v_head_dim: 6, q_lora_rank: 4"),
       "export --format gguf: layer 1 (mla): model.mla.q_lora_rank 4: llama.cpp's kimi-linear multiplies by one "
       "q_proj (expected 0)"},
      {kimi_with("v_head_dim: 6", "v_head_dim: 6, rope: true"),
       "export --format gguf: layer 1 (mla): model.mla.rope true: llama.cpp's kimi-linear applies no position "
       "encoding (expected false)"},
      {kimi_with("head_dim: 16\n", "head_dim: 16\n  expand_v: 2.0\n"),
       "export --format gguf: layer 0 (kda): value head dim 32 (model.expand_v 2): llama.cpp's kimi-linear needs it "
       "equal to the key head dim 16 (expected model.expand_v 1)"},
      {kimi_with("head_dim: 16\n", "head_dim: 16\n  attn: {n_heads: 4}\n"),
       "export --format gguf: layer 0 (kda): model.attn.n_heads 4: llama.cpp's kimi-linear has one head count for "
       "its kda and mla layers (expected model.n_heads 2)"},
      {kimi_with("\"kda,mla\"", "\"kda\""),
       "export --format gguf: model.layers has no mla layer: llama.cpp's kimi-linear aborts on a model without "
       "both kinds (expected kda and mla layers)"},
      {kimi_with("\"kda,mla\"", "\"kda,attn\""),
       "export --format gguf: layer 1 (attn): a attn mixer: llama.cpp's kimi-linear has kda and mla layers only"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shape);
    save("k.h5", c.shape);
    EXPECT_EQ(lat::testing::expect_error<lat::ConfigError>([&] { export_gguf("k.h5", "k.gguf"); }, {c.message}),
              c.message);
    EXPECT_FALSE(fs::exists(path("k.gguf")));
  }
}

}  // namespace
