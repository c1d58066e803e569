// Prompt -> states -> sampled tokens, streamed.
#include "train/inference/generate.h"

#include <limits>
#include <optional>

#include "lat/ops.h"
#include "train/config/config.h"
#include "train/config/thread_count.h"
#include "train/files/trained_model.h"
#include "train/inference/finite_logits.h"
#include "train/inference/text_stream.h"

namespace lat {

std::vector<int64_t> generate_tokens(const HybridLM& model, const std::vector<int64_t>& prompt,
                                     int64_t max_new_tokens, const SamplingOptions& sampling, Generator& gen,
                                     const std::function<void(int64_t)>& on_token) {
  LAT_CHECK(!prompt.empty(), "generate_tokens: prompt: expected at least one token");
  LAT_CHECK(max_new_tokens >= 0, "generate: --max-new-tokens: expected >= 0, got " << max_new_tokens);
  validate(sampling);
  HybridLMState state = model.make_states(1);
  const int64_t V = model.vocab_size();
  LAT_CHECK(sampling.drawable_ids <= V, "generate_tokens: drawable_ids: expected at most the model's " << V
                                            << " ids, got " << sampling.drawable_ids);
  // The logits of ids at and above drawable_ids (padding rows) are never looked at.
  const int64_t drawable = sampling.drawable_ids > 0 ? sampling.drawable_ids : V;
  for (int64_t id : sampling.excluded_ids)
    LAT_CHECK(id >= 0 && id < drawable, "generate_tokens: excluded_ids: " << id << " is not below " << drawable);
  std::vector<float> masked;  // the last logits with excluded ids at -inf
  std::vector<int64_t> out;
  Tensor ids = Tensor::from_vector(prompt, {1, static_cast<int64_t>(prompt.size())});
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    Tensor logits = model.step(ids, state);  // [1, T, V]: the last row predicts the next token
    const float* last = logits.data<float>() + (logits.size(1) - 1) * V;
    check_finite_logits(last, drawable, static_cast<int64_t>(prompt.size()) + i - 1);
    if (!sampling.excluded_ids.empty()) {
      masked.assign(last, last + drawable);
      for (int64_t id : sampling.excluded_ids) masked[id] = -std::numeric_limits<float>::infinity();
      last = masked.data();
    }
    const int64_t next = sample_token(last, drawable, sampling, gen);
    out.push_back(next);
    if (on_token) on_token(next);
    ids = Tensor::from_vector(std::vector<int64_t>{next}, {1, 1});
  }
  return out;
}

void generate(const GenerateOptions& options, std::ostream& out) {
  validate(options.sampling);
  LAT_CHECK(options.max_new_tokens >= 0, "generate: --max-new-tokens: expected >= 0, got " << options.max_new_tokens);
  TrainedModel trained = load_trained_model(options.checkpoint);
  LAT_CHECK(trained.tokenizer.has_value(),
            "generate: '" << trained.path
                          << "' has no tokenizer lat runs (a model on token ids, or a Hugging Face tokenizer other "
                             "than lat's char and byte forms): no text to write");
  set_num_threads(inference_threads(options.threads));
  const Tokenizer& tokenizer = *trained.tokenizer;
  std::vector<int64_t> prompt;
  if (!options.prompt.empty()) {
    try {
      prompt = tokenizer.encode(options.prompt);
    } catch (const Error& e) {  // a character the model never saw: the user's input, exit code 2
      throw ConfigError(std::string("generate: --prompt: ") + e.what());
    }
  } else {
    try {
      prompt = tokenizer.encode("\n");
    } catch (const Error&) {
      prompt.clear();
    }
    if (prompt.empty()) prompt = {0};  // a vocabulary without a newline
  }
  // A subword token's text depends on its neighbours: print what decoding the whole sequence
  // adds (TextStream); a char or byte token is its own text.
  std::optional<TextStream> stream;
  if (tokenizer.subword_model()) stream.emplace(tokenizer, prompt);
  out << (stream && !options.prompt.empty() ? stream->printed_prompt() : options.prompt);
  out.flush();
  Generator gen(options.seed);
  SamplingOptions sampling = options.sampling;
  sampling.drawable_ids = tokenizer.vocab_size();  // load_model_weights: at most the model's ids
  for (int64_t id = 0; id < sampling.drawable_ids; ++id)
    if (!tokenizer.has_token(id)) sampling.excluded_ids.push_back(id);
  bool wrote = !options.prompt.empty();
  try {
    generate_tokens(*trained.model, prompt, options.max_new_tokens, sampling, gen, [&](int64_t id) {
      out << (stream ? stream->push(id) : tokenizer.decode_one(id));
      out.flush();
      wrote = true;
    });
  } catch (const ForwardOverflow& e) {
    if (wrote) out << '\n';  // the error then starts a line of its own where stdout and stderr share a terminal
    out.flush();
    throw Error(forward_overflow_message("generate", trained.path, e));
  }
  if (stream) out << stream->finish();
  out << '\n';
  out.flush();
}

}  // namespace lat
