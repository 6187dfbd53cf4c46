// Pins backends/cpu/isa/: the choice of ISA level (cpuid, DEMI_CPU_ISA, clear errors for a level the
// CPU lacks, checked on made-up CPUs too) and every level's microkernels against the plain C++
// oracle (the scalar table): GEMM tiles, the transpose, Winograd transforms and F(4x4)'s column
// moves, half conversions, GELU. The 16-bit kernels are pinned in test_isa_half.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa/select.h"
#include "backends/cpu/isa_test.h"
#include "backends/cpu/tuning.h"
#include "backends/kernels.h"

namespace demi::backend::cpu::isa {
namespace {

using demi_test::IsaFixture;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void missing_of(const CpuFeatures& f, std::string (&missing)[kNumLevels]) {
  for (int i = 0; i < kNumLevels; ++i) missing[i] = missing_features(static_cast<Level>(i), f);
}

CpuFeatures avx2_only() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = f.os_avx = true;
  return f;
}

TEST(IsaSelect, ReportsTheActiveLevel) {
  EXPECT_STREQ(cpu_isa(), active().name);
  if (const std::string& asked = tuning().cpu_isa; !asked.empty()) {
    EXPECT_EQ(cpu_isa(), asked) << "DEMI_CPU_ISA must set the level";
    return;
  }
  Level best = Level::Scalar;
  for (Level level : demi_test::isa_levels()) {
    if (table(level)) best = level;
  }
  EXPECT_STREQ(cpu_isa(), level_name(best)) << "without DEMI_CPU_ISA the highest usable level runs";
}

TEST(IsaSelect, ReportsTheActiveBf16Route) {
  const char* names[] = {"widen", "non_winograd", "everything"};  // Bf16Route's order
  EXPECT_STREQ(cpu_bf16_route(), names[static_cast<int>(active().bf16_route)]);
  const std::string& asked = tuning().bf16_route;  // DEMI_CPU_BF16_ROUTE
  if (!asked.empty()) {
    EXPECT_EQ(cpu_bf16_route(), asked) << "DEMI_CPU_BF16_ROUTE must set the route";
  }
  demi_test::IsaGuard scalar(Level::Scalar);  // the oracle runs every bf16 path on its tile, unless told
  EXPECT_EQ(cpu_bf16_route(), asked.empty() ? "everything" : asked) << "a test's level takes the route too";
}

TEST(IsaSelect, DetectionAgreesWithTheTables) {
  const CpuFeatures f = detect_features();
  for (Level level : demi_test::isa_levels()) {
    const char* missing = nullptr;
    const Table* t = table(level, &missing);
    EXPECT_EQ(missing_features(level, f), missing) << level_name(level);
    EXPECT_EQ(t != nullptr, std::string(missing).empty()) << level_name(level);
    if (t) {
      EXPECT_EQ(t->level, level);
    }
  }
  EXPECT_NE(table(Level::Scalar), nullptr) << "the plain C++ level runs everywhere";
}

TEST(IsaSelect, UnknownNameIsAClearError) {
  std::string missing[kNumLevels];
  missing_of(avx2_only(), missing);
  const std::string msg = error_of([&] { resolve_level("avx1024", missing); });
  EXPECT_NE(msg.find("DEMI_CPU_ISA='avx1024' is not an ISA level"), std::string::npos) << msg;
  EXPECT_NE(msg.find("scalar, avx2, avx512, avx512_bf16, amx"), std::string::npos) << msg;
}

TEST(IsaSelect, AnAvx2OnlyCpuRefusesAvx512WithTheMissingFeature) {
  std::string missing[kNumLevels];
  missing_of(avx2_only(), missing);
  EXPECT_EQ(resolve_level(nullptr, missing), Level::Avx2);
  EXPECT_EQ(resolve_level("", missing), Level::Avx2);
  EXPECT_EQ(resolve_level("avx2", missing), Level::Avx2);
  EXPECT_EQ(resolve_level("scalar", missing), Level::Scalar);
  const std::string msg = error_of([&] { resolve_level("avx512", missing); });
  EXPECT_NE(msg.find("DEMI_CPU_ISA=avx512: this CPU lacks AVX512F"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the highest level it supports is avx2"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { resolve_level("amx", missing); }).find("AMX-TILE, AMX-BF16"), std::string::npos);
}

TEST(IsaSelect, NamesWhatEachLevelNeeds) {
  CpuFeatures f;  // a CPU with nothing
  EXPECT_EQ(missing_features(Level::Scalar, f), "");
  EXPECT_NE(missing_features(Level::Avx2, f).find("AVX2, FMA, F16C"), std::string::npos);
  f = avx2_only();
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;  // AVX-512 in the CPU, not enabled by the OS
  EXPECT_NE(missing_features(Level::Avx512, f).find("OS support for AVX-512 state"), std::string::npos);
  f.os_avx512 = true;
  EXPECT_EQ(missing_features(Level::Avx512, f), "");
  EXPECT_NE(missing_features(Level::Avx512Bf16, f).find("AVX512_BF16"), std::string::npos);
  f.avx512_bf16 = f.amx_tile = f.amx_bf16 = f.os_amx = true;  // AMX without Linux's permission
  EXPECT_NE(missing_features(Level::Amx, f).find("arch_prctl"), std::string::npos) << missing_features(Level::Amx, f);
}

TEST(IsaSelect, ALevelTheCpuLacksCannotBeMadeActive) {
  for (Level level : demi_test::isa_levels()) {
    const char* missing = nullptr;
    if (table(level, &missing)) continue;
    const std::string msg = error_of([&] { set_active_for_testing(level); });
    EXPECT_NE(msg.find(missing), std::string::npos) << msg;
    EXPECT_STREQ(cpu_isa(), active().name) << "a refused level leaves the active one alone";
  }
}

TEST(IsaSelect, Bf16TakesTheTileOnlyWhereItWasMeasuredFaster) {
  CpuFeatures intel, amd;
  amd.amd = true;
  EXPECT_EQ(preferred_bf16_route(Level::Avx512Bf16, intel), Bf16Route::Widen) << "vdpbf16ps at half the FMA rate";
  EXPECT_EQ(preferred_bf16_route(Level::Avx512Bf16, amd), Bf16Route::Everything) << "Zen 4: vdpbf16ps at the FMA rate";
  for (const CpuFeatures& f : {intel, amd}) {
    EXPECT_EQ(preferred_bf16_route(Level::Avx2, f), Bf16Route::Widen);
    EXPECT_EQ(preferred_bf16_route(Level::Avx512, f), Bf16Route::Widen);
    EXPECT_EQ(preferred_bf16_route(Level::Amx, f), Bf16Route::Everything);
    EXPECT_EQ(preferred_bf16_route(Level::Scalar, f), Bf16Route::Everything) << "the oracle runs every bf16 path";
  }
  for (Level level : demi_test::isa_levels()) {
    if (const Table* t = table(level); t && !t->bf16.tile) {
      EXPECT_EQ(t->bf16_route, Bf16Route::Widen) << level_name(level);
    }
  }
}

TEST(IsaSelect, Bf16RouteOverrideIsCheckedByName) {
  EXPECT_EQ(resolve_bf16_route(nullptr, Level::Avx512Bf16, true, Bf16Route::NonWinograd), Bf16Route::NonWinograd);
  EXPECT_EQ(resolve_bf16_route("", Level::Amx, true, Bf16Route::Everything), Bf16Route::Everything);
  EXPECT_EQ(resolve_bf16_route("widen", Level::Amx, true, Bf16Route::Everything), Bf16Route::Widen);
  EXPECT_EQ(resolve_bf16_route("non_winograd", Level::Avx512Bf16, true, Bf16Route::Widen), Bf16Route::NonWinograd);
  EXPECT_EQ(resolve_bf16_route("everything", Level::Avx512Bf16, true, Bf16Route::Widen), Bf16Route::Everything);
  EXPECT_EQ(resolve_bf16_route("widen", Level::Avx2, false, Bf16Route::Widen), Bf16Route::Widen);
  std::string msg = error_of([] { resolve_bf16_route("everything", Level::Avx2, false, Bf16Route::Widen); });
  EXPECT_NE(msg.find("the ISA level avx2 has no bf16 tile"), std::string::npos) << msg;
  msg = error_of([] { resolve_bf16_route("fast", Level::Amx, true, Bf16Route::Everything); });
  EXPECT_NE(msg.find("DEMI_CPU_BF16_ROUTE='fast' is not a bf16 route"), std::string::npos) << msg;
}

// ---- every level's entries against the scalar table ----

class IsaKernels : public IsaFixture<Level> {
 protected:
  const Table& t() const { return active(); }
  const Table& oracle() const { return *table(Level::Scalar); }
};
INSTANTIATE_TEST_SUITE_P(Isa, IsaKernels, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);

std::vector<float> random_floats(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

TEST_P(IsaKernels, F32TileMatchesAnFp64Reference) {
  const F32Gemm& g = t().gemm;
  std::mt19937 rng(3);
  for (int64_t k : {1, 5, 64}) {
    for (int64_t rows : {int64_t{1}, g.mr}) {
      for (int64_t cols : {int64_t{1}, g.nr / 2 + 1, g.nr}) {
        for (int mode = 0; mode < 3; ++mode) {  // 0: from 0, 1: from init, 2: accumulate into C
          SCOPED_TRACE("k=" + std::to_string(k) + " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                       " mode=" + std::to_string(mode));
          const int64_t ldb = g.nr + 3, ldc = g.nr + 5;
          const std::vector<float> a = random_floats(rng, g.mr * k), b = random_floats(rng, k * ldb);
          const std::vector<float> init = random_floats(rng, g.mr);
          std::vector<float> c = random_floats(rng, g.mr * ldc);
          const std::vector<float> c0 = c;
          g.tile({a.data(), b.data(), ldb, c.data(), ldc, k, rows, cols, mode == 1 ? init.data() : nullptr, mode == 2});
          for (int64_t r = 0; r < g.mr; ++r) {
            for (int64_t j = 0; j < ldc; ++j) {
              double ref = c0[r * ldc + j];
              if (r < rows && j < cols) {
                ref = mode == 1 ? init[r] : mode == 2 ? c0[r * ldc + j] : 0.0;
                for (int64_t p = 0; p < k; ++p) ref += double(a[p * g.mr + r]) * b[p * ldb + j];
              }
              ASSERT_NEAR(c[r * ldc + j], ref, 1e-5 * std::sqrt(double(k)) + 1e-6) << "C[" << r << "][" << j << "]";
            }
          }
        }
      }
    }
  }
}

TEST_P(IsaKernels, F32DotTileMatchesAnFp64Reference) {
  const F32Gemm& g = t().gemm;
  std::mt19937 rng(5);
  // k: one partial vector, whole vectors, whole vectors and a tail. cols: a strip of one partial
  // block, one whole block, whole blocks and a partial one, only whole blocks.
  for (int64_t k : {3, 32, 77}) {
    for (int64_t rows : {int64_t{1}, g.dr - 1, g.dr}) {
      for (int64_t cols : {int64_t{1}, g.dc - 1, g.dc, 2 * g.dc + 1, 3 * g.dc}) {
        if (cols < 1) continue;
        for (bool accumulate : {false, true}) {
          SCOPED_TRACE("k=" + std::to_string(k) + " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                       (accumulate ? " accumulate" : ""));
          const int64_t lda = k + 3, ldb = k + 5, ldc = 3 * g.dc + 2;
          // Only the valid rows exist: a tile that read past them would fault under the sanitizers.
          const std::vector<float> a = random_floats(rng, (rows - 1) * lda + k), b = random_floats(rng, (cols - 1) * ldb + k);
          std::vector<float> c = random_floats(rng, g.dr * ldc);
          const std::vector<float> c0 = c;
          g.dot_tile({a.data(), lda, b.data(), ldb, c.data(), ldc, k, rows, cols, accumulate});
          for (int64_t r = 0; r < g.dr; ++r) {
            for (int64_t j = 0; j < ldc; ++j) {
              double ref = c0[r * ldc + j];
              if (r < rows && j < cols) {
                ref = accumulate ? ref : 0.0;
                for (int64_t p = 0; p < k; ++p) ref += double(a[r * lda + p]) * b[j * ldb + p];
              }
              ASSERT_NEAR(c[r * ldc + j], ref, 1e-5 * std::sqrt(double(k)) + 1e-6) << "C[" << r << "][" << j << "]";
            }
          }
        }
      }
    }
  }
}

TEST_P(IsaKernels, TransposeMatchesTheOracleBitForBit) {
  std::mt19937 rng(4);
  for (int64_t m : {3, 4, 8, 12, 21}) {  // 8-row blocks, a 4-row block, the rest
    for (int64_t n : {1, 8, 19}) {
      const std::vector<float> src = random_floats(rng, m * (n + 2));
      std::vector<float> got(n * (m + 1), -7.0f), want(n * (m + 1), -7.0f);
      t().gemm.transpose(src.data(), n + 2, m, n, got.data(), m + 1);
      oracle().gemm.transpose(src.data(), n + 2, m, n, want.data(), m + 1);
      EXPECT_EQ(got, want) << m << "x" << n;
    }
  }
}

// The transforms only add and subtract, in the same order on every level: results are bit-exact.
TEST_P(IsaKernels, WinogradTransformsMatchTheOracleBitForBit) {
  const Winograd& w = t().winograd;
  const Winograd& o = oracle().winograd;
  std::mt19937 rng(5);
  for (int64_t size : {1, 4, 7, 8, 13, 15, 16, 32, 33}) {
    SCOPED_TRACE("plane " + std::to_string(size) + "x" + std::to_string(size));
    const int64_t h = size, wd = size, th = (h + 1) / 2, tw = (wd + 1) / 2, n = tw + 1, rows = 2 * th + 2;
    const std::vector<float> x = random_floats(rng, h * wd);
    auto split = [&](const Winograd& k, std::vector<float>& e, std::vector<float>& od) {
      e.assign(rows * n, 9.0f), od.assign(rows * n, 9.0f);
      k.split_columns(x.data(), h, wd, n, rows, e.data(), od.data());
    };
    std::vector<float> e1, o1, e2, o2;
    split(w, e1, o1);
    split(o, e2, o2);
    ASSERT_EQ(e1, e2);
    ASSERT_EQ(o1, o2);
    // One image, then a lane group of as many images as the level's lanes hold.
    const int64_t images = tw <= w.lanes / 2 ? w.lanes / tw : 1, lanes = images * tw, ld = th * lanes;
    // split_lanes: image g's plane (x shifted by g, so that lanes differ) in lanes g * tw .. of the
    // views, which are e[tx], e[tx + 1], o[tx], o[tx + 1] of the image's split_columns; every lane of
    // a group is written (the two start from different values). A full group, then one image short.
    std::vector<float> views(4 * rows * lanes, 9.0f), views_o(4 * rows * lanes, images > 1 ? 7.0f : 9.0f);
    const std::vector<float> xs = random_floats(rng, h * wd + images);
    for (int64_t imgs = images; imgs >= images - 1 && imgs > 1; --imgs) {  // lane groups: w <= 2 tw <= lanes
      const float* planes[16];
      for (int64_t g = 0; g < imgs; ++g) planes[g] = xs.data() + g;
      const int64_t lw = imgs * tw;
      std::vector<float> got(4 * rows * lw, 9.0f), want(4 * rows * lw, 7.0f);
      float *p = got.data(), *q = want.data();
      w.split_lanes(planes, imgs, h, wd, tw, rows, p, p + rows * lw, p + 2 * rows * lw, p + 3 * rows * lw);
      o.split_lanes(planes, imgs, h, wd, tw, rows, q, q + rows * lw, q + 2 * rows * lw, q + 3 * rows * lw);
      ASSERT_EQ(got, want) << imgs << " images";
      for (int64_t g = 0; g < imgs; ++g) {
        std::vector<float> e, od;
        e.assign(rows * n, 9.0f), od.assign(rows * n, 9.0f);
        o.split_columns(planes[g], h, wd, n, rows, e.data(), od.data());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t tx = 0; tx < tw; ++tx) {
            const int64_t at = r * lw + g * tw + tx;
            ASSERT_EQ(q[at], e[r * n + tx]) << "e0 row " << r << " tile " << tx;
            ASSERT_EQ(q[rows * lw + at], e[r * n + tx + 1]) << "e1 row " << r << " tile " << tx;
            ASSERT_EQ(q[2 * rows * lw + at], od[r * n + tx]) << "o0 row " << r << " tile " << tx;
            ASSERT_EQ(q[3 * rows * lw + at], od[r * n + tx + 1]) << "o1 row " << r << " tile " << tx;
          }
        }
      }
      if (imgs == images) views = got, views_o = want;
    }
    ASSERT_EQ(views, views_o);
    const float* p = views.data();
    const SplitLanes s{p, p + rows * lanes, p + 2 * rows * lanes, p + 3 * rows * lanes, lanes, lanes};
    std::vector<float> v1(16 * ld, 5.0f), v2(16 * ld, 5.0f);
    w.transform_input(s, th, v1.data(), ld);
    o.transform_input(s, th, v2.data(), ld);
    ASSERT_EQ(v1, v2);
    w.transform_input({e1.data(), e1.data() + 1, o1.data(), o1.data() + 1, n, tw}, th, v1.data(), th * tw);
    o.transform_input({e1.data(), e1.data() + 1, o1.data(), o1.data() + 1, n, tw}, th, v2.data(), th * tw);
    ASSERT_EQ(v1, v2);
    // Output transform of random M, and the gradient's split and transform.
    const std::vector<float> m = random_floats(rng, 16 * ld);
    for (int64_t imgs : {int64_t{1}, images}) {
      std::vector<float> y1(imgs * h * wd, 3.0f), y2(imgs * h * wd, 3.0f);
      float* planes1[16];
      float* planes2[16];
      for (int64_t g = 0; g < imgs; ++g) planes1[g] = y1.data() + g * h * wd, planes2[g] = y2.data() + g * h * wd;
      w.transform_output(m.data(), ld, h, wd, th, tw, imgs, 0.25f, planes1);
      o.transform_output(m.data(), ld, h, wd, th, tw, imgs, 0.25f, planes2);
      ASSERT_EQ(y1, y2) << imgs << " images";
    }
    std::vector<float> se1(4 * th * lanes, 0.0f), se2(4 * th * lanes, 0.0f);
    for (int64_t g = 0; g < images; ++g) {
      w.split_grad_output(xs.data() + g, h, wd, lanes, g * tw, se1.data(), se1.data() + 2 * th * lanes);
      o.split_grad_output(xs.data() + g, h, wd, lanes, g * tw, se2.data(), se2.data() + 2 * th * lanes);
    }
    ASSERT_EQ(se1, se2);
    // split_grad_lanes: the same rows for a whole group at once (every row written), and for a group
    // one image short.
    for (int64_t imgs = images; imgs >= images - 1 && imgs > 1; --imgs) {
      const float* planes[16];
      for (int64_t g = 0; g < imgs; ++g) planes[g] = xs.data() + g;
      const int64_t lw = imgs * tw;
      std::vector<float> got(4 * th * lw, 9.0f), want(4 * th * lw, 0.0f);
      w.split_grad_lanes(planes, imgs, h, wd, tw, 2 * th, got.data(), got.data() + 2 * th * lw);
      for (int64_t g = 0; g < imgs; ++g) o.split_grad_output(planes[g], h, wd, lw, g * tw, want.data(), want.data() + 2 * th * lw);
      ASSERT_EQ(got, want) << imgs << " images";
      std::vector<float> oracle_rows(4 * th * lw, 7.0f);
      o.split_grad_lanes(planes, imgs, h, wd, tw, 2 * th, oracle_rows.data(), oracle_rows.data() + 2 * th * lw);
      ASSERT_EQ(oracle_rows, want) << imgs << " images, oracle";
      if (imgs == images) se1 = got;
    }
    std::vector<float> z1(16 * ld, 1.0f), z2(16 * ld, 1.0f);
    w.transform_grad_output(se1.data(), se1.data() + 2 * th * lanes, th, lanes, z1.data(), ld);
    o.transform_grad_output(se1.data(), se1.data() + 2 * th * lanes, th, lanes, z2.data(), ld);
    ASSERT_EQ(z1, z2);
  }
}

// F(4x4)'s column moves only copy (and add the bias): bit-exact, and nothing written outside the
// views' tiles or the output row (the buffers' sentinels stay).
TEST_P(IsaKernels, Winograd4ColumnMovesMatchTheOracleBitForBit) {
  const Winograd4& w = t().winograd4;
  const Winograd4& o = oracle().winograd4;
  std::mt19937 rng(6);
  for (int64_t tiles : {1, 2, 3, 4, 5, 7, 8, 9, 16}) {
    const std::vector<float> line = random_floats(rng, 4 * tiles + 2);  // exactly as long as read
    const int64_t stride = tiles + 3;
    std::vector<float> got(6 * stride, 9.0f), want(6 * stride, 9.0f);
    w.split_row(line.data(), tiles, got.data(), stride);
    o.split_row(line.data(), tiles, want.data(), stride);
    ASSERT_EQ(got, want) << tiles << " tiles";
    for (int64_t j = 0; j < 6; ++j) {
      for (int64_t tx = 0; tx < stride; ++tx) {
        ASSERT_EQ(want[j * stride + tx], tx < tiles ? line[4 * tx + j] : 9.0f) << "view " << j << " tile " << tx;
      }
    }
  }
  for (int64_t wd : {1, 2, 3, 4, 5, 7, 8, 13, 15, 16, 17, 31, 32}) {
    const int64_t tiles = (wd + 3) / 4, stride = tiles + 2;
    const std::vector<float> runs = random_floats(rng, 3 * stride + tiles);  // the last run ends the buffer
    std::vector<float> got(wd + 5, 3.0f), want(wd + 5, 3.0f);
    w.interleave_row(runs.data(), stride, wd, 0.5f, got.data());
    o.interleave_row(runs.data(), stride, wd, 0.5f, want.data());
    ASSERT_EQ(got, want) << "width " << wd;
    for (int64_t x = 0; x < wd + 5; ++x) {
      ASSERT_EQ(want[x], x < wd ? runs[(x % 4) * stride + x / 4] + 0.5f : 3.0f) << "column " << x;
    }
  }
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST_P(IsaKernels, ConversionsMatchTheOracleBitForBit) {
  // Every half and bf16 bit pattern to fp32 (NaNs included, quieted as F16C does).
  std::vector<uint16_t> all(65536 + 5);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (auto to_f32 : {&Convert::f16_to_f32, &Convert::bf16_to_f32}) {
    std::vector<float> got(all.size()), want(all.size());
    (t().convert.*to_f32)(all.data(), got.data(), static_cast<int64_t>(all.size()));
    (oracle().convert.*to_f32)(all.data(), want.data(), static_cast<int64_t>(all.size()));
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(bits(got[i]), bits(want[i])) << "pattern " << i;
  }
  // fp32 to half: ties, subnormals, overflow, NaN and random bit patterns.
  std::vector<float> values = {0.0f, -0.0f, 1.0f + 0x1p-11f, 1.0f + 0x1p-8f, 0x1p-25f, 0x1.8p-25f, 0x1p-24f,
                               65504.0f, 65519.0f, 65520.0f, 3.0e38f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-45f};
  std::mt19937 rng(6);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t b = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &b, 4);
    values.push_back(f);
  }
  const int64_t n = static_cast<int64_t>(values.size());  // 100016, a multiple of 16
  for (auto to_half : {&Convert::f32_to_f16, &Convert::f32_to_bf16}) {
    for (int64_t len : {n, n - 3, n - 9}) {  // + one 8-value step and 5 single values; + 7 single values
      std::vector<uint16_t> got(values.size(), 0xabcd), want(values.size(), 0xabcd);
      (t().convert.*to_half)(values.data(), got.data(), len);
      (oracle().convert.*to_half)(values.data(), want.data(), len);
      for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(got[i], want[i]) << "value " << values[i] << " of " << len;
    }
  }
}

using GeluEntry = void (*)(const float* x, float* cdf, float* pdf, int64_t n);

// Runs `entry` and the oracle's double kernel on x (whole, and cut at each of `tails` for the
// ragged ends): NaN where the oracle gives NaN; where the oracle's value is below `flush` in
// magnitude, anything no larger than `flush`; elsewhere within a relative `tolerance`. Then the
// entry once without a pdf.
void expect_gelu_entry_matches(GeluEntry entry, GeluEntry oracle, const std::vector<float>& x, float tolerance,
                               float flush, std::initializer_list<int64_t> tails) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<int64_t> lengths = {n};
  lengths.insert(lengths.end(), tails);
  for (int64_t len : lengths) {
    std::vector<float> cdf(n, -1.0f), pdf(n, -1.0f), cdf_o(n, -1.0f), pdf_o(n, -1.0f);
    entry(x.data(), cdf.data(), pdf.data(), len);
    oracle(x.data(), cdf_o.data(), pdf_o.data(), len);
    for (int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE("x = " + std::to_string(x[i]) + " i = " + std::to_string(i));
      for (auto [got, want] : {std::pair{cdf[i], cdf_o[i]}, std::pair{pdf[i], pdf_o[i]}}) {
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got));
        } else if (std::fabs(want) < flush) {
          ASSERT_LE(std::fabs(got), flush) << got << " vs " << want;
        } else {
          ASSERT_LE(std::fabs(got - want), std::fabs(want) * tolerance) << got << " vs " << want;
        }
      }
    }
  }
  std::vector<float> cdf(4, -1.0f);
  entry(x.data(), cdf.data(), nullptr, 4);  // no pdf asked for
  EXPECT_NEAR(cdf[0], 0.5f, 1e-7);
}

TEST_P(IsaKernels, GeluCdfAndPdfMatchTheOracleWithinAnUlp) {
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 3.0f, -3.0f, 8.0f, -8.0f, 13.0f, -13.0f, 40.0f,
                          -40.0f, INFINITY, -INFINITY, NAN};
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> dist(-9.0f, 9.0f);
  for (int i = 0; i < 2000; ++i) x.push_back(dist(rng));
  expect_gelu_entry_matches(t().gelu.normal_cdf_pdf, oracle().gelu.normal_cdf_pdf, x, 0x1p-23f, 0.0f, {3, 13});
}

TEST_P(IsaKernels, GeluHalfEntryIsWithinTwoToTheMinus17OfTheOracle) {
  // normal_cdf_pdf_half feeds results that are rounded to fp16 (11 bits) or bf16 next; the AVX2 and
  // AVX-512 levels compute it in fp32. Where the true value leaves fp32's normal range (|x| > ~13) it may
  // flush to 0.
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 3.0f, -3.0f, 8.0f, -8.0f, 12.0f, -12.0f, 13.0f,
                          -13.0f, 40.0f, -40.0f, INFINITY, -INFINITY, NAN};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-12.0f, 12.0f);
  for (int i = 0; i < 4000; ++i) x.push_back(dist(rng));
  expect_gelu_entry_matches(t().gelu.normal_cdf_pdf_half, oracle().gelu.normal_cdf_pdf, x, 0x1p-17f, 0x1p-126f,
                            {5, 21});
}

TEST_P(IsaKernels, GeluHalfIsItsDefinitionBitForBit) {
  // gelu_half against isa.h's definition, composed from this level's normal_cdf_pdf_half and the
  // scalar conversions: the same bits, forward and backward, bf16 and fp16, with and without each
  // rounding, in place and ragged.
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 3.0f, -3.0f, 8.0f, -8.0f, 13.0f, -13.0f,
                          70000.0f, -70000.0f, 65519.0f, INFINITY, -INFINITY, NAN, 1.00390625f, 1.001953125f};
  std::mt19937 rng(10);
  std::uniform_real_distribution<float> dist(-12.0f, 12.0f), grad(-3.0f, 3.0f);
  for (int i = 0; i < 3000; ++i) x.push_back(dist(rng));
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> g(n);
  for (float& v : g) v = grad(rng);
  g[1] = NAN, g[2] = INFINITY;
  using isa::HalfType;
  for (HalfType type : {HalfType::Bf16, HalfType::F16}) {
    const auto round = [&](float v) {
      uint16_t h;
      float back;
      const isa::Convert& c = oracle().convert;
      (type == HalfType::F16 ? c.f32_to_f16 : c.f32_to_bf16)(&v, &h, 1);
      (type == HalfType::F16 ? c.f16_to_f32 : c.bf16_to_f32)(&h, &back, 1);
      return back;
    };
    for (bool round_x : {false, true}) {
      std::vector<float> xr(n), cdf(n), pdf(n);
      for (int64_t i = 0; i < n; ++i) xr[i] = round_x ? round(x[i]) : x[i];
      t().gelu.normal_cdf_pdf_half(xr.data(), cdf.data(), pdf.data(), n);
      for (bool round_y : {false, true}) {
        for (int64_t len : {n, int64_t{5}, int64_t{21}}) {
          for (bool backward : {false, true}) {
            SCOPED_TRACE(std::string(type == HalfType::F16 ? "fp16" : "bf16") + (backward ? " backward" : " forward") +
                         " of " + std::to_string(len) + (round_x ? ", x rounded" : "") +
                         (round_y ? ", y rounded" : ""));
            const float* gp = backward ? g.data() : nullptr;
            std::vector<float> got(n, -7.0f), in_place = x;
            t().gelu.gelu_half(x.data(), gp, got.data(), len, type, round_x, round_y);
            t().gelu.gelu_half(in_place.data(), gp, in_place.data(), len, type, round_x, round_y);
            for (int64_t i = 0; i < n; ++i) {
              float want = backward ? g[i] * std::fma(xr[i], pdf[i], cdf[i]) : xr[i] * cdf[i];
              if (round_y) want = round(want);
              for (auto [v, w] : {std::pair{got[i], i < len ? want : -7.0f}, std::pair{in_place[i], i < len ? want : x[i]}}) {
                if (std::isnan(w)) {
                  ASSERT_TRUE(std::isnan(v)) << "x = " << x[i] << " i = " << i;
                } else {
                  uint32_t vb, wb;
                  std::memcpy(&vb, &v, 4), std::memcpy(&wb, &w, 4);
                  ASSERT_EQ(vb, wb) << "x = " << x[i] << " i = " << i << ": " << v << " vs " << w;
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace demi::backend::cpu::isa
