// metrics.jsonl writer; nlohmann's ordered_json keeps the keys in insertion order and writes
// doubles in their shortest round-trip form (so logged losses compare bit for bit).
#include "train/run/metrics.h"

#include <cmath>
#include <numbers>

#include <nlohmann/json.hpp>

#include "lat/error.h"
#include "train/run/signals.h"

namespace lat {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), out_(path, std::ios::app) {
  LAT_CHECK(out_.good(), "MetricsWriter: cannot open '" << path << "' for appending");
}

void MetricsWriter::log(const LogRecord& r) {
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;  // NaN and inf become null
  j["tokens_seen"] = r.tokens_seen;
  j["tokens_per_s"] = r.tokens_per_s;
  j["time_s"] = r.time_s;
  write_line(j.dump());
}

void MetricsWriter::eval(int64_t step, double val_loss, ValScope scope, std::optional<double> bits_per_byte) {
  nlohmann::ordered_json j;
  j["step"] = step;
  j["val_loss"] = val_loss;
  j["val_bpc"] = val_loss / std::numbers::ln2;
  if (scope == ValScope::whole_split) j["whole_split"] = true;
  if (bits_per_byte) j["val_bpb"] = *bits_per_byte;
  write_line(j.dump());
}

void MetricsWriter::write_line(const std::string& line) {
  const UninterruptibleSection write;  // a stop's watchdog never tears a line
  out_ << line << '\n';
  out_.flush();
  LAT_CHECK(out_.good(), "MetricsWriter: cannot write '" << path_ << "'");
}

}  // namespace lat
