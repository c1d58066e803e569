// HDF5 prints its error stack to stderr by default; lat turns HDF5 failures into lat::Error
// instead (data files, checkpoints), so it silences the printing while it calls HDF5, puts the
// innermost HDF5 message into its own, and closes every identifier it opens (Hdf5Handle).
#pragma once
#include <hdf5.h>

#include <string>

#include "lat/error.h"

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

/// " (<innermost message on HDF5's error stack>)", e.g. " (truncated file: eof = ...)", or ""
/// when the stack is empty; clears the stack.
inline std::string hdf5_detail() {
  std::string detail;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        auto* text = static_cast<std::string*>(out);
        if (text->empty() && e->desc) *text = e->desc;
        return 0;
      },
      &detail);
  H5Eclear2(H5E_DEFAULT);
  return detail.empty() ? "" : " (" + detail + ")";
}

/// Throws lat::Error "<what> (<HDF5's message>)" when an HDF5 call returned a negative status.
inline void check_hdf5(herr_t status, const std::string& what) {
  if (status < 0) throw Error(what + hdf5_detail());
}

/// An HDF5 identifier closed by its matching H5*close when it goes out of scope. A negative
/// identifier (the call failed) throws lat::Error "<what> (<HDF5's message>)" at once.
class Hdf5Handle {
 public:
  Hdf5Handle(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id_ < 0) throw Error(what + hdf5_detail());
  }
  ~Hdf5Handle() {
    if (id_ >= 0) close_(id_);
  }
  Hdf5Handle(Hdf5Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(Hdf5Handle&&) = delete;
  operator hid_t() const { return id_; }
  /// Closes now and reports failure (the destructor cannot).
  void close(const std::string& what) {
    const herr_t status = close_(id_);
    id_ = -1;
    check_hdf5(status, what);
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

}  // namespace lat
