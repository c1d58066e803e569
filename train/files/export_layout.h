// The files of an export directory (`lat export --out DIR`), written by export.cpp and read
// back by model_reader.cpp:
//
//   DIR/model.safetensors        --format safetensors: the checkpoint's tensors under their own
//                                names (f32, or bf16 on request); with tied embeddings also
//                                lm_head.weight, a copy of embeddings.weight; __metadata__:
//                                format=pt, step, tokens_seen, val_loss, ... (the root attributes)
//   DIR/config.json              the model hyperparameters (lat's names plus the usual Hugging Face
//                                aliases), architectures, model_type, torch_dtype, vocabulary, and
//                                lat_config: the resolved YAML, to rebuild exactly (config_json.h)
//   DIR/tokenizer.json           {"type": "char", "vocab": [characters in id order]} or
//                                {"type": "byte", "vocab_size": 256}, or for bpe the Hugging Face
//                                tokenizer.json the model was trained with, byte for byte; absent
//                                for a model trained on token ids (tokenizer type "none")
//   DIR/tokenizer.model          sentencepiece: the .model the model was trained with, byte for
//                                byte (then there is no tokenizer.json) (tokenizer_files.h)
//   DIR/model.h5                 --format h5-weights: a checkpoint with /model, /config, /tokenizer
//                                and the root attributes only (no optimizer, rng, data)
//   DIR/check_logits.safetensors --check-tokens IDS: lat's logits for IDS (ExportOptions)
#pragma once

namespace lat::export_layout {

inline constexpr const char* kSafetensorsFile = "model.safetensors";
inline constexpr const char* kWeightsFile = "model.h5";
inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kTokenizerFile = "tokenizer.json";
inline constexpr const char* kSentencePieceFile = "tokenizer.model";
inline constexpr const char* kCheckLogitsFile = "check_logits.safetensors";

}  // namespace lat::export_layout
