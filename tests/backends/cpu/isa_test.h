// Runs CPU kernel tests once per ISA level (backends/cpu/isa/): fixtures whose SetUp makes the
// test's level active and skips, with one line naming the reason, levels this CPU lacks or that lie
// above the level this process runs at (DEMI_CPU_ISA=avx2 stands in for an AVX2-only machine).
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/isa/isa.h"
#include "backends/kernels.h"

namespace demi_test {

namespace isa = demi::backend::cpu::isa;
using isa::Level;

inline std::vector<Level> isa_levels() {
  return {Level::Scalar, Level::Avx2, Level::Avx512, Level::Avx512Bf16, Level::Amx};
}

// Why `level` cannot run in this process ("" when it can).
inline std::string isa_skip_reason(Level level) {
  const char* missing = nullptr;
  if (!isa::table(level, &missing)) return std::string(isa::level_name(level)) + ": this CPU lacks " + missing;
  const Level cap = isa::active().level;  // cpuid's choice, or DEMI_CPU_ISA's
  if (level > cap) {
    return std::string(isa::level_name(level)) + ": above this process's level " + isa::level_name(cap) +
           " (DEMI_CPU_ISA)";
  }
  return "";
}

// Makes a level active for its lifetime.
class IsaGuard {
 public:
  explicit IsaGuard(Level level) : previous_(isa::set_active_for_testing(level)) {}
  ~IsaGuard() { isa::set_active_for_testing(previous_); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  Level previous_;
};

// A fixture parametrised by Param (Level, or a tuple whose first element is the Level).
template <typename Param>
class IsaFixture : public ::testing::TestWithParam<Param> {
 protected:
  static Level level_of(Level l) { return l; }
  template <typename... Rest>
  static Level level_of(const std::tuple<Level, Rest...>& t) {
    return std::get<0>(t);
  }
  void SetUp() override {
    const Level level = level_of(this->GetParam());
    const std::string why = isa_skip_reason(level);
    if (!why.empty()) GTEST_SKIP() << why;
    guard_.emplace(level);
  }
  void TearDown() override { guard_.reset(); }

 private:
  std::optional<IsaGuard> guard_;
};

inline std::string isa_name(const ::testing::TestParamInfo<Level>& info) { return isa::level_name(info.param); }
inline std::string isa_dtype_name(const ::testing::TestParamInfo<std::tuple<Level, demi::DType>>& info) {
  return std::string(isa::level_name(std::get<0>(info.param))) + "_" + demi::dtype_name(std::get<1>(info.param));
}

}  // namespace demi_test
