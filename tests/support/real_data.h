// The real CIFAR-10 for data, trainer and convergence tests, from $DEMI_CIFAR10 (set by ctest when
// CMake was configured with it, else inherited from ctest's environment). Missing data skips a
// test, saying how to provide it, and fails it under CI=true, where the data must be there.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "datasets/cifar10.h"

namespace demi::test {

// Why the real data set is unavailable, or "" when $DEMI_CIFAR10 holds the image-folder tree.
inline std::string missing_real_data() {
  const std::string env = data::cifar10_dir_from_environment();
  if (env.empty())
    return "DEMI_CIFAR10 is not set: point it at the CIFAR-10 image-folder tree (train/<class>/*.jpg, "
           "test/<class>/*.jpg), e.g. `DEMI_CIFAR10=/path/to/cifar10 ctest ...`, or configure with "
           "-DDEMI_CIFAR10_DIR=/path/to/cifar10";
  const std::filesystem::path dir(env);
  if (!std::filesystem::is_directory(dir / "train") || !std::filesystem::is_directory(dir / "test"))
    return std::string("no CIFAR-10 image folder (train/, test/) at DEMI_CIFAR10=") + env +
           ": point DEMI_CIFAR10 at the image-folder tree";
  return "";
}

inline std::string real_data_dir() { return data::cifar10_dir_from_environment(); }

}  // namespace demi::test

// Use at the top of a TEST body: skips (or fails under CI=true) when the data is missing.
#define DEMI_REQUIRE_REAL_DATA()                                                     \
  do {                                                                               \
    const std::string demi_missing_ = ::demi::test::missing_real_data();             \
    const char* demi_ci_ = std::getenv("CI");                                        \
    if (!demi_missing_.empty() && demi_ci_ && std::string(demi_ci_) == "true")       \
      FAIL() << demi_missing_ << " (CI=true, so a missing data set is a failure)";   \
    if (!demi_missing_.empty()) GTEST_SKIP() << demi_missing_;                       \
  } while (0)
