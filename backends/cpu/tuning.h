// The CPU backend's tuning variables, read from the environment in one place and checked there
// once: each forces an ISA level, a bf16 route, a kernel path or a measured constant, for A/B
// benchmarks, tests and CPUs unlike the ones the rules were measured on (docs/cpu.md).
// A bad value throws demi::Error naming the variable and the values it takes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace demi::backend::cpu {

struct Tuning {
  // DEMI_CPU_ISA: the ISA level to run at; empty: the best the CPU supports. The level's name and
  // whether this CPU has it are checked where the levels are known (isa/select.cpp).
  std::string cpu_isa;
  // DEMI_CPU_BF16_ROUTE: which bf16 products take the level's bf16 tile; empty: the level's own
  // route (checked by isa/select.cpp as well).
  std::string bf16_route;
  bool winograd = true;       // DEMI_WINOGRAD=0: no Winograd convolutions (conv2d_winograd.cpp)
  bool winograd_f4 = true;    // DEMI_WINOGRAD_F4=0: F(2x2) where F(4x4) would run (conv2d_winograd4.h)
  bool implicit_conv = true;  // DEMI_IMPLICIT_CONV=0: bf16 tile convolutions through im2col (conv2d_implicit.h)
  // DEMI_WINOGRAD_DOT_COLS: Winograd backward-weight's columns a group (conv2d_winograd.cpp); 0: its rule.
  int64_t winograd_dot_cols = 0;
  // DEMI_BF16_WEIGHT_GRAD=split|images: how bf16 backward-weight on the tile divides its work
  // (conv2d_bf16.cpp); BySize: by the size of grad_w.
  enum class WeightGrad { BySize, Split, Images };
  WeightGrad bf16_weight_grad = WeightGrad::BySize;
  // "NAME=value" for each variable set (non-empty), in the order above.
  std::vector<std::string> set;
};

// Reads and checks every variable; lookup(name) gives its value or nullptr (std::getenv, or a
// test's own).
Tuning read_tuning(const std::function<const char*(const char*)>& lookup);

// The process's tuning, read from the environment on first use.
const Tuning& tuning();

// "tuning: defaults", or "tuning: " and the variables set, e.g. "tuning: DEMI_WINOGRAD=0".
std::string describe(const Tuning& t);

// Reads the environment again, for a test that changes DEMI_* variables between cases (not while
// kernels run). The ISA level and bf16 route stay those chosen at the kernels' first use.
void reread_tuning_for_testing();

}  // namespace demi::backend::cpu
