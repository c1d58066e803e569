// Whole-model benchmark, in one process, on the CPU:
//  1. Generation, batch 1, random weights and random token ids (speed and memory do not
//     depend on them), vocab 65, for three models:
//       hybrid      the model section of configs/shakespeare_hybrid.yaml (gdn,gdn,attn,gdn;
//                   its attention layer has a sliding window of block_size = 256 tokens)
//       hybrid-full the same with model.attn.window_size = 0 (full attention layer)
//       attention   the model section of configs/shakespeare_transformer.yaml (attn only)
//     At each context L (default 1024, 8192, 32768): a prompt of L ids is fed through
//     HybridLM::step (the prefill, in pieces of --prefill-chunk tokens), then --decode-steps
//     single tokens, each timed. Reported: prefill tokens/s; median decode ms/token and
//     tokens/s; the generation state's bytes (every tensor of the HybridLMState: KV caches
//     as allocated, recurrent and short-conv states) after the prefill and after decoding;
//     the process's current and peak RSS. Last, each model's decode ms/token at the largest
//     context over that at the smallest: the hybrid's should stay near 1, while every model
//     with a full-attention layer grows with L.
//  2. Training tokens/s of configs/shakespeare_hybrid.yaml (as it is, and packed: documents
//     split at blank lines, data.packing, so that every mixer runs with cu_seqlens; its ratio
//     to the unpacked row is printed last) and shakespeare_transformer.yaml, and of their
//     "nanoGPT-size" variants (data.block_size=64, train.batch_size=12,
//     train.grad_accum=1), and configs/shakespeare_granite.yaml (the main job's width with
//     mamba2,mamba2,attn,mamba2: the Mamba-2 mixer's forward and backward at that width). A step is what the trainer's is (train/run/run_loop.cpp): forward and
//     cross-entropy of each micro-batch, backward, global-norm clipping, the AdamW update of
//     TrainOptimizer at the schedule's learning rate, with the trainer's malloc settings.
//     Batches are the trainer's (BatchLoader windows of the config's data) when the data file
//     exists, else uniform random ids in [0, 65); the output says which. After warm-up steps,
//     the median ms/step over --steps steps; tokens/s = batch_size * block_size * grad_accum /
//     that median. No evals, no checkpoints. Each row runs at every precision of --precision
//     (default fp32,bf16; bf16 where this CPU has AVX512-BF16): one model per precision from
//     the same initial weights, the precisions taking turns step by step on the same batches,
//     and the ratio of their tokens/s (a ratio from one process holds on a loaded machine,
//     where absolute figures do not).
//     Sizes (--preset): main, the rows above; 25M, the main job's hybrid at d_model 512, 8
//     layers gdn,gdn,gdn,attn x 2, 8 heads of 64, block 512, batch 4, chunks of 64, window 512;
//     100M, d_model 768, gdn,gdn,gdn,attn x 3, 12 heads of 64, block 1024, batch 4, chunks of 64,
//     window 1024 (overrides on shakespeare_hybrid.yaml; bench_torch_peer.py --preset has the
//     same shapes). --long-context runs instead, at the 25M width, for each block of --blocks
//     (512,2048,8192,16384) at 16384 tokens per step (batch 16384 / block): "gdn block B" (gdn x
//     8) and "hybrid-swa block B" (gdn,gdn,gdn,attn x 2, window 512). Each row also reports its
//     peak RSS (the row runs in a process of its own: this executable started again) and its MFU:
//     model FLOPs per token (bench/model_flops.h, docs/MFU.md) x tokens/s over the product peak
//     of its precision (lat::matmul 1024^3, best of 20, on the rows' clock), measured right
//     before and after the row (the better of the two; its column "peak GF/s").
// Generation runs first, so that its peak RSS is not the training part's. A generation row's
// peak RSS is the process's high-water mark so far: rows run in the printed order, so its
// figure also covers the rows above it (run one model with --models for a clean figure).
//
// Threads: OpenMP's default (OMP_NUM_THREADS, else all cores), or --threads N. Run it on
// idle cores: when another process competes for them, OpenMP's barriers can make a step
// 100x slower (seen on a 2-core machine); the load average is printed at the start and end,
// and the OpenMP wait policy, chosen at start as `lat train` chooses it.
//  3. The loaded case, with --competing N: N child processes that each spin on a core (the
//     other jobs of a shared machine, like `yes > /dev/null`) are forked before the training
//     rows and killed after them. Each row runs its steps with the children stopped (SIGSTOP:
//     idle), then again, after its own warm-up, with them running (SIGCONT: loaded), so that
//     both medians come from the same seconds; each row adds its loaded tokens/s and the
//     loaded/idle ratio. The process's OpenMP wait policy (printed at the start, chosen as
//     `lat train` chooses it: train/run/wait_policy.h) is the one of both columns.
//  4. Inference under load: `lat eval`'s and `lat generate`'s work (the hybrid model with
//     random weights: the loss of one train.batch_size x data.block_size batch, median of
//     --steps; then --decode-steps tokens generated greedily by generate_tokens after a 1-token
//     prompt, as tokens/s) in two fresh processes, one with libgomp's default wait policy
//     and one with OMP_WAIT_POLICY=passive (libgomp reads it once, at start), while
//     max(1, --competing) child processes spin on the cores. What choosing the policy (as
//     `lat eval` and `lat generate` do) is worth on a busy machine; --skip-inference skips it.
//
//   build/bench/bench_model                  # the full run (minutes: 32k prefills)
//   build/bench/bench_model --contexts 1024 --steps 3 --decode-steps 8   # a quick check
// Flags: --config-dir DIR (default: configs/ of the working directory, else of the source
// tree the executable was built in), --contexts L1,L2,.. (1024,8192,32768), --decode-steps N
// (64), --prefill-chunk N (1024; 0 = the whole prompt in one call), --models
// hybrid,hybrid-full,attention, --steps N (20), --warmup-steps N (3), --threads N,
// --precision fp32,bf16 (the training precisions, the first being the ratios' base),
// --clock wall|cpu (training steps timed in wall time, or in the process's CPU time: at one
// thread the time the step ran, leaving out the time other processes held the core; with
// more threads it also counts OpenMP's spinning), --competing N (default 0: no loaded case;
// see 3. above), --rows NAME,.. (the training rows to run, named as printed with '-' for
// spaces, e.g. hybrid,hybrid-nanoGPT-size; default all), --skip-train, --skip-generate,
// --skip-inference, --preset main|25M|100M, --long-context, --blocks B1,B2,.. (see 2. above).
#include <omp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/model_flops.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "lat/dtype.h"
#include "lat/ops.h"
#include "lat/precision.h"
#include "lat/tape.h"
#include "lat/tensor.h"
#include "layers/attention.h"
#include "layers/hybrid_lm.h"
#include "layers/linear_attention_layers.h"
#include "optim/schedule.h"
#include "train/config/config.h"
#include "train/config/data_options.h"
#include "train/config/model_config.h"
#include "train/inference/generate.h"
#include "train/run/heap.h"
#include "train/run/train_optimizer.h"
#include "train/run/train_step.h"
#include "train/run/wait_policy.h"

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
using lat::Tensor;

constexpr int64_t kRandomVocab = 65;  // tiny Shakespeare's character count
constexpr int64_t kMaxSteps = 100000;  // --steps and --decode-steps
// Tokens per step of the long-context rows: batch = this / block (1 from this block on).
constexpr int64_t kLongContextTokens = 16384;
constexpr int64_t kSizedChunk = 64;  // model.linear.chunk_size of the preset and long-context rows

/// The command-line flags, with their defaults.
struct Options {
  std::string config_dir;
  std::vector<int64_t> contexts = {1024, 8192, 32768};
  int64_t decode_steps = 64;
  int64_t prefill_chunk = 1024;
  std::vector<std::string> models = {"hybrid", "hybrid-full", "attention"};
  int64_t steps = 20;
  int64_t warmup_steps = 3;
  int threads = 0;  // 0 = OpenMP's default
  std::vector<lat::Precision> precisions = {lat::Precision::fp32, lat::Precision::bf16};
  bool cpu_time = false;  // time training steps in process CPU time instead of wall time
  int competing = 0;      // spinning child processes for the loaded case (0: none)
  std::vector<std::string> rows;  // training rows to run, '-' for spaces (empty: all)
  bool skip_train = false;
  bool skip_generate = false;
  bool skip_inference = false;
  std::string preset = "main";  // the training rows' sizes: main, 25M, 100M
  bool long_context = false;    // the long-context rows instead of the preset's
  std::vector<int64_t> blocks = {512, 2048, 8192, 16384};  // their block sizes
  std::vector<std::string> args;  // the command line's arguments, for the row processes
};

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// The process's CPU time in ms (all its threads).
double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

/// The median of `v` (the mean of the two middle values for an even count); v non-empty.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The first three fields of /proc/loadavg (1, 5 and 15 minute load), or "unknown".
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "unknown";
  return one + " " + five + " " + fifteen;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

/// The process's peak resident set size so far, in MiB (getrusage: ru_maxrss is in KiB on Linux).
double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

/// The process's current resident set size in MiB (/proc/self/statm, resident pages); 0
/// where that file cannot be read.
double current_rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long long size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0.0;
  return mib(static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)));
}

/// Bytes of `t`'s elements (0 when undefined).
double tensor_bytes(const Tensor& t) {
  return t.defined() ? static_cast<double>(t.numel()) * static_cast<double>(lat::dtype_size(t.dtype())) : 0.0;
}

/// Bytes held by a generation state: for an attention layer its KV cache buffers as
/// allocated (capacity rows, not only the valid ones: that is the memory used), for a
/// linear layer its recurrent state and short-convolution states. Throws std::runtime_error
/// on a MixerState of another kind (this helper would then need to learn it).
double state_bytes(const lat::HybridLMState& state) {
  double bytes = 0.0;
  for (const auto& layer : state.layers) {
    if (const auto* kv = dynamic_cast<const lat::KVCache*>(layer.get())) {
      bytes += tensor_bytes(kv->k) + tensor_bytes(kv->v);
    } else if (const auto* lin = dynamic_cast<const lat::LinearMixerState*>(layer.get())) {
      bytes += tensor_bytes(lin->recurrent_state) + tensor_bytes(lin->q_conv) + tensor_bytes(lin->k_conv) +
               tensor_bytes(lin->v_conv);
    } else {
      throw std::runtime_error("state_bytes: unknown MixerState kind");
    }
  }
  return bytes;
}

/// `n` uniform random ids in [0, vocab) as an i64 tensor [1, n].
Tensor random_ids(int64_t n, int64_t vocab, lat::Generator& gen) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t& id : ids) id = gen.randint(vocab);
  return Tensor::from_vector(ids, {1, n});
}

/// Comma-separated integers, each in [1, max]. Throws std::invalid_argument naming `flag`.
std::vector<int64_t> parse_int_list(const std::string& text, const char* flag, int64_t max, int64_t min = 1) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    out.push_back(lat::bench::parse_int_flag(text.substr(start, end - start), flag, min, max));
    start = end + 1;
  }
  return out;
}

/// Comma-separated names.
std::vector<std::string> parse_name_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

/// The command-line flags (see the file header). Throws std::invalid_argument naming a bad
/// flag or value; --help prints the usage and exits.
Options parse_options(int argc, char** argv) {
  using lat::bench::kMaxThreads;
  using lat::bench::parse_int_flag;
  constexpr int64_t kMaxContext = int64_t{1} << 20, kMaxCompeting = 64;
  Options o;
  o.args.assign(argv + 1, argv + argc);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + ": expected a value");
      const std::string next = argv[i + 1];
      if (next.rfind("--", 0) == 0) throw std::invalid_argument(arg + ": expected a value, got the flag '" + next + "'");
      ++i;
      return next;
    };
    if (arg == "--config-dir") o.config_dir = value();
    else if (arg == "--contexts") o.contexts = parse_int_list(value(), "--contexts", kMaxContext);
    else if (arg == "--decode-steps") o.decode_steps = parse_int_flag(value(), "--decode-steps", 1, kMaxSteps);
    else if (arg == "--prefill-chunk") o.prefill_chunk = parse_int_flag(value(), "--prefill-chunk", 0, kMaxContext);
    else if (arg == "--models") o.models = parse_name_list(value());
    else if (arg == "--steps") o.steps = parse_int_flag(value(), "--steps", 1, kMaxSteps);
    else if (arg == "--warmup-steps") o.warmup_steps = parse_int_flag(value(), "--warmup-steps", 0, kMaxSteps);
    else if (arg == "--threads") o.threads = static_cast<int>(parse_int_flag(value(), "--threads", 1, kMaxThreads));
    else if (arg == "--competing") o.competing = static_cast<int>(parse_int_flag(value(), "--competing", 0, kMaxCompeting));
    else if (arg == "--rows") o.rows = parse_name_list(value());
    else if (arg == "--preset") o.preset = value();
    else if (arg == "--long-context") o.long_context = true;
    else if (arg == "--blocks") {
      // At least a chunk (shorter blocks pad every sequence to one: up to 64x the activations
      // of the tokens), and dividing the step's tokens, so that every row trains on as many.
      o.blocks = parse_int_list(value(), "--blocks", kLongContextTokens, kSizedChunk);
      for (size_t b = 0; b < o.blocks.size(); ++b)
        if (std::find(o.blocks.begin(), o.blocks.begin() + static_cast<std::ptrdiff_t>(b), o.blocks[b]) !=
            o.blocks.begin() + static_cast<std::ptrdiff_t>(b))
          throw std::invalid_argument("--blocks: " + std::to_string(o.blocks[b]) + " given twice");
      for (const int64_t block : o.blocks)
        if (kLongContextTokens % block != 0)
          throw std::invalid_argument("--blocks: expected divisors of " + std::to_string(kLongContextTokens) +
                                      " (the tokens of every step), got " + std::to_string(block));
      o.long_context = true;
    }
    else if (arg == "--precision") {
      o.precisions.clear();
      for (const std::string& name : parse_name_list(value())) {
        try {
          o.precisions.push_back(lat::parse_precision(name));
        } catch (const lat::Error&) {
          throw std::invalid_argument("--precision: expected fp32 or bf16 separated by commas, got '" + name + "'");
        }
      }
    } else if (arg == "--clock") {
      const std::string clock = value();
      if (clock != "wall" && clock != "cpu") throw std::invalid_argument("--clock: expected wall or cpu, got '" + clock + "'");
      o.cpu_time = clock == "cpu";
    } else if (arg == "--skip-train") o.skip_train = true;
    else if (arg == "--skip-generate") o.skip_generate = true;
    else if (arg == "--skip-inference") o.skip_inference = true;
    else if (arg == "--help" || arg == "-h") {
      std::printf("usage: bench_model [--config-dir DIR] [--contexts 1024,8192,32768] [--decode-steps 64]\n"
                  "                   [--prefill-chunk 1024] [--models hybrid,hybrid-full,attention]\n"
                  "                   [--steps 20] [--warmup-steps 3] [--threads N] [--precision fp32,bf16]\n"
                  "                   [--clock wall|cpu] [--competing N] [--rows hybrid,...] [--skip-train]\n"
                  "                   [--skip-generate] [--skip-inference] [--preset main|25M|100M]\n"
                  "                   [--long-context] [--blocks 512,2048,8192,16384]\n"
                  "presets (training rows): main = the configs as they are (shakespeare_hybrid, its\n"
                  "  nanoGPT-size and packed variants, shakespeare_transformer, shakespeare_granite);\n"
                  "  25M = d_model 512, layers gdn,gdn,gdn,attn x 2, 8 heads of 64, block 512, batch 4, chunk 64;\n"
                  "  100M = d_model 768, layers gdn,gdn,gdn,attn x 3, 12 heads of 64, block 1024, batch 4, chunk 64.\n"
                  "--long-context (implied by --blocks): at the 25M width, gdn x 8 and the 25M hybrid with an\n"
                  "  attention window of 512, at each block of --blocks (divisors of 16384, at least 64) with\n"
                  "  batch x block = 16384 tokens; training rows only (no generation or inference part).\n");
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument '" + arg + "' (see --help)");
    }
  }
  if (o.preset != "main" && o.preset != "25M" && o.preset != "100M")
    throw std::invalid_argument("--preset: unknown preset '" + o.preset + "' (main, 25M, 100M)");
  if (o.long_context && o.preset != "main")
    throw std::invalid_argument("--preset " + o.preset +
                                " with --long-context: the long-context rows have their own sizes (the 25M width)");
  for (const std::string& m : o.models)
    if (m != "hybrid" && m != "hybrid-full" && m != "attention")
      throw std::invalid_argument("--models: unknown model '" + m + "' (hybrid, hybrid-full, attention)");
  return o;
}

/// The configs/ folder holding both Shakespeare configs: --config-dir when given, else
/// ./configs, else configs/ two or three levels above the executable (build-*/bench/).
/// Throws std::runtime_error listing the places tried.
fs::path find_config_dir(const std::string& given) {
  const char* names[] = {"shakespeare_hybrid.yaml", "shakespeare_transformer.yaml"};
  auto has_both = [&](const fs::path& dir) {
    std::error_code ec;
    return fs::is_regular_file(dir / names[0], ec) && fs::is_regular_file(dir / names[1], ec);
  };
  std::vector<fs::path> candidates;
  if (!given.empty()) {
    candidates.push_back(given);
  } else {
    candidates.push_back(fs::current_path() / "configs");
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back(exe.parent_path().parent_path().parent_path() / "configs");
      candidates.push_back(exe.parent_path().parent_path() / "configs");
    }
  }
  std::string tried;
  for (const fs::path& dir : candidates) {
    if (has_both(dir)) return fs::weakly_canonical(dir);
    tried += (tried.empty() ? "" : ", ") + dir.string();
  }
  throw std::runtime_error("cannot find shakespeare_hybrid.yaml and shakespeare_transformer.yaml in " + tried +
                           " (pass --config-dir DIR)");
}

// ---- generation --------------------------------------------------------------------------

/// One generation model of the table: its row name and model.* section.
struct GenModel {
  std::string name;
  lat::ModelConfig model;
};

/// One (model, context) measurement.
struct GenResult {
  std::string model;
  int64_t context = 0;
  double prefill_ms = 0.0;
  double decode_ms = 0.0;  // median per token
  double state_prefill_bytes = 0.0, state_end_bytes = 0.0;
  double rss_mib = 0.0, peak_rss_mib = 0.0;
};

/// Feeds the 1 x n ids of `prompt` through model.step in pieces of `chunk` tokens (0 = in
/// one call) and returns the wall time in ms.
double prefill(const lat::HybridLM& model, const Tensor& prompt, int64_t chunk, lat::HybridLMState& state) {
  const int64_t n = prompt.size(1);
  const int64_t piece = chunk > 0 ? chunk : n;
  const std::vector<int64_t> ids = prompt.to_vector<int64_t>();
  const auto start = Clock::now();
  for (int64_t begin = 0; begin < n; begin += piece) {
    const int64_t len = std::min(piece, n - begin);
    const Tensor part = Tensor::from_vector(std::vector<int64_t>(ids.begin() + begin, ids.begin() + begin + len),
                                            {1, len});
    model.step(part, state);
  }
  return ms_since(start);
}

/// Prefill of `context` random ids, then `decode_steps` timed single-token steps.
GenResult bench_generation(const lat::HybridLM& model, const std::string& name, int64_t context,
                           const Options& options, lat::Generator& gen) {
  GenResult r;
  r.model = name;
  r.context = context;
  lat::HybridLMState state = model.make_states(1);
  const Tensor prompt = random_ids(context, kRandomVocab, gen);
  r.prefill_ms = prefill(model, prompt, options.prefill_chunk, state);
  r.state_prefill_bytes = state_bytes(state);
  const std::vector<int64_t> next = random_ids(options.decode_steps, kRandomVocab, gen).to_vector<int64_t>();
  std::vector<double> times;
  for (int64_t id : next) {
    const Tensor one = Tensor::from_vector(std::vector<int64_t>{id}, {1, 1});
    const auto start = Clock::now();
    model.step(one, state);
    times.push_back(ms_since(start));
  }
  // The median, not the mean: the first step after a prefill that filled the KV cache
  // buffer grows it (a copy of the whole cache), a cost of the prefill's size, not per token.
  r.decode_ms = median(times);
  r.state_end_bytes = state_bytes(state);
  r.rss_mib = current_rss_mib();
  r.peak_rss_mib = peak_rss_mib();
  return r;
}

/// The generation part: for each model, its warm-up, then its contexts in order.
void run_generation(const fs::path& config_dir, const Options& options) {
  const lat::Config hybrid_cfg = lat::load_config((config_dir / "shakespeare_hybrid.yaml").string());
  const lat::Config attn_cfg = lat::load_config((config_dir / "shakespeare_transformer.yaml").string());
  std::vector<GenModel> models;
  for (const std::string& name : options.models) {
    if (name == "hybrid") models.push_back({name, hybrid_cfg.model});
    if (name == "attention") models.push_back({name, attn_cfg.model});
    if (name == "hybrid-full") {
      lat::ModelConfig m = hybrid_cfg.model;
      m.attn.window_size = 0;
      models.push_back({name, m});
    }
  }
  // Smallest memory first, so that each row's peak RSS is mostly its own.
  auto order = [](const std::string& n) { return n == "hybrid" ? 0 : n == "hybrid-full" ? 1 : 2; };
  std::stable_sort(models.begin(), models.end(),
                   [&](const GenModel& a, const GenModel& b) { return order(a.name) < order(b.name); });

  std::printf("== Generation (batch 1, random weights, random ids, vocab %lld; prefill in pieces of %s; "
              "decode: median of %lld single-token steps) ==\n",
              static_cast<long long>(kRandomVocab),
              options.prefill_chunk > 0 ? (std::to_string(options.prefill_chunk) + " tokens").c_str() : "the whole prompt",
              static_cast<long long>(options.decode_steps));
  for (const GenModel& m : models) {
    const std::vector<std::string> layers = lat::layer_mixers(m.model);
    std::string pattern;
    for (const std::string& l : layers) pattern += (pattern.empty() ? "" : ",") + l;
    std::printf("  %-10s d_model %lld, %lld heads, layers %s%s\n", m.name.c_str(),
                static_cast<long long>(m.model.d_model), static_cast<long long>(m.model.n_heads), pattern.c_str(),
                m.model.attn.window_size > 0
                    ? (", attention window " + std::to_string(m.model.attn.window_size)).c_str()
                    : "");
  }
  std::printf("%-10s %7s %10s %11s %10s %11s %12s %12s %9s %9s\n", "model", "context", "prefill s",
              "prefill t/s", "decode ms", "decode t/s", "state MiB", "state end", "RSS MiB", "peak RSS");
  std::fflush(stdout);

  std::vector<GenResult> results;
  for (const GenModel& m : models) {
    lat::Generator gen(1337);
    const lat::HybridLM model(lat::hybrid_lm_config(m.model, kRandomVocab), gen);
    {
      // Warm-up on a throwaway state, with the prefill pieces of the smallest context: the
      // first-call costs (oneDNN primitives of those shapes, thread pool) are not its row's.
      const int64_t smallest = *std::min_element(options.contexts.begin(), options.contexts.end());
      const int64_t piece = options.prefill_chunk > 0 ? std::min(options.prefill_chunk, smallest) : smallest;
      lat::HybridLMState warm = model.make_states(1);
      prefill(model, random_ids(piece, kRandomVocab, gen), options.prefill_chunk, warm);
      for (int i = 0; i < 4; ++i) model.step(random_ids(1, kRandomVocab, gen), warm);
    }
    for (int64_t context : options.contexts) {
      const GenResult r = bench_generation(model, m.name, context, options, gen);
      std::printf("%-10s %7lld %10.2f %11.0f %10.3f %11.1f %12.3f %12.3f %9.0f %9.0f\n", r.model.c_str(),
                  static_cast<long long>(r.context), r.prefill_ms / 1e3,
                  static_cast<double>(r.context) / (r.prefill_ms / 1e3), r.decode_ms, 1e3 / r.decode_ms,
                  mib(r.state_prefill_bytes), mib(r.state_end_bytes), r.rss_mib, r.peak_rss_mib);
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  std::printf("(state MiB: every tensor of the generation state right after the prefill, KV caches as allocated; "
              "state end: after the decode steps. RSS: current; peak RSS: the process's high-water mark so far)\n");

  if (options.contexts.size() >= 2) {
    const int64_t lo = *std::min_element(options.contexts.begin(), options.contexts.end());
    const int64_t hi = *std::max_element(options.contexts.begin(), options.contexts.end());
    std::printf("decode ms/token at context %lld over context %lld:\n", static_cast<long long>(hi),
                static_cast<long long>(lo));
    for (const GenModel& m : models) {
      double at_lo = 0.0, at_hi = 0.0;
      for (const GenResult& r : results) {
        if (r.model != m.name) continue;
        if (r.context == lo) at_lo = r.decode_ms;
        if (r.context == hi) at_hi = r.decode_ms;
      }
      std::printf("  %-10s %.3f / %.3f ms = %.2fx\n", m.name.c_str(), at_hi, at_lo, at_hi / at_lo);
    }
  }
  std::printf("\n");
}

// ---- training ----------------------------------------------------------------------------

/// `config`'s data.path as found: as it is (relative to the working directory, as the
/// trainer reads it), else relative to `repo_root`; nullopt when neither exists.
std::optional<std::string> find_data(const lat::Config& config, const fs::path& repo_root) {
  std::error_code ec;
  const fs::path path = config.data.path;
  if (fs::is_regular_file(path, ec)) return path.string();
  if (path.is_relative() && fs::is_regular_file(repo_root / path, ec)) return (repo_root / path).string();
  return std::nullopt;
}

/// `n` child processes that spin on the CPU: the other jobs of a shared machine. They start
/// stopped; resume() lets them run and pause() stops them again, each returning once every
/// child has changed state; the destructor kills them. A child also dies with this process
/// (PR_SET_PDEATHSIG), should it end without unwinding. Throws std::runtime_error when fork fails.
class Competitors {
 public:
  explicit Competitors(int n) {
    const pid_t parent = getpid();
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid < 0) throw std::runtime_error(std::string("--competing: fork: ") + std::strerror(errno));
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0);
        volatile uint64_t spins = 0;
        for (;;) spins = spins + 1;
      }
      pids_.push_back(pid);
    }
    pause();
  }
  ~Competitors() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  Competitors(const Competitors&) = delete;
  Competitors& operator=(const Competitors&) = delete;

  int count() const { return static_cast<int>(pids_.size()); }
  void resume() { signal_and_wait(SIGCONT, WCONTINUED); }
  void pause() { signal_and_wait(SIGSTOP, WUNTRACED); }

 private:
  void signal_and_wait(int sig, int wait_flag) {
    for (pid_t pid : pids_) {
      kill(pid, sig);
      int status = 0;
      waitpid(pid, &status, wait_flag);
    }
  }
  std::vector<pid_t> pids_;
};

/// One training row: the config's name, the variant, its precision and step time.
struct TrainResult {
  std::string name;
  lat::Precision precision = lat::Precision::fp32;
  int64_t batch = 0, block = 0, accum = 0;
  double step_ms = 0.0;         // median
  double loaded_step_ms = 0.0;  // median with the competitors running (0: no loaded case)
  std::string data;      // where the batches came from
  double params_m = 0.0;
  std::string optimizer;  // TrainOptimizer::type()
  std::optional<lat::bench::ModelFlops> flops;  // per token (bench/model_flops.h); nullopt: ...
  std::string uncounted;                         // ... for this mixer kind
  double peak_rss_mib = 0.0;  // the measuring process's high-water mark after the row's steps
};

/// Whether a timed step runs with the competitors stopped or running.
enum class Load { idle, loaded };

/// One model in training at one precision: its own weights (the same initial values for
/// every precision: one seed), optimizer and step times.
struct Trainee {
  lat::Precision precision;
  std::unique_ptr<lat::HybridLM> model;
  std::unique_ptr<lat::TrainOptimizer> optimizer;
  std::vector<double> times, loaded_times;
};

/// Times `warmup + steps` trainer steps of `config` at each of `precisions` and returns, per
/// precision, the median of the last `steps`. The precisions take turns step by step on the
/// same batches, so that a change in the machine's load falls on all of them alike and their
/// ratio holds even where absolute figures drift. With competitors, the same steps run again
/// (the loaded median) while the competitors run.
std::vector<TrainResult> bench_training(const std::string& name, const lat::Config& config,
                                        const fs::path& repo_root, const std::vector<lat::Precision>& precisions,
                                        const Options& options, Competitors& competitors) {
  const lat::TrainConfig& train = config.train;
  TrainResult r;
  r.name = name;
  r.batch = train.batch_size;
  r.block = config.data.block_size;
  r.accum = train.grad_accum;

  // The trainer's batches when the data is here, else random ids of the same shape.
  std::optional<lat::LoadedData> data;
  std::unique_ptr<lat::BatchLoader> loader;
  int64_t vocab = kRandomVocab;
  if (const std::optional<std::string> path = find_data(config, repo_root)) {
    lat::DataOptions d = lat::data_options(config);
    d.path = *path;
    data.emplace(lat::load_data(d));
    vocab = lat::run_vocab_size(config.model, *data);
    loader = std::make_unique<lat::BatchLoader>(data->dataset, static_cast<uint64_t>(train.seed));
    r.data = *path + " (" + data->format + ", vocab " + std::to_string(vocab) + ")";
  } else {
    r.data = "random ids in [0, " + std::to_string(kRandomVocab) + ") (" + config.data.path + " not found)";
  }
  lat::Generator batch_gen(static_cast<uint64_t>(train.seed));
  auto batch = [&](int64_t step, int64_t micro) {
    if (loader) return loader->train_batch(step, micro, train.batch_size);
    const Tensor window = random_ids(train.batch_size * (r.block + 1), kRandomVocab, batch_gen);
    const std::vector<int64_t> ids = window.to_vector<int64_t>();
    std::vector<int64_t> inputs, targets;
    for (int64_t b = 0; b < train.batch_size; ++b) {
      const auto row = ids.begin() + b * (r.block + 1);
      inputs.insert(inputs.end(), row, row + r.block);
      targets.insert(targets.end(), row + 1, row + r.block + 1);
    }
    lat::Batch out;
    out.inputs = Tensor::from_vector(inputs, {train.batch_size, r.block});
    out.targets = Tensor::from_vector(targets, {train.batch_size, r.block});
    out.tokens = train.batch_size * r.block;
    return out;
  };

  std::vector<Trainee> trainees;
  for (lat::Precision precision : precisions) {
    lat::Generator gen(static_cast<uint64_t>(train.seed));
    Trainee t{precision, std::make_unique<lat::HybridLM>(lat::hybrid_lm_config(config.model, vocab), gen), nullptr,
              {}, {}};
    t.optimizer = std::make_unique<lat::TrainOptimizer>(train, t.model->named_parameters());
    r.params_m = static_cast<double>(t.model->num_parameters()) / 1e6;
    r.flops = lat::bench::training_flops_per_token(*t.model, r.block, &r.uncounted);
    r.optimizer = t.optimizer->type();
    trainees.push_back(std::move(t));
  }
  const lat::LrSchedule schedule{train.schedule, train.lr, train.min_lr, train.warmup, train.max_steps};
  schedule.validate();

  // The loaded steps run as a block of their own, with their own warm-up, while the
  // competitors run throughout: a competitor resumed for each step would get the scheduler's
  // wake-up credit every time, which an outside process does not (measured: passive's loaded
  // tokens/s 20% under those beside an outside `yes`).
  for (const Load load : competitors.count() > 0 ? std::vector<Load>{Load::idle, Load::loaded}
                                                 : std::vector<Load>{Load::idle}) {
    if (load == Load::loaded) competitors.resume();
    for (int64_t step = 1; step <= options.warmup_steps + options.steps; ++step) {
      // Batches are drawn outside the timed region, as they are tiny next to a step.
      std::vector<lat::Batch> micro;
      int64_t tokens = 0;
      for (int64_t m = 0; m < train.grad_accum; ++m) {
        micro.push_back(batch(step, m));
        tokens += micro.back().tokens;
      }
      for (Trainee& t : trainees) {
        const lat::PrecisionGuard precision(t.precision);
        const auto start = Clock::now();
        const double start_cpu = cpu_ms();
        // Run::train_step of train/run/run_loop.cpp, one rank.
        const double loss = lat::accumulate_gradients(*t.model, micro, tokens, lat::Device::cpu());
        const lat::GradNorm norm = t.optimizer->clip_grad_norm(train.grad_clip);
        if (norm.finite)
          t.optimizer->step(schedule.at(step));
        else
          t.optimizer->zero_grad();
        const double ms = options.cpu_time ? cpu_ms() - start_cpu : ms_since(start);
        if (!std::isfinite(loss))
          throw std::runtime_error(name + ": non-finite training loss at step " + std::to_string(step) + " in " +
                                   lat::precision_name(t.precision));
        if (step > options.warmup_steps) (load == Load::idle ? t.times : t.loaded_times).push_back(ms);
      }
    }
    if (load == Load::loaded) competitors.pause();
  }
  std::vector<TrainResult> results;
  for (const Trainee& t : trainees) {
    r.precision = t.precision;
    r.step_ms = median(t.times);
    r.loaded_step_ms = t.loaded_times.empty() ? 0.0 : median(t.loaded_times);
    r.peak_rss_mib = peak_rss_mib();
    results.push_back(r);
  }
  return results;
}

/// The main job with its text packed as documents (data.packing), against "hybrid".
constexpr const char* kPackedRow = "hybrid packed";

/// One training row: its printed name, its config file and the --set overrides on it.
struct TrainingRow {
  std::string name, file;
  std::vector<std::string> overrides;
};

/// Overrides on shakespeare_hybrid.yaml for a model of `d_model` (heads of 64, chunks of 64)
/// with `layers`, trained on batches of `batch` x `block` tokens; the attention layers see the
/// last `window` tokens.
std::vector<std::string> sized_overrides(int64_t d_model, const std::string& layers, int64_t block, int64_t batch,
                                         int64_t window) {
  const int64_t n_layers = static_cast<int64_t>(parse_name_list(layers).size());
  return {"model.d_model=" + std::to_string(d_model), "model.n_layers=" + std::to_string(n_layers),
          "model.n_heads=" + std::to_string(d_model / 64), "model.layers=\"" + layers + "\"",
          "model.linear.chunk_size=" + std::to_string(kSizedChunk), "model.attn.window_size=" + std::to_string(window),
          "data.block_size=" + std::to_string(block), "train.batch_size=" + std::to_string(batch),
          "train.grad_accum=1"};
}

/// `group` repeated `n` times, comma-separated.
std::string repeated(const std::string& group, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i > 0 ? "," : "") + group;
  return out;
}

/// The training rows of `preset` (main: the configs as they are; 25M and 100M: the main
/// job's hybrid at those sizes, attention over the whole block as in the main job), in the
/// printed order. bench_torch_peer.py --preset has the same shapes.
std::vector<TrainingRow> all_training_rows(const std::string& preset) {
  if (preset == "25M")
    return {{"25M", "shakespeare_hybrid.yaml", sized_overrides(512, repeated("gdn,gdn,gdn,attn", 2), 512, 4, 512)}};
  if (preset == "100M")
    return {{"100M", "shakespeare_hybrid.yaml", sized_overrides(768, repeated("gdn,gdn,gdn,attn", 3), 1024, 4, 1024)}};
  const std::vector<std::string> nanogpt = {"data.block_size=64", "train.batch_size=12", "train.grad_accum=1"};
  return {
      {"hybrid", "shakespeare_hybrid.yaml", {}},
      {kPackedRow, "shakespeare_hybrid.yaml", {"data.doc_separator=\"\\n\\n\"", "data.packing=true"}},
      {"hybrid nanoGPT-size", "shakespeare_hybrid.yaml", nanogpt},
      {"transformer", "shakespeare_transformer.yaml", {}},
      {"transformer nanoGPT-size", "shakespeare_transformer.yaml", nanogpt},
      {"granite", "shakespeare_granite.yaml", {}},
  };
}

/// The long-context rows at the 25M width (d_model 512, 8 layers, 8 heads of 64): for each
/// block of `blocks`, gdn only and the hybrid whose attention layers have a window of 512,
/// at kLongContextTokens tokens per step (batch = that / block).
std::vector<TrainingRow> long_context_rows(const std::vector<int64_t>& blocks) {
  std::vector<TrainingRow> rows;
  for (int64_t block : blocks) {
    const int64_t batch = kLongContextTokens / block;
    const std::string suffix = " block " + std::to_string(block);
    rows.push_back({"gdn" + suffix, "shakespeare_hybrid.yaml", sized_overrides(512, repeated("gdn", 8), block, batch, 0)});
    rows.push_back({"hybrid-swa" + suffix, "shakespeare_hybrid.yaml",
                    sized_overrides(512, repeated("gdn,gdn,gdn,attn", 2), block, batch, 512)});
  }
  return rows;
}

/// A row's name as --rows spells it: '-' for each space.
std::string row_flag_name(std::string name) {
  std::replace(name.begin(), name.end(), ' ', '-');
  return name;
}

/// The rows --rows picks (all when it is empty), in the printed order. Throws
/// std::runtime_error naming an unknown row and listing the known ones.
std::vector<TrainingRow> selected_training_rows(const Options& options) {
  const std::vector<std::string>& names = options.rows;
  const std::vector<TrainingRow> all =
      options.long_context ? long_context_rows(options.blocks) : all_training_rows(options.preset);
  for (const std::string& name : names)
    if (std::none_of(all.begin(), all.end(), [&](const TrainingRow& row) { return row_flag_name(row.name) == name; })) {
      std::string known;
      for (const TrainingRow& row : all) known += (known.empty() ? "" : ", ") + row_flag_name(row.name);
      throw std::invalid_argument("--rows: unknown row '" + name + "' (" + known + ")");
    }
  std::vector<TrainingRow> rows;
  for (const TrainingRow& row : all)
    if (names.empty() || std::find(names.begin(), names.end(), row_flag_name(row.name)) != names.end())
      rows.push_back(row);
  return rows;
}

/// The matrix-product peak of `precision` in FLOP/s, the MFU's denominator: lat::matmul of
/// two 1024 x 1024 f32 matrices (under bf16 its bf16 path: inputs rounded, fp32
/// accumulation), the best of 20 calls after a warm-up, at this process's thread count, on the
/// rows' clock (process CPU time with cpu_time, else wall time), so that a row's MFU compares
/// times of one kind.
double product_peak(lat::Precision precision, bool cpu_time) {
  constexpr int64_t n = 1024;
  constexpr int calls = 20;
  lat::Generator gen(1);
  const Tensor a = Tensor::randn({n, n}, gen), b = Tensor::randn({n, n}, gen);
  const lat::PrecisionGuard guard(precision);
  lat::matmul(a, b);  // oneDNN's primitive for this shape is made here
  double best_ms = 0.0;
  for (int i = 0; i < calls; ++i) {
    const auto start = Clock::now();
    const double start_cpu = cpu_ms();
    lat::matmul(a, b);
    const double ms = cpu_time ? cpu_ms() - start_cpu : ms_since(start);
    best_ms = i == 0 ? ms : std::min(best_ms, ms);
  }
  return 2.0 * static_cast<double>(n * n * n) / (best_ms / 1e3);
}

/// A row's results as text lines of tab-separated fields, to come back from the process
/// that measured them (run_row_in_process): the data source, then one line per precision.
std::string serialize_results(const std::vector<TrainResult>& results) {
  std::string text = results.front().data + "\n";
  char line[512];
  for (const TrainResult& r : results) {
    std::snprintf(line, sizeof line, "%s\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%d\t%s\t%s\n",
                  lat::precision_name(r.precision), r.step_ms, r.loaded_step_ms, r.params_m, r.peak_rss_mib,
                  r.flops ? r.flops->forward : 0.0, r.flops ? r.flops->backward : 0.0, r.flops ? 1 : 0,
                  r.optimizer.c_str(), r.uncounted.c_str());
    text += line;
  }
  return text;
}

/// The inverse of serialize_results, on a copy of the row's `shape` (name, batch, block,
/// accum). Throws std::runtime_error on a malformed text.
std::vector<TrainResult> parse_results(const std::string& text, const TrainResult& shape) {
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (lines.size() < 2) throw std::runtime_error(shape.name + ": the measuring process gave no results: '" + text + "'");
  std::vector<TrainResult> results;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f;
    for (size_t start = 0; start <= lines[i].size();) {
      const size_t end = std::min(lines[i].find('\t', start), lines[i].size());
      f.push_back(lines[i].substr(start, end - start));
      start = end + 1;
    }
    if (f.size() != 10) throw std::runtime_error(shape.name + ": malformed result line '" + lines[i] + "'");
    TrainResult r = shape;
    r.data = lines[0];
    r.precision = lat::parse_precision(f[0]);
    r.step_ms = std::stod(f[1]);
    r.loaded_step_ms = std::stod(f[2]);
    r.params_m = std::stod(f[3]);
    r.peak_rss_mib = std::stod(f[4]);
    if (f[7] == "1") r.flops = lat::bench::ModelFlops{std::stod(f[5]), std::stod(f[6])};
    r.optimizer = f[8];
    r.uncounted = f[9];
    results.push_back(r);
  }
  return results;
}

/// argv[1] of a process that measures one training row (then: the row's name, then the
/// benchmark's own arguments): it prints serialize_results of that row.
constexpr const char* kRowChild = "--row-child";

/// The precisions of --precision that this CPU runs (bf16 needs AVX512-BF16), printing a line
/// for each one skipped when `say_skipped`.
std::vector<lat::Precision> runnable_precisions(const Options& options, bool say_skipped) {
  std::vector<lat::Precision> precisions;
  for (lat::Precision p : options.precisions) {
    if (lat::bf16_supported(lat::Device::cpu()) || p == lat::Precision::fp32)
      precisions.push_back(p);
    else if (say_skipped)
      std::printf("precision %s skipped: this CPU has no AVX512-BF16 (or DNNL_MAX_CPU_ISA caps it)\n",
                  lat::precision_name(p));
  }
  return precisions;
}

/// What a child process of this executable printed, and how it ended (waitpid's status).
struct ChildOutput {
  std::string text;
  int status = 0;
  bool ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  /// "exit N" or "signal N".
  std::string how() const {
    return WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status)) : "signal " + std::to_string(WTERMSIG(status));
  }
};

/// Runs this executable (/proc/self/exe) again with `args` (argv[0] first), its stdout into the
/// returned text; `prepare` runs in the child before the exec (its environment). A new process,
/// not a fork's copy, because libgomp's threads do not survive a fork. Throws std::runtime_error
/// naming `what` when the pipe or the fork fails.
ChildOutput run_self(const std::string& what, std::vector<std::string> args, const std::function<void()>& prepare = {}) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(what + ": pipe: " + std::strerror(errno));
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(what + ": fork: " + std::strerror(errno));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    if (prepare) prepare();
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fds[1]);
  ChildOutput out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, &out.status, 0);
  return out;
}

/// bench_training of one row in a process of its own, this executable started again (a
/// forked copy could not use OpenMP: libgomp's threads do not survive a fork), so that the
/// row's peak RSS is its own. Throws std::runtime_error when that process fails (its error
/// went to stderr).
std::vector<TrainResult> run_row_in_process(const TrainingRow& row, const lat::Config& config,
                                            const Options& options) {
  std::vector<std::string> args = {"bench_model", kRowChild, row_flag_name(row.name)};
  args.insert(args.end(), options.args.begin(), options.args.end());
  const ChildOutput child = run_self("training", args);
  if (!child.ok())
    throw std::runtime_error(row.name + ": the row's measuring process failed (" + child.how() + ")");
  TrainResult shape;
  shape.name = row.name;
  shape.batch = config.train.batch_size;
  shape.block = config.data.block_size;
  shape.accum = config.train.grad_accum;
  return parse_results(child.text, shape);
}

/// The row-measuring process (kRowChild): the row named `name` (as --rows spells it) of
/// `options`, its results printed by serialize_results.
void measure_row(const std::string& name, const Options& options) {
  const fs::path config_dir = find_config_dir(options.config_dir);
  if (options.threads > 0) lat::set_num_threads(options.threads);
  lat::keep_freed_memory();
  Options one = options;
  one.rows = {name};
  const TrainingRow row = selected_training_rows(one).front();
  const lat::Config config = lat::load_config((config_dir / row.file).string(), row.overrides);
  Competitors none(0);
  const std::vector<TrainResult> results = bench_training(row.name, config, config_dir.parent_path(),
                                                          runnable_precisions(options, false), options, none);
  std::fputs(serialize_results(results).c_str(), stdout);
}

/// The training part: both configs as they are and at nanoGPT size, at each precision of
/// --precision that this CPU runs (bf16 needs AVX512-BF16), with the ratio of each to the first.
void run_training(const fs::path& config_dir, const Options& options) {
  lat::keep_freed_memory();
  const fs::path repo_root = config_dir.parent_path();
  const std::vector<TrainingRow> rows = selected_training_rows(options);
  const std::vector<lat::Precision> precisions = runnable_precisions(options, true);
  if (precisions.empty()) return;
  // The product peak, measured again around every row (the best before and after it): this
  // VM's cores change speed between periods, and a row's MFU divides by its own period's peak.
  std::map<lat::Precision, double> peak;  // FLOP/s
  const auto measure_peaks = [&](bool keep_best) {
    for (lat::Precision p : precisions) {
      const double now = product_peak(p, options.cpu_time);
      peak[p] = keep_best ? std::max(peak[p], now) : now;
    }
  };
  measure_peaks(false);
  Competitors competitors(options.competing);
  std::printf("== Training (trainer steps: forward + cross-entropy + backward + clip + optimizer update; "
              "median of %lld steps after %lld warm-up; precisions take turns step by step; %s time) ==\n",
              static_cast<long long>(options.steps), static_cast<long long>(options.warmup_steps),
              options.cpu_time ? "CPU" : "wall");
  std::printf("product peak at start (lat::matmul 1024^3, best of 20, %d threads, %s time; again around each "
              "row, its column):", omp_get_max_threads(), options.cpu_time ? "CPU" : "wall");
  for (lat::Precision p : precisions) std::printf(" %s %.1f GFLOP/s", lat::precision_name(p), peak[p] / 1e9);
  std::printf("\n");
  if (competitors.count() > 0)
    std::printf("loaded: each step also runs while %d spinning child process%s compete%s for the cores\n",
                competitors.count(), competitors.count() == 1 ? "" : "es", competitors.count() == 1 ? "s" : "");
  std::printf("%-26s %5s %8s %6s %6s %7s %6s %11s %10s %7s", "config", "prec", "params M", "batch", "block",
              "accum", "opt", "ms/step", "tokens/s", "ratio");
  std::printf(" %9s %6s %9s", "peak RSS", "MFU", "peak GF/s");
  if (competitors.count() > 0) std::printf(" %11s %12s", "loaded t/s", "loaded/idle");
  std::printf("\n");
  std::fflush(stdout);
  std::vector<std::string> sources, uncounted;
  std::map<std::string, double> first_step_ms;  // row name -> ms/step at the first precision
  for (const TrainingRow& row : rows) {
    const lat::Config config = lat::load_config((config_dir / row.file).string(), row.overrides);
    if (&row != &rows.front()) measure_peaks(false);
    // With competitors the rows run here: they are this process's children to stop and resume.
    const std::vector<TrainResult> results =
        competitors.count() > 0 ? bench_training(row.name, config, repo_root, precisions, options, competitors)
                                : run_row_in_process(row, config, options);
    measure_peaks(true);
    first_step_ms[row.name] = results.front().step_ms;
    for (const TrainResult& r : results) {
      const double tokens = static_cast<double>(r.batch * r.block * r.accum);
      std::printf("%-26s %5s %8.3f %6lld %6lld %7lld %6s %11.2f %10.0f %6.2fx", r.name.c_str(),
                  lat::precision_name(r.precision), r.params_m, static_cast<long long>(r.batch),
                  static_cast<long long>(r.block), static_cast<long long>(r.accum), r.optimizer.c_str(), r.step_ms,
                  tokens / (r.step_ms / 1e3), results.front().step_ms / r.step_ms);
      std::printf(" %9.0f", r.peak_rss_mib);
      if (r.flops)
        std::printf(" %5.1f%%", 100.0 * r.flops->total() * tokens / (r.step_ms / 1e3) / peak[r.precision]);
      else
        std::printf(" %6s", "-");
      std::printf(" %9.1f", peak[r.precision] / 1e9);
      if (r.loaded_step_ms > 0.0)
        std::printf(" %11.0f %11.0f%%", tokens / (r.loaded_step_ms / 1e3), 100.0 * r.step_ms / r.loaded_step_ms);
      std::printf("\n");
      std::fflush(stdout);
    }
    const std::string& kind = results.front().uncounted;
    if (!kind.empty() && std::find(uncounted.begin(), uncounted.end(), kind) == uncounted.end())
      uncounted.push_back(kind);
    if (std::find(sources.begin(), sources.end(), results.front().data) == sources.end())
      sources.push_back(results.front().data);
  }
  for (const std::string& s : sources) std::printf("batches: %s\n", s.c_str());
  if (first_step_ms.count("hybrid") && first_step_ms.count(kPackedRow))
    std::printf("packing (documents split at blank lines, cu_seqlens in every mixer): %s at %.2fx the tokens/s of "
                "hybrid\n",
                kPackedRow, first_step_ms["hybrid"] / first_step_ms[kPackedRow]);
  std::printf("(ratio: tokens/s over those of the row's first precision, %s, measured in the same steps)\n",
              lat::precision_name(precisions.front()));
  if (competitors.count() > 0)
    std::printf("(peak RSS: this process's high-water mark so far, rows in the printed order)\n");
  else
    std::printf("(peak RSS: the row's own process, this executable started again for it, with every precision's "
                "model and optimizer)\n");
  std::string kinds;
  for (const std::string& k : uncounted) kinds += (kinds.empty() ? "" : ", ") + k;
  std::printf("(MFU: model FLOPs per token, docs/MFU.md, x tokens/s over the product peak of the precision, "
              "the better of those measured right before and after the row: peak GF/s%s)\n",
              kinds.empty() ? "" : ("; -: the count does not know " + kinds).c_str());
  if (competitors.count() > 0)
    std::printf("(loaded/idle: tokens/s with the competitors running over those with them stopped, right "
                "before)\n");
  std::printf("\n");
}

// ---- inference under load ----------------------------------------------------------------

/// argv[1] of a measuring process of part 4 (then: config dir, threads (0: OpenMP's
/// default), --steps, --decode-steps).
constexpr const char* kInferenceChild = "--inference-child";

/// Part 4's measurement in this process: prints "EVAL_TOKENS_PER_S GENERATE_TOKENS_PER_S".
void measure_inference(const fs::path& config_dir, int threads, int64_t steps, int64_t decode_steps) {
  if (threads > 0) lat::set_num_threads(threads);
  const lat::Config config = lat::load_config((config_dir / "shakespeare_hybrid.yaml").string());
  lat::Generator gen(1337);
  const lat::HybridLM model(lat::hybrid_lm_config(config.model, kRandomVocab), gen);
  const int64_t B = config.train.batch_size, T = config.data.block_size;
  const Tensor inputs = random_ids(B * T, kRandomVocab, gen).reshape({B, T});
  const Tensor targets = random_ids(B * T, kRandomVocab, gen).reshape({B * T});
  std::vector<double> times;
  for (int64_t i = 0; i <= steps; ++i) {  // the first is the warm-up
    const auto start = Clock::now();
    const lat::NoGradGuard no_grad;
    lat::cross_entropy(model.forward(inputs).reshape({B * T, kRandomVocab}), targets).item();
    if (i > 0) times.push_back(ms_since(start));
  }
  const double eval_tokens_per_s = static_cast<double>(B * T) / (median(times) / 1e3);
  const lat::SamplingOptions greedy{0.0, 0, 1.0};
  lat::generate_tokens(model, {0}, 4, greedy, gen);  // warm-up
  const auto start = Clock::now();
  lat::generate_tokens(model, {0}, decode_steps, greedy, gen);
  const double generate_tokens_per_s = static_cast<double>(decode_steps) / (ms_since(start) / 1e3);
  std::printf("%.1f %.1f\n", eval_tokens_per_s, generate_tokens_per_s);
}

/// Runs measure_inference in a fresh process (this executable) with OMP_WAIT_POLICY set to
/// `policy`, or unset (and GOMP_SPINCOUNT unset) when it is empty; returns its two figures.
/// Throws std::runtime_error when the process fails.
std::pair<double, double> inference_in_process(const std::string& policy, const fs::path& config_dir,
                                               const Options& options) {
  const ChildOutput child = run_self(
      "inference",
      {"bench_model", kInferenceChild, config_dir.string(), std::to_string(options.threads),
       std::to_string(options.steps), std::to_string(options.decode_steps)},
      [&] {
        if (policy.empty()) {
          unsetenv("OMP_WAIT_POLICY");
          unsetenv("GOMP_SPINCOUNT");
        } else {
          setenv("OMP_WAIT_POLICY", policy.c_str(), 1);
        }
      });
  double eval = 0.0, generate = 0.0;
  if (!child.ok() || std::sscanf(child.text.c_str(), "%lf %lf", &eval, &generate) != 2)
    throw std::runtime_error("inference: the measuring process (OMP_WAIT_POLICY=" +
                             (policy.empty() ? std::string("unset") : policy) + ") failed: '" + child.text + "'");
  return {eval, generate};
}

/// Part 4: eval and generate tokens/s under load, libgomp's default wait policy vs passive.
void run_inference_under_load(const fs::path& config_dir, const Options& options) {
  Competitors competitors(std::max(1, options.competing));
  const lat::Config config = lat::load_config((config_dir / "shakespeare_hybrid.yaml").string());
  std::printf("== Inference under load (hybrid, random weights; eval: loss of %lld x %lld tokens, median of %lld; "
              "generate: %lld greedy tokens; each policy in a fresh process while %d spinning child process%s "
              "compete%s for the cores) ==\n",
              static_cast<long long>(config.train.batch_size), static_cast<long long>(config.data.block_size),
              static_cast<long long>(options.steps), static_cast<long long>(options.decode_steps), competitors.count(),
              competitors.count() == 1 ? "" : "es", competitors.count() == 1 ? "s" : "");
  std::printf("%-28s %12s %15s\n", "wait policy", "eval t/s", "generate t/s");
  std::fflush(stdout);
  competitors.resume();
  const std::pair<std::string, std::string> policies[] = {{"", "libgomp's default"}, {"passive", "passive"}};
  for (const auto& [policy, label] : policies) {
    const auto [eval, generate] = inference_in_process(policy, config_dir, options);
    std::printf("%-28s %12.0f %15.1f\n", label.c_str(), eval, generate);
    std::fflush(stdout);
  }
  competitors.pause();
  std::printf("(lat eval and lat generate choose passive themselves when other processes keep half a core or more "
              "busy at start, as lat train does)\n\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // A measuring process of part 4, started with its wait policy in its environment.
    if (argc == 6 && std::string(argv[1]) == kInferenceChild) {
      using lat::bench::parse_int_flag;
      measure_inference(argv[2], static_cast<int>(parse_int_flag(argv[3], "threads", 0, lat::bench::kMaxThreads)),
                        parse_int_flag(argv[4], "--steps", 1, kMaxSteps),
                        parse_int_flag(argv[5], "--decode-steps", 1, kMaxSteps));
      return 0;
    }
    // A process that measures one training row, started by run_row_in_process.
    if (argc >= 3 && std::string(argv[1]) == kRowChild) {
      measure_row(argv[2], parse_options(argc - 2, argv + 2));
      return 0;
    }
    const Options options = parse_options(argc, argv);
    selected_training_rows(options);  // an unknown --rows name fails before any work
    const fs::path config_dir = find_config_dir(options.config_dir);
    // As `lat train` does, before any OpenMP work (this may restart the benchmark).
    const std::string wait_policy = lat::choose_wait_policy(argv);
    if (options.threads > 0) lat::set_num_threads(options.threads);
    std::printf("bench_model: configs from %s; OpenMP threads %d (omp_get_max_threads); load average %s\n%s\n\n",
                config_dir.c_str(), omp_get_max_threads(), load_average().c_str(), wait_policy.c_str());
    // The long-context rows are a training measurement of their own.
    if (!options.skip_generate && !options.long_context) run_generation(config_dir, options);
    if (!options.skip_train) run_training(config_dir, options);
    if (!options.skip_inference && !options.long_context) run_inference_under_load(config_dir, options);
    std::printf("load average at the end: %s\n", load_average().c_str());
  } catch (const std::invalid_argument& e) {  // bad usage, as lat's own exit code 2
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
