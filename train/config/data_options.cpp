// data.* -> DataOptions (data_options.h).
#include "train/config/data_options.h"

namespace lat {

DataOptions data_options(const Config& config) {
  const DataConfig& d = config.data;
  return {.path = d.path, .format = d.format, .tokenizer = d.tokenizer, .bin_dtype = d.bin_dtype,
          .h5_dataset = d.h5_dataset, .block_size = d.block_size, .val_fraction = d.val_fraction,
          .doc_separator = d.doc_separator, .packing = d.packing, .vocab_size = config.model.vocab_size};
}

SyntheticTask synthetic_task(const Config& config) {
  const DataConfig& d = config.data;
  return SyntheticTask::named(d.task, d.mqar, d.copy, d.block_size);
}

int64_t run_vocab_size(const ModelConfig& model, const LoadedData& data) {
  if (model.vocab_size > 0) return model.vocab_size;
  return data.tokenizer ? data.tokenizer->vocab_size() : int64_t{data.dataset.max_id()} + 1;
}

}  // namespace lat
