// Refusing soft, external and user-defined links (hdf5_links.h).
#include "data/hdf5_links.h"

#include <optional>
#include <vector>

#include "data/hdf5_errors.h"

namespace lat {
namespace {

/// The first link that is not hard: its path from the root and what it is.
struct ForeignLink {
  std::string path;
  std::string kind;  // e.g. "a soft link to '/model/x'"
};

/// What a soft or external link points at, from its stored value.
std::string link_kind(hid_t group, const char* name, const H5L_info_t& info) {
  if (info.type == H5L_TYPE_SOFT || info.type == H5L_TYPE_EXTERNAL) {
    std::vector<char> value(info.u.val_size + 1, '\0');
    if (H5Lget_val(group, name, value.data(), value.size(), H5P_DEFAULT) < 0) {
      H5Eclear2(H5E_DEFAULT);
      return info.type == H5L_TYPE_SOFT ? "a soft link" : "an external link";
    }
    if (info.type == H5L_TYPE_SOFT) return "a soft link to '" + std::string(value.data()) + "'";
    const char* file = nullptr;
    const char* object = nullptr;
    if (H5Lunpack_elink_val(value.data(), info.u.val_size, nullptr, &file, &object) < 0 || !file || !object) {
      H5Eclear2(H5E_DEFAULT);
      return "an external link";
    }
    return "an external link to '" + std::string(file) + ":" + object + "'";
  }
  return "a user-defined link (class " + std::to_string(static_cast<int>(info.type)) + ")";
}

}  // namespace

void refuse_non_hard_links(hid_t file) {
  std::optional<ForeignLink> found;
  const herr_t status = H5Lvisit(
      file, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t group, const char* name, const H5L_info_t* info, void* out) -> herr_t {
        if (info->type == H5L_TYPE_HARD) return 0;
        *static_cast<std::optional<ForeignLink>*>(out) = ForeignLink{std::string("/") + name,
                                                                     link_kind(group, name, *info)};
        return 1;  // stops the walk
      },
      &found);
  if (found)
    throw Error("link '" + found->path + "' is " + found->kind +
                "; lat reads only hard links (the data itself in this file)");
  if (status < 0) throw Error("cannot list the links of the file" + hdf5_detail());
}

}  // namespace lat
