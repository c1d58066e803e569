// Counter-based window sampling and the sequential val iterator.
#include "data/loader.h"

#include <algorithm>
#include <vector>

#include "data/splitmix64.h"

namespace lat {
namespace {

// Domain tags keep the train stream, the random val batches and any later use apart.
constexpr uint64_t kTrainTag = 0x7472616Eull;  // "tran"
constexpr uint64_t kValTag = 0x76616C00ull;     // "val"

// Cuts the rows of `b` where documents start; row r holds the T tokens from stream offset
// first[r]. A document starting at p inside a row (first[r] < p < first[r] + T) is a sequence
// boundary; the token before every document start (p <= first[r] + T: also a row's last token
// when the token after the row starts a document) gets target kIgnoreIndex. Sets
// b.cu_seqlens to [0, boundaries of row 0, T, ..., rows * T] and keeps b.tokens the count of
// real targets.
void cut_at_documents(const DocumentIndex& documents, const std::vector<int64_t>& first, Batch& b) {
  const int64_t rows = static_cast<int64_t>(first.size());
  const int64_t T = b.inputs.size(1);
  int64_t* targets = b.targets.data<int64_t>();
  std::vector<int64_t> cu_seqlens = {0};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t p : documents.starts_in(first[r], first[r] + T)) {
      const int64_t t = p - first[r];  // the document's first token in the row (t == T: the next row's)
      if (t < T) cu_seqlens.push_back(r * T + t);
      int64_t& target = targets[r * T + t - 1];
      if (target != kIgnoreIndex) --b.tokens;
      target = kIgnoreIndex;
    }
    cu_seqlens.push_back((r + 1) * T);
  }
  const int64_t n = static_cast<int64_t>(cu_seqlens.size());
  b.cu_seqlens = Tensor::from_vector(cu_seqlens, {n});
}

// Copies `rows` windows of T + 1 tokens, row r starting at offset start_of(r) of `split`, and
// cuts them at document starts when the dataset is packed.
template <class StartFn>
Batch gather_windows(const Dataset& dataset, Split split, int64_t rows, StartFn start_of) {
  const int64_t T = dataset.block_size();
  const int32_t* data = dataset.split_data(split);
  Batch b{.inputs = Tensor::empty({rows, T}, DType::i64),
          .targets = Tensor::empty({rows, T}, DType::i64),
          .tokens = rows * T};
  int64_t* inputs = b.inputs.data<int64_t>();
  int64_t* targets = b.targets.data<int64_t>();
  std::vector<int64_t> first(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = start_of(r);
    first[r] = dataset.split_begin(split) + start;
    const int32_t* window = data + start;
    for (int64_t t = 0; t < T; ++t) {
      inputs[r * T + t] = window[t];
      targets[r * T + t] = window[t + 1];
    }
  }
  if (dataset.documents()) cut_at_documents(*dataset.documents(), first, b);
  return b;
}

}  // namespace

RowRange rank_rows(int64_t batch_size, int rank, int world_size) {
  LAT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
            "rank_rows: rank " << rank << " outside [0, " << world_size << ")");
  LAT_CHECK(batch_size % world_size == 0, "rank_rows: train.batch_size " << batch_size << " is not divisible by the "
                                                                          << world_size << " ranks");
  return {rank * batch_size / world_size, (rank + 1) * batch_size / world_size};
}

BatchLoader::BatchLoader(const Dataset& dataset, uint64_t seed) : source_(&dataset), seed_(seed) {}

BatchLoader::BatchLoader(const SyntheticTask& task, uint64_t seed) : source_(task), seed_(seed) {}

std::string BatchLoader::sampler() const {
  if (const auto* task = std::get_if<SyntheticTask>(&source_)) return task->sampler();
  return std::get<const Dataset*>(source_)->documents() ? "splitmix64-packed-v1" : "splitmix64-windows-v1";
}

int64_t BatchLoader::block_size() const {
  if (const auto* task = std::get_if<SyntheticTask>(&source_)) return task->seq_len();
  return std::get<const Dataset*>(source_)->block_size();
}

uint64_t BatchLoader::row_key(Split split, int64_t step, int64_t micro, int64_t row) const {
  uint64_t h = mix64(seed_);
  h = mix64(h ^ (split == Split::train ? kTrainTag : kValTag));
  h = mix64(h ^ static_cast<uint64_t>(step));
  h = mix64(h ^ static_cast<uint64_t>(micro));
  return mix64(h ^ static_cast<uint64_t>(row));
}

int64_t BatchLoader::window_start(Split split, int64_t step, int64_t micro, int64_t row) const {
  const auto* dataset = std::get_if<const Dataset*>(&source_);
  LAT_CHECK(dataset, "BatchLoader::window_start: this loader generates the synthetic task "
                         << std::get<SyntheticTask>(source_).name() << ", which has no windows");
  const uint64_t h = row_key(split, step, micro, row);
  // Valid starts are 0 .. n - T - 1 (a window holds T + 1 tokens): n - T of them.
  const uint64_t starts = static_cast<uint64_t>((*dataset)->split_size(split) - (*dataset)->block_size());
  return static_cast<int64_t>((static_cast<unsigned __int128>(h) * starts) >> 64);
}

Batch BatchLoader::batch(Split split, int64_t step, int64_t micro, RowRange rows) const {
  LAT_CHECK(rows.begin >= 0 && rows.end > rows.begin,
            "BatchLoader::batch: rows: expected 0 <= begin < end, got [" << rows.begin << ", " << rows.end << ")");
  const int64_t n = rows.end - rows.begin;
  if (const auto* task = std::get_if<SyntheticTask>(&source_)) {
    const int64_t T = task->seq_len();
    Batch b{.inputs = Tensor::empty({n, T}, DType::i64), .targets = Tensor::empty({n, T}, DType::i64)};
    for (int64_t r = 0; r < n; ++r)
      b.tokens += task->sample(row_key(split, step, micro, rows.begin + r), b.inputs.data<int64_t>() + r * T,
                               b.targets.data<int64_t>() + r * T);
    return b;
  }
  return gather_windows(*std::get<const Dataset*>(source_), split, n,
                        [&](int64_t r) { return window_start(split, step, micro, rows.begin + r); });
}

Batch BatchLoader::train_batch(int64_t step, int64_t micro, int64_t batch_size) const {
  return batch(Split::train, step, micro, {0, batch_size});
}

Batch BatchLoader::eval_batch(int64_t index, int64_t batch_size) const {
  return batch(Split::val, index, 0, {0, batch_size});
}

SequentialEval::SequentialEval(const Dataset& dataset, int64_t batch_size)
    : dataset_(&dataset), batch_size_(batch_size) {
  LAT_CHECK(batch_size >= 1, "SequentialEval: batch_size: expected >= 1, got " << batch_size);
  const int64_t T = dataset.block_size();
  num_windows_ = (dataset.split_size(Split::val) - 1 + T - 1) / T;
}

int64_t SequentialEval::num_targets() const { return dataset_->num_targets(Split::val); }

Batch SequentialEval::batch(int64_t index) const {
  LAT_CHECK(index >= 0 && index < num_batches(),
            "SequentialEval::batch: index " << index << " outside [0, " << num_batches() << ")");
  const int64_t T = dataset_->block_size();
  const int64_t n = dataset_->split_size(Split::val);
  const int32_t* data = dataset_->split_data(Split::val);
  const int64_t first = index * batch_size_;
  const int64_t rows = std::min(batch_size_, num_windows_ - first);
  Batch b{.inputs = Tensor::empty({rows, T}, DType::i64), .targets = Tensor::empty({rows, T}, DType::i64)};
  int64_t* inputs = b.inputs.data<int64_t>();
  int64_t* targets = b.targets.data<int64_t>();
  std::vector<int64_t> window_first(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = (first + r) * T;
    window_first[r] = dataset_->split_begin(Split::val) + start;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = start + t;
      const bool has_target = i + 1 < n;
      inputs[r * T + t] = i < n ? data[i] : 0;
      targets[r * T + t] = has_target ? data[i + 1] : kIgnoreIndex;
      b.tokens += has_target;
    }
  }
  if (dataset_->documents()) cut_at_documents(*dataset_->documents(), window_first, b);
  return b;
}

}  // namespace lat
