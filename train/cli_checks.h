// train_cifar's option checks that say what a person would ("must be positive, got 0"; CLI11's
// own PositiveNumber and Range print their bounds as doubles, e.g. a 309-digit DBL_MAX), and the
// options whose text is parsed once, here, into TrainerConfig's enums.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <sstream>
#include <string>

#include "train/config.h"

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

// An option naming one of an enum's values (OptionNames<E>): refused unless it is one of them,
// parsed into `target` when given; --help shows the choices and the default.
template <typename E>
CLI::Option* add_choice(CLI::App& app, E& target, const std::string& help) {
  return app
      .add_option_function<std::string>(
          OptionNames<E>::kFlag, [&target](const std::string& text) { target = from_name<E>(text); }, help)
      ->check(CLI::IsMember(names_of<E>()))
      ->default_str(name_of(target));
}

// --loss-scale: dynamic, none or a positive number, parsed into `target`.
inline CLI::Option* add_loss_scale(CLI::App& app, LossScale& target, const std::string& help) {
  const CLI::Validator valid(
      [](std::string& text) -> std::string {
        return parse_loss_scale(text) ? std::string() : "'" + text + "' is not dynamic, none or a positive number";
      },
      "");  // no description: --help says it in words
  return app
      .add_option_function<std::string>(
          "--loss-scale", [&target](const std::string& text) { target = *parse_loss_scale(text); }, help)
      ->check(valid)
      ->default_str(name_of(target));
}

}  // namespace demi::train::cli
