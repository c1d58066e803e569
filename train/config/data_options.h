// The data.* keys as the data loader's options or a synthetic task, and the vocabulary a run
// uses: the one translation from the config to data/.
#pragma once
#include <cstdint>

#include "data/dataset.h"
#include "data/synthetic_tasks.h"
#include "train/config/config.h"

namespace lat {

/// DataOptions from data.* with model.vocab_size as the bound on token ids. Callers that
/// read other data (`lat eval --data`) or check ids against a trained model change the
/// fields they need.
DataOptions data_options(const Config& config);

/// The synthetic task data.task names (mqar or copy), on sequences of data.block_size tokens.
/// Throws lat::Error for data.task none.
SyntheticTask synthetic_task(const Config& config);

/// The vocabulary size of a model of `model` trained on `data`: model.vocab_size when set,
/// else the tokenizer's, else the largest token id + 1.
int64_t run_vocab_size(const ModelConfig& model, const LoadedData& data);

}  // namespace lat
