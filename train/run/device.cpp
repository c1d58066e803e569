// train.device and parameter placement (device.h).
#include "train/run/device.h"

#include "train/config/config.h"

namespace lat {

Device parse_device(const std::string& device) {
  Device d = Device::cpu();
  if (device == "cpu") return d;
  if (device == "cuda") {
    d = Device::cuda(0);
  } else if (device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
             device.find_first_not_of("0123456789", 5) == std::string::npos) {
    d = Device::cuda(std::stoi(device.substr(5)));
  } else {
    throw ConfigError("train.device: expected cpu, cuda or cuda:N, got '" + device + "'");
  }
  if (!cuda_built())
    throw ConfigError("train.device: '" + device +
                      "': this lat was built without CUDA (configure with -DLAT_CUDA=ON where nvcc is installed)");
  const int visible = cuda_device_count();
  if (d.index >= visible)
    throw ConfigError("train.device: '" + device + "': " + std::to_string(visible) +
                      " CUDA device(s) are visible to this process" +
                      (visible == 0 ? " (no GPU or driver here; use train.device: cpu)" : ""));
  return d;
}

void move_parameters(const Module& model, Device device) {
  for (auto& [name, param] : model.named_parameters()) {
    if (param.device() == device) continue;
    // Swap the storage under the existing handle: modules and optimizers hold this very
    // TensorImpl, so a new tensor would leave them pointing at the old copy.
    param.impl()->storage = param.to(device).impl()->storage;
  }
}

}  // namespace lat
