// HDF5 prints its error stack to stderr by default; lat turns HDF5 failures into lat::Error
// instead (data files, checkpoints), so it silences the printing while it calls HDF5.
#pragma once
#include <hdf5.h>

namespace lat {

/// Silences HDF5's error-stack printing for its lifetime and restores the previous handler.
class SilenceHdf5Errors {
 public:
  SilenceHdf5Errors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~SilenceHdf5Errors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  SilenceHdf5Errors(const SilenceHdf5Errors&) = delete;
  SilenceHdf5Errors& operator=(const SilenceHdf5Errors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace lat
