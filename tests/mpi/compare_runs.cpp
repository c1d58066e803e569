// Compares two run directories of `lat train` for the MPI tests (tests/mpi/train_ranks.sh):
// their metrics.jsonl (the same records: steps, tokens_seen; losses within a relative
// tolerance) and their latest checkpoints (step, world_size, every parameter within an
// absolute tolerance). Prints the largest differences found; exits 1 when a check fails.
//
//   compare_runs DIR_A DIR_B --loss-rtol R --param-atol A [--world-sizes NA NB]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/files/checkpoint.h"
#include "train/files/run_dir.h"

namespace {

int failures = 0;

void fail(const std::string& what) {
  ++failures;
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

std::vector<nlohmann::json> read_metrics(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir + "/metrics.jsonl");
  if (!in) fail("cannot read " + dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// Record by record: the same keys in the same order of steps, tokens_seen equal, loss and
// val_loss within loss_rtol. Returns the largest relative loss difference.
double compare_metrics(const std::string& a_dir, const std::string& b_dir, double loss_rtol) {
  const std::vector<nlohmann::json> a = read_metrics(a_dir), b = read_metrics(b_dir);
  if (a.size() != b.size())
    fail("metrics.jsonl: " + std::to_string(a.size()) + " records in " + a_dir + ", " + std::to_string(b.size()) +
         " in " + b_dir);
  double worst = 0.0;
  int64_t losses = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const std::string where = "metrics.jsonl record " + std::to_string(i + 1);
    if (a[i]["step"] != b[i]["step"]) {
      fail(where + ": step " + a[i]["step"].dump() + " vs " + b[i]["step"].dump());
      continue;
    }
    for (const char* key : {"loss", "val_loss"}) {
      if (a[i].contains(key) != b[i].contains(key)) fail(where + ": " + key + " in one run only");
      if (!a[i].contains(key) || !b[i].contains(key)) continue;
      const double d = relative(a[i][key].get<double>(), b[i][key].get<double>());
      worst = std::max(worst, d);
      ++losses;
      if (!(d <= loss_rtol))
        fail(where + " (step " + a[i]["step"].dump() + "): " + key + " " + a[i][key].dump() + " vs " +
             b[i][key].dump() + ", relative difference " + std::to_string(d));
    }
    if (a[i].contains("tokens_seen") && a[i]["tokens_seen"] != b[i]["tokens_seen"])
      fail(where + ": tokens_seen " + a[i]["tokens_seen"].dump() + " vs " + b[i]["tokens_seen"].dump());
  }
  std::printf("metrics: %zu records, %lld losses compared, max relative loss difference %.3g (tolerance %.3g)\n",
              a.size(), static_cast<long long>(losses), worst, loss_rtol);
  return worst;
}

void compare_checkpoints(const std::string& a_dir, const std::string& b_dir, double param_atol,
                         const std::vector<int64_t>& world_sizes) {
  const lat::Checkpoint a = lat::load_checkpoint(lat::resolve_checkpoint(a_dir));
  const lat::Checkpoint b = lat::load_checkpoint(lat::resolve_checkpoint(b_dir));
  if (a.step != b.step) fail("checkpoint step " + std::to_string(a.step) + " vs " + std::to_string(b.step));
  if (a.tokens_seen != b.tokens_seen) fail("checkpoint tokens_seen differ");
  if (!world_sizes.empty() && (a.world_size != world_sizes[0] || b.world_size != world_sizes[1]))
    fail("checkpoint world_size " + std::to_string(a.world_size) + ", " + std::to_string(b.world_size) +
         "; expected " + std::to_string(world_sizes[0]) + ", " + std::to_string(world_sizes[1]));
  std::map<std::string, lat::Tensor> b_params(b.model.begin(), b.model.end());
  if (a.model.size() != b.model.size()) fail("checkpoints hold different numbers of parameters");
  double worst = 0.0, worst_rel = 0.0;
  std::string worst_name;
  int64_t elements = 0;
  for (const auto& [name, ta] : a.model) {
    auto it = b_params.find(name);
    if (it == b_params.end()) {
      fail("parameter " + name + " missing in " + b_dir);
      continue;
    }
    const std::vector<float> va = ta.to_vector<float>(), vb = it->second.to_vector<float>();
    if (va.size() != vb.size()) {
      fail("parameter " + name + ": sizes differ");
      continue;
    }
    double diff2 = 0.0, norm2 = 0.0;
    for (size_t i = 0; i < va.size(); ++i) {
      const double d = std::abs(static_cast<double>(va[i]) - static_cast<double>(vb[i]));
      diff2 += d * d;
      norm2 += static_cast<double>(vb[i]) * vb[i];
      if (d > worst || std::isnan(d)) {
        worst = std::isnan(d) ? INFINITY : d;
        worst_name = name;
      }
    }
    worst_rel = std::max(worst_rel, std::sqrt(diff2) / std::max(std::sqrt(norm2), 1e-30));
    elements += static_cast<int64_t>(va.size());
  }
  std::printf("parameters at step %lld: %zu tensors, %lld elements, max abs difference %.3g (%s; tolerance %.3g), "
              "max per-tensor relative difference %.3g\n",
              static_cast<long long>(a.step), a.model.size(), static_cast<long long>(elements), worst,
              worst_name.empty() ? "-" : worst_name.c_str(), param_atol, worst_rel);
  if (!(worst <= param_atol)) fail("parameters differ by " + std::to_string(worst) + " in " + worst_name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: compare_runs DIR_A DIR_B --loss-rtol R --param-atol A [--world-sizes NA NB]\n");
    return 2;
  }
  const std::string a_dir = argv[1], b_dir = argv[2];
  double loss_rtol = 0.0, param_atol = 0.0;
  std::vector<int64_t> world_sizes;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--loss-rtol" && i + 1 < argc) {
      loss_rtol = std::atof(argv[++i]);
    } else if (arg == "--param-atol" && i + 1 < argc) {
      param_atol = std::atof(argv[++i]);
    } else if (arg == "--world-sizes" && i + 2 < argc) {
      world_sizes = {std::atoll(argv[i + 1]), std::atoll(argv[i + 2])};
      i += 2;
    } else {
      std::fprintf(stderr, "compare_runs: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  try {
    compare_metrics(a_dir, b_dir, loss_rtol);
    compare_checkpoints(a_dir, b_dir, param_atol, world_sizes);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  return failures > 0 ? 1 : 0;
}
