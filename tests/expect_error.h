// The one way the tests assert an error: expect_error<E>(f, {parts...}) runs f and checks
// that it throws exactly an E (lat::Error by default; lat::ConfigError where the caller
// maps it to exit code 2) whose message contains every part. It returns the message for
// further checks (e.g. that a part is absent). Failures are reported at the caller's line.
#pragma once
#include <cxxabi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>

#include "lat/error.h"

namespace lat::testing {

/// "lat::ConfigError" for typeid(lat::ConfigError): the readable name of a type.
inline std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? name.get() : type.name();
}

/// Runs `f`; a test failure at the caller's line unless it throws an exception of type
/// exactly E (a subclass of E fails too: lat::ConfigError is not accepted for lat::Error)
/// whose message contains each of `parts` (at least one). Returns the message of the
/// exception caught ("" when none or one of another type was thrown).
template <class E = Error>
std::string expect_error(const std::function<void()>& f, std::initializer_list<std::string_view> parts,
                         std::source_location where = std::source_location::current()) {
  static_assert(std::is_base_of_v<Error, E>, "expect_error: E must be lat::Error or a subclass");
  const char* file = where.file_name();
  const int line = static_cast<int>(where.line());
  if (parts.size() == 0) ADD_FAILURE_AT(file, line) << "expect_error: name at least one part of the message";
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    if (typeid(e) != typeid(E)) {
      ADD_FAILURE_AT(file, line) << "expected " << type_name(typeid(E)) << ", got " << type_name(typeid(e)) << ": "
                                 << message;
      return message;
    }
    for (std::string_view part : parts)
      if (message.find(part) == std::string::npos)
        ADD_FAILURE_AT(file, line) << "the message lacks '" << part << "': " << message;
    return message;
  } catch (const std::exception& e) {
    ADD_FAILURE_AT(file, line) << "expected " << type_name(typeid(E)) << ", got " << type_name(typeid(e)) << ": "
                               << e.what();
    return "";
  }
  ADD_FAILURE_AT(file, line) << "expected " << type_name(typeid(E)) << ", nothing was thrown";
  return "";
}

}  // namespace lat::testing
