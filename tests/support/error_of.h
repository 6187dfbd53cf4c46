// error_of(fn): the message of the demi::Error that fn throws, or "(no error)"; lets tests assert
// on error messages with HasSubstr.
#pragma once

#include <functional>
#include <string>

#include "framework/core/error.h"

namespace demi::test {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace demi::test
