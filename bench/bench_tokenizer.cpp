// Tokenizer encoding throughput: `bench_tokenizer TOKENIZER TEXT_FILE [--ids OUT]` reads a
// tokenizer as `data.tokenizer` does (a tokenizer.json, a .model or a directory) and encodes
// TEXT_FILE on one thread, in process CPU time, three times: the first pass starts with an
// empty word cache, the next two find it full. Prints tokens/s and MB/s of the first pass and
// of the best warm pass; --ids writes the ids, space-separated, one line (to compare with
// another library's ids). Hugging Face tokenizers' figure on the same text, for comparison:
//   python -c "import time,tokenizers as t; k=t.Tokenizer.from_file('T'); s=open('F').read();
//              c=time.process_time(); k.encode(s, add_special_tokens=False); print(time.process_time()-c)"
// (with RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_timing.h"
#include "data/regular_file.h"
#include "lat/lat.h"
#include "train/files/tokenizer_files.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string ids_path;
  if (args.size() == 4 && args[2] == "--ids") {
    ids_path = args[3];
    args.resize(2);
  }
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: bench_tokenizer TOKENIZER TEXT_FILE [--ids OUT]\n");
    return 2;
  }
  try {
    lat::set_num_threads(1);
    const std::optional<lat::Tokenizer> tokenizer = lat::read_tokenizer_file(args[0], "bench_tokenizer");
    if (!tokenizer) throw lat::Error("bench_tokenizer: '" + args[0] + "' carries no tokenizer");
    const std::string text = lat::read_bounded_file(args[1], size_t{1} << 30, "text file");
    std::vector<int64_t> ids;
    double cold = 0, warm = 1e300;
    for (int pass = 0; pass < 3; ++pass) {
      const double start = lat::bench::now_seconds();
      ids = tokenizer->encode(text);
      const double seconds = lat::bench::now_seconds() - start;
      if (pass == 0) cold = seconds;
      else warm = std::min(warm, seconds);
    }
    const double mb = static_cast<double>(text.size()) / 1e6, tokens = static_cast<double>(ids.size());
    std::printf("tokenizer %s (%s), text %s: %.2f MB, %zu tokens\n", args[0].c_str(), tokenizer->type().c_str(),
                args[1].c_str(), mb, ids.size());
    std::printf("  cold cache: %.3f s  %.0f tokens/s  %.2f MB/s\n", cold, tokens / cold, mb / cold);
    std::printf("  warm cache: %.3f s  %.0f tokens/s  %.2f MB/s\n", warm, tokens / warm, mb / warm);
    const bool round_trip = tokenizer->decode(ids) == text;
    std::printf("  decode(encode(text)) == text: %s\n", round_trip ? "yes" : "NO");
    if (const lat::SubwordModel* model = tokenizer->subword_model())
      std::printf("  splits_after_newline: %s\n", model->splits_after_newline() ? "yes" : "no");
    if (!ids_path.empty()) {
      std::ofstream out(ids_path);
      for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
      out << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
