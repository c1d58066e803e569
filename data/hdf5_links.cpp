// Refusing soft, external and user-defined links (hdf5_links.h).
#include "data/hdf5_links.h"

#include <vector>

#include "data/hdf5_errors.h"

namespace lat {
namespace {

/// What a link that is not hard is, with its target for soft and external links. `name` is the
/// link's name in `group`; its stored value is read without following it.
std::string link_kind(hid_t group, const char* name, const H5L_info_t& info) {
  if (info.type != H5L_TYPE_SOFT && info.type != H5L_TYPE_EXTERNAL)
    return "a user-defined link (class " + std::to_string(static_cast<int>(info.type)) + ")";
  const std::string plain = info.type == H5L_TYPE_SOFT ? "a soft link" : "an external link";
  // The size comes from the file: a damaged one must not make the message allocate gigabytes.
  constexpr size_t kMaxShownValue = 4096;
  if (info.u.val_size > kMaxShownValue) return plain;
  std::vector<char> value(info.u.val_size + 1, '\0');
  if (H5Lget_val(group, name, value.data(), value.size(), H5P_DEFAULT) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return plain;
  }
  if (info.type == H5L_TYPE_SOFT) return plain + " to '" + value.data() + "'";
  const char* file = nullptr;
  const char* object = nullptr;
  if (H5Lunpack_elink_val(value.data(), info.u.val_size, nullptr, &file, &object) < 0 || !file || !object) {
    H5Eclear2(H5E_DEFAULT);
    return plain;
  }
  return plain + " to '" + file + ":" + object + "'";
}

[[noreturn]] void refuse(hid_t group, const char* name, const H5L_info_t& info, const std::string& path) {
  throw Error("link '" + path + "' is " + link_kind(group, name, info) +
              "; lat reads only hard links (the data itself in this file)");
}

}  // namespace

void check_hard_link(hid_t loc, const char* name, const std::string& path) {
  H5L_info_t info;
  check_hdf5(H5Lget_info(loc, name, &info, H5P_DEFAULT), "cannot read link '" + path + "'");
  if (info.type != H5L_TYPE_HARD) refuse(loc, name, info, path);
}

void check_hard_links_along(hid_t loc, const std::string& path) {
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = path.substr(0, end);
    if (!prefix.empty() && prefix != "/") {
      const htri_t exists = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
      if (exists <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return;
      }
      check_hard_link(loc, prefix.c_str(), prefix.front() == '/' ? prefix : "/" + prefix);
    }
    if (end == std::string::npos) return;
  }
}

}  // namespace lat
