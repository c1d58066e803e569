// Where a run computes: train.device as a Device, and a model's parameters moved there.
#pragma once
#include <string>

#include "layers/module.h"

namespace lat {

/// "cpu", "cuda" (= cuda:0) or "cuda:N" as a Device. Throws ConfigError naming
/// train.device for anything else, for CUDA when this build has no CUDA backend, and for a
/// CUDA device this process cannot see (none on a machine without a GPU).
Device parse_device(const std::string& device);

/// Moves every parameter of `model` to `device` in place: the parameter handles the model
/// and its optimizer hold keep working, now pointing at device storage.
void move_parameters(const Module& model, Device device);

}  // namespace lat
