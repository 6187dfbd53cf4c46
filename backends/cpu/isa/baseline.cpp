// The CPU the library's baseline was compiled for. Built for -march=x86-64-v3 (the default), the
// backend's code outside the variants uses AVX2, FMA, F16C and BMI anywhere (Eigen, the compiler's
// vectorised loops), so on an older CPU (Sandy Bridge, Pentium and Celeron up to Jasper Lake, a VM
// showing "qemu64") it died with SIGILL at its first kernel, without a word. This file is compiled
// for plain x86-64 (backends/CMakeLists.txt) and checks the CPU in a constructor of the highest
// priority, before any baseline code runs; it uses libc and <cpuid.h> only, since an inline C++
// function here could be swapped at link time for a copy compiled for the baseline.
// DEMI_BASELINE_LEVEL: 2, 3 or 4 for -march=x86-64-v2/-v3/-v4; not defined otherwise (x86-64,
// the compiler's default, or native: nothing to check).
#include <cpuid.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/isa/select.h"

namespace demi::backend::cpu::isa {

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

#if defined(DEMI_BASELINE_LEVEL)
namespace {

enum Reg { kEbx, kEcx };
struct Feature {
  int level;  // the x86-64-vN level that first requires it
  unsigned leaf;
  Reg reg;
  unsigned bit;
  const char* name;
};
constexpr Feature kFeatures[] = {
    {2, 1, kEcx, 0, "SSE3"},          {2, 1, kEcx, 9, "SSSE3"},         {2, 1, kEcx, 13, "CMPXCHG16B"},
    {2, 1, kEcx, 19, "SSE4.1"},       {2, 1, kEcx, 20, "SSE4.2"},       {2, 1, kEcx, 23, "POPCNT"},
    {2, 0x80000001, kEcx, 0, "LAHF"}, {3, 1, kEcx, 28, "AVX"},          {3, 7, kEbx, 5, "AVX2"},
    {3, 1, kEcx, 12, "FMA"},          {3, 1, kEcx, 29, "F16C"},         {3, 7, kEbx, 3, "BMI1"},
    {3, 7, kEbx, 8, "BMI2"},          {3, 0x80000001, kEcx, 5, "LZCNT"}, {3, 1, kEcx, 22, "MOVBE"},
    {4, 7, kEbx, 16, "AVX512F"},      {4, 7, kEbx, 17, "AVX512DQ"},     {4, 7, kEbx, 28, "AVX512CD"},
    {4, 7, kEbx, 30, "AVX512BW"},     {4, 7, kEbx, 31, "AVX512VL"},
};

bool has(const Feature& f) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(f.leaf, 0, &a, &b, &c, &d)) return false;
  return ((f.reg == kEbx ? b : c) >> f.bit) & 1u;
}

// Whether the OS saves the vector state the level's registers need (XCR0: SSE and AVX; and the
// AVX-512 opmask and upper ZMM state).
bool os_saves_state(int level) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (level < 3) return true;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return false;  // OSXSAVE
  const uint64_t need = level >= 4 ? 0xE6 : 0x6;
  return (xgetbv0() & need) == need;
}

void append(char* buf, size_t size, const char* text) {
  const size_t used = std::strlen(buf);
  if (used + 1 < size) std::strncat(buf, text, size - used - 1);
}

[[gnu::constructor(101)]] void check_baseline_cpu() {
  constexpr int kLevel = DEMI_BASELINE_LEVEL;
  char missing[256] = "";
  for (const Feature& f : kFeatures) {
    if (f.level > kLevel || has(f)) continue;
    if (missing[0]) append(missing, sizeof missing, ", ");
    append(missing, sizeof missing, f.name);
  }
  if (!missing[0] && !os_saves_state(kLevel)) append(missing, sizeof missing, "OS support for the AVX state (XCR0)");
  if (!missing[0]) return;
  char msg[1024] = "demi: this CPU lacks ";
  append(msg, sizeof msg, missing);
  append(msg, sizeof msg,
         kLevel == 2   ? ", part of x86-64-v2, which this build of demi needs (-DDEMI_MARCH=x86-64-v2). To run here, "
                         "rebuild demi with -DDEMI_MARCH=x86-64"
         : kLevel == 3 ? ", part of x86-64-v3 (Intel Haswell, AMD Excavator and later), which this build of demi needs "
                         "(-DDEMI_MARCH=x86-64-v3, the default). To run here, rebuild demi with -DDEMI_MARCH=x86-64 "
                         "(or x86-64-v2 where the CPU has SSE4.2)"
                       : ", part of x86-64-v4 (AVX-512), which this build of demi needs (-DDEMI_MARCH=x86-64-v4). "
                         "To run here, rebuild demi with the default -DDEMI_MARCH=x86-64-v3");
  append(msg, sizeof msg, ": the faster kernels are still picked at run time where a CPU has them.\n");
  const ssize_t written = write(STDERR_FILENO, msg, std::strlen(msg));
  (void)written;
  _exit(1);
}

}  // namespace
#endif

}  // namespace demi::backend::cpu::isa
