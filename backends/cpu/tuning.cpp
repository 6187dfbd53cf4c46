// Reads tuning.h's variables: once for the process, again for a test that asks.
#include "backends/cpu/tuning.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backends/kernels.h"
#include "framework/core/error.h"

namespace demi::backend::cpu {
namespace {

// A path's switch: 1 (the default) or 0.
bool read_switch(const char* name, const char* value) {
  DEMI_CHECK(std::strcmp(value, "0") == 0 || std::strcmp(value, "1") == 0, name, "='", value,
             "': expected 0 (off) or 1 (on, the default)");
  return value[0] == '1';
}

int64_t read_dot_cols(const char* value) {
  char* end = nullptr;
  const long cols = std::strtol(value, &end, 10);
  DEMI_CHECK(*end == '\0' && cols >= 1 && cols <= 65536, "DEMI_WINOGRAD_DOT_COLS=", value,
             ": expected a number of columns from 1 to 65536 (backward-weight's Winograd tiles a group, at least)");
  return cols;
}

Tuning::WeightGrad read_weight_grad(const char* value) {
  if (std::strcmp(value, "split") == 0) return Tuning::WeightGrad::Split;
  DEMI_CHECK(std::strcmp(value, "images") == 0, "DEMI_BF16_WEIGHT_GRAD=", value, ": expected split or images");
  return Tuning::WeightGrad::Images;
}

std::atomic<const Tuning*> reread{nullptr};

}  // namespace

Tuning read_tuning(const std::function<const char*(const char*)>& lookup) {
  Tuning t;
  // Each variable set (an empty one counts as unset, as before) is noted, then read into t.
  auto given = [&](const char* name) -> const char* {
    const char* value = lookup(name);
    if (value == nullptr || *value == '\0') return nullptr;
    t.set.push_back(std::string(name) + "=" + value);
    return value;
  };
  if (const char* v = given("DEMI_CPU_ISA")) t.cpu_isa = v;
  if (const char* v = given("DEMI_CPU_BF16_ROUTE")) t.bf16_route = v;
  if (const char* v = given("DEMI_WINOGRAD")) t.winograd = read_switch("DEMI_WINOGRAD", v);
  if (const char* v = given("DEMI_WINOGRAD_F4")) t.winograd_f4 = read_switch("DEMI_WINOGRAD_F4", v);
  if (const char* v = given("DEMI_IMPLICIT_CONV")) t.implicit_conv = read_switch("DEMI_IMPLICIT_CONV", v);
  if (const char* v = given("DEMI_WINOGRAD_DOT_COLS")) t.winograd_dot_cols = read_dot_cols(v);
  if (const char* v = given("DEMI_BF16_WEIGHT_GRAD")) t.bf16_weight_grad = read_weight_grad(v);
  return t;
}

const Tuning& tuning() {
  if (const Tuning* t = reread.load(std::memory_order_acquire)) return *t;
  static const Tuning from_env = read_tuning(std::getenv);  // a throw leaves it unset: the next call reports again
  return from_env;
}

std::string describe(const Tuning& t) {
  if (t.set.empty()) return "tuning: defaults";
  std::string s = "tuning:";
  for (const std::string& v : t.set) s += " " + v;
  return s;
}

void reread_tuning_for_testing() {
  static Tuning again;
  again = read_tuning(std::getenv);
  reread.store(&again, std::memory_order_release);
}

}  // namespace demi::backend::cpu

namespace demi::backend {

std::string cpu_tuning() { return cpu::describe(cpu::tuning()); }

}  // namespace demi::backend
