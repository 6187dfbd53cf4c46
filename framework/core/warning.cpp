// The warning handler: stderr unless replaced.
#include "framework/core/warning.h"

#include <iostream>
#include <mutex>

namespace demi {
namespace {
std::mutex mutex;
WarningHandler& handler() {
  static WarningHandler h;
  return h;
}
}  // namespace

WarningHandler set_warning_handler(WarningHandler h) {
  std::lock_guard<std::mutex> lock(mutex);
  WarningHandler previous = std::move(handler());
  handler() = std::move(h);
  return previous;
}

void warn(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex);
  if (handler()) {
    handler()(message);
  } else {
    std::cerr << "demi warning: " << message << std::endl;
  }
}

}  // namespace demi
