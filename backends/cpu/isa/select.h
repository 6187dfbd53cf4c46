// The decisions of select.cpp as plain functions of what the CPU has, so that tests can run them
// on made-up CPUs (an AVX2-only machine, one without AMX permission) as well as on this one.
// Baseline code only: never included by a variant file.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, os_avx = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, os_avx512 = false;
  bool avx512_bf16 = false;
  bool amd = false;  // vendor AuthenticAMD: Zen 4 and later run vdpbf16ps at the FMA rate
  bool amx_tile = false, amx_bf16 = false, os_amx = false, amx_permitted = false;
};

// This CPU's features (cpuid, xgetbv; on Linux also asks for AMX tile permission when it has AMX).
CpuFeatures detect_features();
// XCR0, which vector state the OS saves (baseline.cpp, compiled for plain x86-64; call it only when
// cpuid reports OSXSAVE).
uint64_t xgetbv0();
// What `level` needs that the CPU, the OS or this build lacks, comma-separated ("" when nothing).
std::string missing_features(Level level, const CpuFeatures& features);
// The level DEMI_CPU_ISA=`requested` selects (nullptr or "": the highest usable one), given what each
// level misses. Throws demi::Error for an unknown name or a level that misses something.
Level resolve_level(const char* requested, const std::string (&missing)[kNumLevels]);
// Which bf16 GEMMs take `level`'s bf16 tile on a CPU with `features` (isa::Bf16Route), as measured
// (docs/BENCHMARKS.md).
Bf16Route preferred_bf16_route(Level level, const CpuFeatures& features);
// The route in use: `preferred` unless DEMI_CPU_BF16_ROUTE=`requested` (widen, non_winograd or
// everything) overrides it, for A/B runs. Throws demi::Error for an unknown name, or a route other
// than widen on a level without a bf16 tile.
Bf16Route resolve_bf16_route(const char* requested, Level level, bool has_tile, Bf16Route preferred);

}  // namespace demi::backend::cpu::isa
