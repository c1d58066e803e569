// Entry points of a library loaded with dlopen (libraries lat uses only on a GPU, so that a
// CPU run does not map them).
#pragma once
#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "lat/error.h"

namespace lat {

/// Sets `fn` to the symbol `name` of `library` (a dlopen handle). Throws lat::Error
/// "<library_name> has no <name>" when it is missing.
template <class Fn>
void resolve_symbol(void* library, const char* name, const std::string& library_name, Fn& fn) {
  static_assert(std::is_pointer_v<Fn>, "resolve_symbol: fn must be a function pointer");
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  LAT_CHECK(fn != nullptr, library_name << " has no " << name);
}

}  // namespace lat
