// Counter-based window sampling and the sequential val iterator.
#include "data/loader.h"

#include <algorithm>

namespace lat {
namespace {

// splitmix64's output function (Steele, Lea & Flood 2014): a bijective 64-bit mixer.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Domain tags keep the train stream, the random val batches and any later use apart.
constexpr uint64_t kTrainTag = 0x7472616Eull;  // "tran"
constexpr uint64_t kValTag = 0x76616C00ull;     // "val"

// Copies `rows` windows of T + 1 tokens, row r starting at offset start_of(r) of `split`.
template <class StartFn>
Batch gather_windows(const Dataset& dataset, Split split, int64_t rows, StartFn start_of) {
  const int64_t T = dataset.block_size();
  const int32_t* data = dataset.split_data(split);
  Batch b{Tensor::empty({rows, T}, DType::i64), Tensor::empty({rows, T}, DType::i64), rows * T};
  int64_t* inputs = b.inputs.data<int64_t>();
  int64_t* targets = b.targets.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* window = data + start_of(r);
    for (int64_t t = 0; t < T; ++t) {
      inputs[r * T + t] = window[t];
      targets[r * T + t] = window[t + 1];
    }
  }
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

BatchLoader::BatchLoader(const Dataset& dataset, uint64_t seed) : dataset_(&dataset), seed_(seed) {}

int64_t BatchLoader::window_start(Split split, int64_t step, int64_t micro, int64_t row) const {
  uint64_t h = mix64(seed_);
  h = mix64(h ^ (split == Split::train ? kTrainTag : kValTag));
  h = mix64(h ^ static_cast<uint64_t>(step));
  h = mix64(h ^ static_cast<uint64_t>(micro));
  h = mix64(h ^ static_cast<uint64_t>(row));
  // Valid starts are 0 .. n - T - 1 (a window holds T + 1 tokens): n - T of them.
  const uint64_t starts = static_cast<uint64_t>(dataset_->split_size(split) - dataset_->block_size());
  return static_cast<int64_t>((static_cast<unsigned __int128>(h) * starts) >> 64);
}

Batch BatchLoader::batch(Split split, int64_t step, int64_t micro, RowRange rows) const {
  LAT_CHECK(rows.begin >= 0 && rows.end > rows.begin,
            "BatchLoader::batch: rows: expected 0 <= begin < end, got [" << rows.begin << ", " << rows.end << ")");
  return gather_windows(*dataset_, split, rows.end - rows.begin,
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
  num_windows_ = (num_targets() + T - 1) / T;
}

Batch SequentialEval::batch(int64_t index) const {
  LAT_CHECK(index >= 0 && index < num_batches(),
            "SequentialEval::batch: index " << index << " outside [0, " << num_batches() << ")");
  const int64_t T = dataset_->block_size();
  const int64_t n = dataset_->split_size(Split::val);
  const int32_t* data = dataset_->split_data(Split::val);
  const int64_t first = index * batch_size_;
  const int64_t rows = std::min(batch_size_, num_windows_ - first);
  Batch b{Tensor::empty({rows, T}, DType::i64), Tensor::empty({rows, T}, DType::i64), 0};
  int64_t* inputs = b.inputs.data<int64_t>();
  int64_t* targets = b.targets.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = (first + r) * T;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = start + t;
      const bool has_target = i + 1 < n;
      inputs[r * T + t] = i < n ? data[i] : 0;
      targets[r * T + t] = has_target ? data[i + 1] : kIgnoreIndex;
      b.tokens += has_target;
    }
  }
  return b;
}

}  // namespace lat
