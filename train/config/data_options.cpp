// data.* -> DataOptions (data_options.h).
#include "train/config/data_options.h"

namespace lat {

DataOptions data_options(const Config& config) {
  DataOptions options;
  options.path = config.data.path;
  options.format = config.data.format;
  options.tokenizer = config.data.tokenizer;
  options.bin_dtype = config.data.bin_dtype;
  options.h5_dataset = config.data.h5_dataset;
  options.block_size = config.data.block_size;
  options.val_fraction = config.data.val_fraction;
  options.vocab_size = config.model.vocab_size;
  return options;
}

int64_t run_vocab_size(const ModelConfig& model, const LoadedData& data) {
  if (model.vocab_size > 0) return model.vocab_size;
  return data.tokenizer ? data.tokenizer->vocab_size() : int64_t{data.dataset.max_id()} + 1;
}

}  // namespace lat
