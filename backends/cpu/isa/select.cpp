// Picks the CPU backend's ISA level once: cpuid + xgetbv for what the CPU and OS support, Linux's
// permission request for AMX tile data, then DEMI_CPU_ISA (read by tuning.h) to force a lower level.
// Compiled with the library's baseline flags, whose CPU baseline.cpp checks first.
#include <array>
#include <atomic>
#include <cstring>
#include <string>

#include "backends/cpu/isa/select.h"
#include "backends/cpu/tuning.h"
#include "backends/kernels.h"
#include "framework/core/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace demi::backend::cpu::isa {
namespace {

constexpr const char* kNames[kNumLevels] = {"scalar", "avx2", "avx512", "avx512_bf16", "amx"};
constexpr const char* kRouteNames[] = {"widen", "non_winograd", "everything"};  // in Bf16Route's order

#if defined(__x86_64__)
// Linux hands out AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA,
// kernel 5.16+); without it the first tile instruction raises SIGILL.
bool request_amx_permission() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

}  // namespace

CpuFeatures detect_features() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  f.amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "Auth" "enti" "cAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  f.os_avx = avx && (xcr0 & 0x6) == 0x6;               // SSE and AVX state
  f.os_avx512 = f.os_avx && (xcr0 & 0xE0) == 0xE0;     // opmask, ZMM_Hi256, Hi16_ZMM
  f.os_amx = (xcr0 & 0x60000) == 0x60000;              // XTILECFG, XTILEDATA
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = b & (1u << 5);
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.amx_bf16 = d & (1u << 22);
    f.amx_tile = d & (1u << 24);
    const unsigned max_subleaf = a;
    if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = a & (1u << 5);
  }
  if (f.amx_tile && f.amx_bf16 && f.os_amx) f.amx_permitted = request_amx_permission();
#endif
  return f;
}

std::string missing_features(Level level, const CpuFeatures& f) {
  std::string m;
  auto need = [&m](bool have, const char* what) {
    if (!have) m += m.empty() ? what : std::string(", ") + what;
  };
  if (level >= Level::Avx2) {
#if !defined(__x86_64__)
    need(false, "an x86-64 CPU");
#endif
    need(f.avx2, "AVX2");
    need(f.fma, "FMA");
    need(f.f16c, "F16C");
    need(f.os_avx, "OS support for AVX state (XCR0)");
  }
  if (level >= Level::Avx512) {
    need(f.avx512f, "AVX512F");
    need(f.avx512bw, "AVX512BW");
    need(f.avx512vl, "AVX512VL");
    need(f.avx512dq, "AVX512DQ");
    need(f.os_avx512, "OS support for AVX-512 state (XCR0)");
  }
  if (level >= Level::Avx512Bf16) {
#if !defined(DEMI_ISA_AVX512BF16)
    need(false, "a compiler with -mavx512bf16 for this build");
#endif
    need(f.avx512_bf16, "AVX512_BF16");
  }
  if (level >= Level::Amx) {
#if !defined(DEMI_ISA_AMX)
    need(false, "a compiler with -mamx-bf16 for this build");
#endif
    need(f.amx_tile, "AMX-TILE");
    need(f.amx_bf16, "AMX-BF16");
    if (f.amx_tile && f.amx_bf16) {
      need(f.os_amx, "OS support for AMX tile state (XCR0)");
      if (f.os_amx) need(f.amx_permitted, "the Linux permission for AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM)");
    }
  }
  return m;
}

namespace {

std::string all_names() {
  std::string s;
  for (int i = 0; i < kNumLevels; ++i) s += std::string(i ? ", " : "") + kNames[i];
  return s;
}

Level best(const std::string (&missing)[kNumLevels]) {
  Level level = Level::Scalar;
  for (int i = 1; i < kNumLevels; ++i) {
    if (missing[i].empty()) level = static_cast<Level>(i);
  }
  return level;
}

// Detection and the tables, made on first use (after every variant file's constant entries).
struct Registry {
  CpuFeatures features = detect_features();
  std::string missing[kNumLevels];
  Table tables[kNumLevels] = {};  // a level this build lacks also has a reason in `missing`

  Registry() {
    for (int i = 0; i < kNumLevels; ++i) missing[i] = missing_features(static_cast<Level>(i), features);
    auto add = [this](Level level, const F32Gemm& gemm, const Winograd& winograd, const Winograd4& winograd4,
                      const Convert& convert, const Gelu& gelu, const Bf16Gemm& bf16,
                      const BatchNormHalf& batch_norm_bf16, const BatchNormHalf& batch_norm_f16) {
      const int i = static_cast<int>(level);
      tables[i] = Table{level, kNames[i], gemm, winograd, winograd4, convert, gelu, bf16,
                        preferred_bf16_route(level, features), batch_norm_bf16, batch_norm_f16};
    };
    constexpr Bf16Gemm kNoBf16{0, 0, 0, nullptr, nullptr, nullptr, nullptr};
    add(Level::Scalar, kGemmScalar, kWinogradScalar, kWinograd4Scalar, kConvertScalar, kGeluScalar, kBf16Scalar, kBatchNormBf16Scalar,
        kBatchNormF16Scalar);
#if defined(DEMI_ISA_X86)
    add(Level::Avx2, kGemmAvx2, kWinogradAvx2, kWinograd4Avx2, kConvertAvx2, kGeluAvx2, kNoBf16, kBatchNormBf16Avx2,
        kBatchNormF16Avx2);
    add(Level::Avx512, kGemmAvx512, kWinogradAvx512, kWinograd4Avx2, kConvertAvx512, kGeluAvx512, kNoBf16, kBatchNormBf16Avx512,
        kBatchNormF16Avx512);
#endif
#if defined(DEMI_ISA_AVX512BF16)
    add(Level::Avx512Bf16, kGemmAvx512, kWinogradAvx512, kWinograd4Avx2, kConvertAvx512, kGeluAvx512, kBf16Avx512Bf16, kBatchNormBf16Avx512,
        kBatchNormF16Avx512);
#endif
#if defined(DEMI_ISA_AMX)
    add(Level::Amx, kGemmAvx512, kWinogradAvx512, kWinograd4Avx2, kConvertAvx512, kGeluAvx512, kBf16Amx, kBatchNormBf16Avx512,
        kBatchNormF16Avx512);
#endif
    (void)kNoBf16;
  }
  bool usable(Level level) const { return missing[static_cast<int>(level)].empty(); }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

// The library outside backends/cpu/isa is compiled for the build's baseline (-march, x86-64-v3 by
// default): a CPU below it would die on an illegal instruction in the first Eigen kernel.
void check_baseline(const Registry& r) {
  const char* baseline = nullptr;
  Level needs = Level::Scalar;
#if defined(__AVX512F__)
  baseline = "AVX-512 (this build's -march)", needs = Level::Avx512;
#elif defined(__AVX2__)
  baseline = "AVX2 + FMA + F16C (x86-64-v3, this build's -march)", needs = Level::Avx2;
#endif
  const std::string& missing = r.missing[static_cast<int>(needs)];
  DEMI_CHECK(baseline == nullptr || missing.empty(), "CPU backend: demi was built for ", baseline,
             " but this CPU lacks ", missing, "; rebuild with -DDEMI_MARCH=x86-64 (or x86-64-v2)");
}

const Table& choose() {
  const Registry& r = registry();
  check_baseline(r);
  const Tuning& t = tuning();
  const Table& level = r.tables[static_cast<int>(resolve_level(t.cpu_isa.c_str(), r.missing))];
  if (t.bf16_route.empty()) return level;
  static Table overridden;  // choose() runs once (active()'s static)
  overridden = level;
  overridden.bf16_route =
      resolve_bf16_route(t.bf16_route.c_str(), level.level, level.bf16.tile != nullptr, level.bf16_route);
  return overridden;
}

std::atomic<const Table*> testing_override{nullptr};

}  // namespace

const Table& active() {
  if (const Table* t = testing_override.load(std::memory_order_acquire)) return *t;
  static const Table& chosen = choose();  // a throw leaves it unset: the next call reports again
  return chosen;
}

Level resolve_level(const char* requested, const std::string (&missing)[kNumLevels]) {
  if (requested == nullptr || *requested == '\0') return best(missing);
  for (int i = 0; i < kNumLevels; ++i) {
    if (std::strcmp(requested, kNames[i]) != 0) continue;
    DEMI_CHECK(missing[i].empty(), "DEMI_CPU_ISA=", kNames[i], ": this CPU lacks ", missing[i],
               "; the highest level it supports is ", kNames[static_cast<int>(best(missing))],
               " (levels, lowest first: ", all_names(), ")");
    return static_cast<Level>(i);
  }
  DEMI_THROW("DEMI_CPU_ISA='", requested, "' is not an ISA level; use one of ", all_names(),
             " (or leave it unset for the best this CPU supports)");
}

Bf16Route preferred_bf16_route(Level level, const CpuFeatures& f) {
  switch (level) {
    case Level::Scalar:  // the oracle: every bf16 path runs on it in the tests
    case Level::Amx:     // 2x-7x the fp32 tile, 3x3 convolutions included
      return Bf16Route::Everything;
    case Level::Avx512Bf16:
      // An Emerald Rapids core issues one vdpbf16ps where it issues two FMAs: its 1024^3 GEMM ran at
      // 84 GFLOP/s against fp32's 138, so bf16 is widened there. AMD's Zen 4 issues it at the FMA
      // rate, twice the multiplies: 310-345 against 146-159 GFLOP/s, and every convolution layer and
      // pass of both nets faster than fp32 Winograd (docs/BENCHMARKS.md).
      return f.amd ? Bf16Route::Everything : Bf16Route::Widen;
    default:
      return Bf16Route::Widen;  // no bf16 tile
  }
}

Bf16Route resolve_bf16_route(const char* requested, Level level, bool has_tile, Bf16Route preferred) {
  if (requested == nullptr || *requested == '\0') return preferred;
  for (int i = 0; i < 3; ++i) {
    if (std::strcmp(requested, kRouteNames[i]) != 0) continue;
    const auto route = static_cast<Bf16Route>(i);
    DEMI_CHECK(route == Bf16Route::Widen || has_tile, "DEMI_CPU_BF16_ROUTE=", requested, ": the ISA level ",
               kNames[static_cast<int>(level)], " has no bf16 tile (avx512_bf16 and amx have one); use widen");
    return route;
  }
  DEMI_THROW("DEMI_CPU_BF16_ROUTE='", requested,
             "' is not a bf16 route; use widen, non_winograd or everything (or leave it unset)");
}

const Table* table(Level level, const char** missing) {
  const Registry& r = registry();
  const int i = static_cast<int>(level);
  if (missing) *missing = r.missing[i].c_str();
  return r.usable(level) ? &r.tables[i] : nullptr;
}

const char* level_name(Level level) { return kNames[static_cast<int>(level)]; }

Level set_active_for_testing(Level level) {
  const Registry& r = registry();
  const Level previous = active().level;
  const int i = static_cast<int>(level);
  DEMI_CHECK(r.usable(level), "set_active_for_testing(", kNames[i], "): this CPU lacks ", r.missing[i]);
  // DEMI_CPU_BF16_ROUTE reaches the tests' levels as it reaches a run's (choose()): on each level with
  // a bf16 tile, so that an Intel CPU's tests can run Zen 4's route (`vdpbf16ps` for every bf16 GEMM
  // and convolution) as well as its own. Levels without a tile keep widening.
  static const auto tables = [&r] {
    std::array<Table, kNumLevels> t;
    const char* route = tuning().bf16_route.c_str();
    for (int j = 0; j < kNumLevels; ++j) {
      t[j] = r.tables[j];
      if (r.usable(static_cast<Level>(j)) && t[j].bf16.tile != nullptr) {
        t[j].bf16_route = resolve_bf16_route(route, t[j].level, true, t[j].bf16_route);
      }
    }
    return t;
  }();
  testing_override.store(&tables[i], std::memory_order_release);
  return previous;
}

}  // namespace demi::backend::cpu::isa

namespace demi::backend {

const char* cpu_isa() { return cpu::isa::active().name; }
const char* cpu_bf16_route() { return cpu::isa::kRouteNames[static_cast<int>(cpu::isa::active().bf16_route)]; }

}  // namespace demi::backend
