// Pins backends/cpu/tuning.h: every DEMI_* tuning variable read and checked in one place, a clear
// error naming the variable and its values for a bad one, the one-line description printed beside
// the ISA level, and a re-read that reaches the kernels' choices (for tests that change a variable).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "backends/cpu/conv2d_implicit.h"
#include "backends/cpu/tuning.h"
#include "backends/kernels.h"

namespace demi::backend::cpu {
namespace {

// A lookup over a made-up environment.
std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    read_tuning(env_of(vars));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tuning, NothingSetIsTheDefaults) {
  const Tuning t = read_tuning(env_of({}));
  EXPECT_TRUE(t.cpu_isa.empty());
  EXPECT_TRUE(t.bf16_route.empty());
  EXPECT_TRUE(t.winograd);
  EXPECT_TRUE(t.winograd_f4);
  EXPECT_TRUE(t.implicit_conv);
  EXPECT_EQ(t.winograd_dot_cols, 0);
  EXPECT_EQ(t.bf16_weight_grad, Tuning::WeightGrad::BySize);
  EXPECT_EQ(describe(t), "tuning: defaults");
  EXPECT_EQ(describe(read_tuning(env_of({{"DEMI_WINOGRAD", ""}}))), "tuning: defaults") << "empty is unset";
}

TEST(Tuning, ReadsEveryVariable) {
  const Tuning t = read_tuning(env_of({{"DEMI_CPU_ISA", "avx2"},
                                       {"DEMI_CPU_BF16_ROUTE", "widen"},
                                       {"DEMI_WINOGRAD", "0"},
                                       {"DEMI_WINOGRAD_F4", "0"},
                                       {"DEMI_IMPLICIT_CONV", "0"},
                                       {"DEMI_WINOGRAD_DOT_COLS", "96"},
                                       {"DEMI_BF16_WEIGHT_GRAD", "images"}}));
  EXPECT_EQ(t.cpu_isa, "avx2");
  EXPECT_EQ(t.bf16_route, "widen");
  EXPECT_FALSE(t.winograd);
  EXPECT_FALSE(t.winograd_f4);
  EXPECT_FALSE(t.implicit_conv);
  EXPECT_EQ(t.winograd_dot_cols, 96);
  EXPECT_EQ(t.bf16_weight_grad, Tuning::WeightGrad::Images);
  EXPECT_EQ(describe(t),
            "tuning: DEMI_CPU_ISA=avx2 DEMI_CPU_BF16_ROUTE=widen DEMI_WINOGRAD=0 DEMI_WINOGRAD_F4=0 "
            "DEMI_IMPLICIT_CONV=0 DEMI_WINOGRAD_DOT_COLS=96 DEMI_BF16_WEIGHT_GRAD=images");
  EXPECT_EQ(read_tuning(env_of({{"DEMI_BF16_WEIGHT_GRAD", "split"}})).bf16_weight_grad, Tuning::WeightGrad::Split);
  EXPECT_EQ(describe(read_tuning(env_of({{"DEMI_IMPLICIT_CONV", "1"}}))), "tuning: DEMI_IMPLICIT_CONV=1")
      << "a variable set to its default is still named";
}

TEST(Tuning, ABadValueNamesTheVariableAndItsValues) {
  EXPECT_NE(error_of({{"DEMI_WINOGRAD", "off"}}).find("DEMI_WINOGRAD='off': expected 0 (off) or 1"), std::string::npos);
  EXPECT_NE(error_of({{"DEMI_WINOGRAD_F4", "2"}}).find("DEMI_WINOGRAD_F4='2': expected 0"), std::string::npos);
  EXPECT_NE(error_of({{"DEMI_IMPLICIT_CONV", "no"}}).find("DEMI_IMPLICIT_CONV='no'"), std::string::npos);
  for (const char* cols : {"0", "65537", "12x", "-3"}) {
    EXPECT_NE(error_of({{"DEMI_WINOGRAD_DOT_COLS", cols}}).find("expected a number of columns from 1 to 65536"),
              std::string::npos)
        << cols;
  }
  EXPECT_NE(error_of({{"DEMI_BF16_WEIGHT_GRAD", "rows"}}).find("DEMI_BF16_WEIGHT_GRAD=rows: expected split or images"),
            std::string::npos);
}

// Sets a variable for one test; puts it back, and reads the environment again, after.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (had_) setenv(name_, old_.c_str(), 1); else unsetenv(name_);
    reread_tuning_for_testing();
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(Tuning, AReReadReachesTheKernelsChoices) {
  // A 3x3 convolution of 64 channels, stride 1: an implicit GEMM's, unless DEMI_IMPLICIT_CONV=0.
  const ConvGeom g{2, 64, 8, 8, 64, 3, 3, 8, 8, 1, 1, 1, 1};
  const bool before = conv2d_implicit::takes(g);
  {
    ScopedVariable off("DEMI_IMPLICIT_CONV", "0");
    reread_tuning_for_testing();
    EXPECT_FALSE(tuning().implicit_conv);
    EXPECT_FALSE(conv2d_implicit::takes(g));
    EXPECT_NE(cpu_tuning().find("DEMI_IMPLICIT_CONV=0"), std::string::npos) << cpu_tuning();
  }
  EXPECT_EQ(conv2d_implicit::takes(g), before) << "the environment's own setting again";
}

TEST(Tuning, AReReadOfABadValueThrowsAndKeepsTheLastGoodOne) {
  const bool before = tuning().winograd_f4;
  {
    ScopedVariable bad("DEMI_WINOGRAD_F4", "maybe");
    EXPECT_THROW(reread_tuning_for_testing(), Error);
    EXPECT_EQ(tuning().winograd_f4, before);
  }
  EXPECT_EQ(tuning().winograd_f4, before);
}

}  // namespace
}  // namespace demi::backend::cpu
