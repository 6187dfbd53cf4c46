// Numeric checks for train_cifar's options that say what a person would: "must be positive, got 0".
// CLI11's own (PositiveNumber, Range) print their bounds as doubles, e.g. a 309-digit DBL_MAX.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <sstream>
#include <string>

namespace demi::train::cli {

namespace detail {
// Parses a whole string as a number; false when it is not one.
inline bool parse_number(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end != nullptr && *end == '\0';
}

template <typename Accept>
CLI::Validator number_check(std::string requirement, Accept accept) {
  return CLI::Validator(
      [requirement, accept](std::string& text) -> std::string {
        double value = 0;
        if (!detail::parse_number(text, value)) return "'" + text + "' is not a number";
        return accept(value) ? std::string() : "must be " + requirement + ", got " + text;
      },
      requirement);
}
}  // namespace detail

// > 0
inline CLI::Validator positive() {
  return detail::number_check("positive", [](double v) { return v > 0; });
}
// >= 0
inline CLI::Validator non_negative() {
  return detail::number_check(">= 0", [](double v) { return v >= 0; });
}
// lo <= value <= hi, with the bounds written as the shortest decimal that reads back (0.999, not
// 0.999000).
inline CLI::Validator between(double lo, double hi) {
  std::ostringstream requirement;
  requirement << "between " << lo << " and " << hi;
  return detail::number_check(requirement.str(), [lo, hi](double v) { return v >= lo && v <= hi; });
}

}  // namespace demi::train::cli
