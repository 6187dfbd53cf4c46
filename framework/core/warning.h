// Warnings from library code: printed once to stderr by default; tests and applications can
// install their own handler (to log, collect or silence them).
#pragma once

#include <functional>
#include <string>

namespace demi {

using WarningHandler = std::function<void(const std::string& message)>;

// Replaces the handler; returns the previous one. An empty handler restores stderr printing.
WarningHandler set_warning_handler(WarningHandler handler);
// Reports `message` through the current handler.
void warn(const std::string& message);

}  // namespace demi
