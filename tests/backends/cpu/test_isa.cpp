// Pins backends/cpu/isa/: the choice of ISA level (cpuid, DEMI_CPU_ISA, clear errors for a level the
// CPU lacks, checked on made-up CPUs too) and every level's microkernels against the plain C++
// oracle (the scalar table): GEMM tiles, the transpose, Winograd transforms and F(4x4)'s column
// moves, half conversions, batch norm's half passes.
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

// ---- batch norm's half passes (isa::BatchNormHalf), bf16 and fp16 ----

// One half type's bits: values through the scalar conversions, its table at a level, its
// rounding's relative error, the ReLU's zero band and the largest finite value.
struct HalfKind {
  const char* name;
  bool bf16;
  float value(uint16_t h) const {
    float f;
    (bf16 ? kConvertScalar.bf16_to_f32 : kConvertScalar.f16_to_f32)(&h, &f, 1);
    return f;
  }
  uint16_t of(float f) const {
    uint16_t h;
    (bf16 ? kConvertScalar.f32_to_bf16 : kConvertScalar.f32_to_f16)(&f, &h, 1);
    return h;
  }
  const BatchNormHalf& passes(const Table& t) const { return bf16 ? t.batch_norm_bf16 : t.batch_norm_f16; }
  double rounding() const { return bf16 ? 0x1p-8 : 0x1p-11; }
  float band() const { return bf16 ? 0x1p-134f : 0x1p-25f; }
  double max() const { return bf16 ? 3.38e38 : 65504.0; }
};
constexpr HalfKind kHalfKinds[] = {{"bf16", true}, {"fp16", false}};

// A channel of `planes` planes of hw half values, plane p at p * stride (the gaps hold a value that
// would show in any sum that read them): random values around `mean`, and `specials` at the start
// of plane 1 when asked for.
struct HalfChannel {
  int64_t planes, hw, stride;
  std::vector<uint16_t> data;
  HalfChannel(const HalfKind& h, std::mt19937& rng, int64_t planes_, int64_t hw_, float mean, float spread,
              const std::vector<float>& specials = {})
      : planes(planes_), hw(hw_), stride(hw_ + 19), data(static_cast<size_t>(planes_ * (hw_ + 19)), h.of(30000.0f)) {
    std::uniform_real_distribution<float> dist(mean - spread, mean + spread);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < hw; ++i) at(p, i) = h.of(dist(rng));
    for (size_t k = 0; k < specials.size() && planes > 1 && static_cast<int64_t>(k) < hw; ++k)
      at(1, static_cast<int64_t>(k)) = h.of(specials[k]);
  }
  uint16_t& at(int64_t p, int64_t i) { return data[static_cast<size_t>(p * stride + i)]; }
  uint16_t at(int64_t p, int64_t i) const { return data[static_cast<size_t>(p * stride + i)]; }
  BnPlanes view() const { return {data.data(), planes, hw, stride}; }
};

void expect_same_half(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << what << ": element " << i;
}
uint64_t bits64(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

TEST_P(IsaKernels, BatchNormHalfSumsMatchTheOracleBitForBitAndFp64) {
  // Plane lengths around the 32 lanes (tails of 0, 1 and 31) and the nets' planes (15x15, 31x31, 32x32).
  std::mt19937 rng(12);
  for (const HalfKind& h : kHalfKinds) {
    const BatchNormHalf &passes = h.passes(t()), &oracle_passes = h.passes(oracle());
    for (int64_t hw : {1, 31, 32, 33, 100, 225, 961, 1024}) {
      for (float mean : {0.0f, 1000.0f}) {
        SCOPED_TRACE(std::string(h.name) + ", hw " + std::to_string(hw) + ", mean " + std::to_string(mean));
        const HalfChannel x(h, rng, 5, hw, mean, 3.0f), g(h, rng, 5, hw, 0.0f, 1.0f);
        double sum = 0, sum_abs = 0;
        for (int64_t p = 0; p < x.planes; ++p)
          for (int64_t i = 0; i < hw; ++i) sum += h.value(x.at(p, i)), sum_abs += std::fabs(h.value(x.at(p, i)));
        const double got_sum = passes.sum(x.view());
        EXPECT_EQ(bits64(got_sum), bits64(oracle_passes.sum(x.view())));
        EXPECT_NEAR(got_sum, sum, 1e-13 * sum_abs);

        const double m = sum / static_cast<double>(x.planes * hw);
        const float hi = static_cast<float>(m), lo = static_cast<float>(m - hi);
        double sq = 0;
        for (int64_t p = 0; p < x.planes; ++p)
          for (int64_t i = 0; i < hw; ++i) sq += std::pow(h.value(x.at(p, i)) - m, 2);
        const double got_sq = passes.sum_squared_deviations(x.view(), hi, lo);
        EXPECT_EQ(bits64(got_sq), bits64(oracle_passes.sum_squared_deviations(x.view(), hi, lo)));
        EXPECT_NEAR(got_sq, sq, 1e-5 * sq);

        // Gradient sums under every mask: bit for bit the oracle's, and within fp32 sums of fp64.
        const BnNorm k{hi, lo, 0.75f, -0.25f};
        for (int side : {BnReluMask::kNone, 1, -1, 0}) {
          const BnReluMask mask{side, mean + 0.5f, k, h.band()};
          auto keep = [&](float xv) {
            if (side == 1) return xv > mask.t;
            if (side == -1) return xv < mask.t;
            if (side == 0) return ((xv - k.hi) - k.lo) * k.scale + k.shift > mask.band;
            return true;
          };
          double want_g = 0, want_gd = 0, gd_abs = 0;
          for (int64_t p = 0; p < x.planes; ++p) {
            for (int64_t i = 0; i < hw; ++i) {
              const float xv = h.value(x.at(p, i)), gv = h.value(g.at(p, i));
              if (!keep(xv)) continue;
              const double d = gv * (xv - static_cast<double>(hi));
              want_g += gv, want_gd += d, gd_abs += std::fabs(d);
            }
          }
          double sum_g = 0, sum_gd = 0, oracle_g = 0, oracle_gd = 0;
          passes.gradient_sums(x.view(), g.data.data(), g.stride, hi, mask, &sum_g, &sum_gd);
          oracle_passes.gradient_sums(x.view(), g.data.data(), g.stride, hi, mask, &oracle_g, &oracle_gd);
          EXPECT_EQ(bits64(sum_g), bits64(oracle_g)) << "side " << side;
          EXPECT_EQ(bits64(sum_gd), bits64(oracle_gd)) << "side " << side;
          EXPECT_NEAR(sum_g, want_g, 1e-12 * static_cast<double>(x.planes * hw)) << "side " << side;
          EXPECT_NEAR(sum_gd, want_gd, 1e-6 * gd_abs + 1e-30) << "side " << side;
        }
      }
    }
  }
}

TEST_P(IsaKernels, BatchNormHalfElementPassesMatchTheOracleBitForBit) {
  // normalize and grad_input, element by element: the level's bits are the oracle's, specials
  // included (NaN, infinities, zeros of both signs, subnormals, values at the ReLU's band), and the
  // oracle's are their definition in fp64 rounded once to the half type (within that rounding).
  std::mt19937 rng(13);
  const std::vector<float> specials = {NAN,   INFINITY, -INFINITY, 0.0f,    -0.0f,  0x1p-133f, -0x1p-133f, 0x1p-25f,
                                       -0x1p-25f, 1e-38f, -1e-38f, 0.5f, -0.5f, 3.0e38f, -3.0e38f, 60000.0f};
  for (const HalfKind& h : kHalfKinds) {
    const BatchNormHalf &passes = h.passes(t()), &oracle_passes = h.passes(oracle());
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 33, 225, 1024}) {
      SCOPED_TRACE(std::string(h.name) + ", n " + std::to_string(n));
      const HalfChannel x(h, rng, 2, n, 0.25f, 2.0f, specials), g(h, rng, 2, n, 0.0f, 1.0f, specials);
      const uint16_t* xp = x.data.data() + x.stride;  // plane 1: the specials first
      const uint16_t* gp = g.data.data() + g.stride;
      const float band = h.band();
      for (const BnNorm& k : {BnNorm{0.25f, 1e-9f, 1.5f, 0.125f}, BnNorm{0.25f, 0.0f, -2.0f, band / 2},
                              BnNorm{0.25f, 0.0f, 0.0f, -0.0f}}) {
        for (float relu_band : {-1.0f, band}) {
          std::vector<uint16_t> got(n + 3, 0xabcd), want(n + 3, 0xabcd);
          passes.normalize(xp, got.data(), n, k, relu_band);
          oracle_passes.normalize(xp, want.data(), n, k, relu_band);
          expect_same_half(got, want, "normalize, scale " + std::to_string(k.scale) + ", band " + std::to_string(relu_band));
          for (int64_t i = 0; i < n; ++i) {
            const double y = (static_cast<double>(h.value(xp[i])) - k.hi - k.lo) * k.scale + k.shift;
            const float w = h.value(want[i]);
            if (std::isnan(y)) {
              EXPECT_TRUE(std::isnan(w)) << i;
            } else if (relu_band >= 0 && y < -relu_band) {
              EXPECT_EQ(bits(w), 0u) << i << ": " << y;  // +0
            } else if (std::fabs(y) < 0.99 * h.max()) {
              EXPECT_NEAR(w, y, std::fabs(y) * h.rounding() + 0x1p-24 + 1e-6 * std::fabs(h.value(xp[i]) * k.scale)) << i;
            }
          }
        }
        for (int side : {BnReluMask::kNone, 1, -1, 0}) {
          const BnReluMask mask{side, 0.3f, k, band};
          std::vector<uint16_t> got(n + 3, 0xabcd), want(n + 3, 0xabcd);
          passes.grad_input(xp, gp, got.data(), n, 0.25f, mask, 1.5f, -0.75f, 0.0625f);
          oracle_passes.grad_input(xp, gp, want.data(), n, 0.25f, mask, 1.5f, -0.75f, 0.0625f);
          expect_same_half(got, want, "grad_input, side " + std::to_string(side));
          for (int64_t i = 0; i < n; ++i) {
            const float xv = h.value(xp[i]);
            const bool kept = side == 1    ? xv > 0.3f
                              : side == -1 ? xv < 0.3f
                              : side == 0  ? ((xv - k.hi) - k.lo) * k.scale + k.shift > mask.band
                                           : true;
            const double gx = (kept ? h.value(gp[i]) : 0.0) * 1.5 + (xv - 0.25) * -0.75 + 0.0625;
            const float w = h.value(want[i]);
            if (std::isnan(gx)) {
              EXPECT_TRUE(std::isnan(w)) << i;
            } else if (std::fabs(gx) < 0.99 * h.max()) {
              EXPECT_NEAR(w, gx, std::fabs(gx) * h.rounding() + 0x1p-24 + 1e-6 * (std::fabs(xv) + std::fabs(h.value(gp[i]))))
                  << i;
            }
          }
        }
      }
    }
  }
}

TEST_P(IsaKernels, Bf16TileSumsExactProductsInFp32) {
  const Bf16Gemm& g = t().bf16;
  if (!g.tile) GTEST_SKIP() << level_name(GetParam()) << " has no bf16 tile: bf16 is widened into the fp32 tile";
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-32, 32);
  for (int64_t k : {int64_t{1}, 2 * g.kb + 3}) {
    for (int64_t cols : {int64_t{1}, g.nr - 1, g.nr}) {
      for (int mode = 0; mode < 4; ++mode) {  // C = A B, init + A B, C + A B, bf16(init + A B)
        SCOPED_TRACE("k=" + std::to_string(k) + " cols=" + std::to_string(cols) + " mode=" + std::to_string(mode));
        const int64_t kp = (k + g.kb - 1) / g.kb * g.kb, rows = g.mr - 1, ldb = 2 * g.nr, ldc = g.nr + 1;
        // Small integers: exact in bf16, and every product and partial sum exact in fp32.
        auto value = [&] { return float(small(rng)); };
        auto to_bf16 = [](float f) { return static_cast<uint16_t>(bits(f) >> 16); };
        std::vector<float> a(g.mr * kp, 0.0f), b(kp * g.nr, 0.0f);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < k; ++j) a[r * kp + j] = value();
        for (int64_t j = 0; j < k; ++j)
          for (int64_t c = 0; c < g.nr; ++c) b[j * g.nr + c] = value();
        std::vector<uint16_t> ab(a.size()), bb(kp / 2 * ldb);
        for (size_t i = 0; i < a.size(); ++i) ab[i] = to_bf16(a[i]);
        for (int64_t j = 0; j < kp; ++j)
          for (int64_t c = 0; c < g.nr; ++c) bb[(j / 2) * ldb + 2 * c + j % 2] = to_bf16(b[j * g.nr + c]);
        std::vector<float> init(g.mr, 0.5f), c(g.mr * ldc, 2.0f);
        std::vector<uint16_t> c16(g.mr * ldc, 0x4000);  // bf16 2.0
        if (g.prepare) g.prepare();
        g.tile({ab.data(), kp, bb.data(), ldb, mode == 3 ? nullptr : c.data(), ldc, kp, rows, cols,
                mode & 1 ? init.data() : nullptr, mode == 2, 1, nullptr, mode == 3 ? c16.data() : nullptr});
        for (int64_t r = 0; r < g.mr; ++r) {
          for (int64_t j = 0; j < ldc; ++j) {
            float ref = 2.0f;  // untouched outside the tile's rows and columns
            if (r < rows && j < cols) {
              ref = mode & 1 ? 0.5f : mode == 2 ? 2.0f : 0.0f;
              for (int64_t p = 0; p < k; ++p) ref += a[r * kp + p] * b[p * g.nr + j];
            }
            if (mode == 3) {  // rounded once to nearest even (the sums here are exact in fp32)
              const uint32_t x = bits(ref);
              ASSERT_EQ(c16[r * ldc + j], static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16))
                  << "C[" << r << "][" << j << "] = " << ref;
            } else {
              ASSERT_EQ(c[r * ldc + j], ref) << "C[" << r << "][" << j << "]";
            }
          }
        }
      }
    }
  }
}

TEST_P(IsaKernels, Bf16TileSumsTapsAtTheirOffsets) {
  // taps > 1 (the implicit convolutions): product t takes A's columns [t kp, (t + 1) kp) and B at
  // b + b_offsets[t]; B here is one matrix of pairs read at three row offsets.
  const Bf16Gemm& g = t().bf16;
  if (!g.tile) GTEST_SKIP() << level_name(GetParam()) << " has no bf16 tile: bf16 is widened into the fp32 tile";
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-16, 16);
  auto to_bf16 = [](float f) { return static_cast<uint16_t>(bits(f) >> 16); };
  const int64_t kp = 2 * g.kb, taps = 3, rows = g.mr, cols = g.nr - 1, ldb = 2 * g.nr, ldc = g.nr;
  const int64_t b_rows = kp + 10;  // k rows of B; tap t starts at k row k0[t] (pair row k0[t] / 2)
  const std::vector<int64_t> k0 = {0, 4, 10};
  std::vector<float> a(g.mr * taps * kp), b(b_rows * g.nr);
  for (float& v : a) v = float(small(rng));
  for (float& v : b) v = float(small(rng));
  std::vector<uint16_t> ab(a.size()), bb(b_rows / 2 * ldb);
  for (size_t i = 0; i < a.size(); ++i) ab[i] = to_bf16(a[i]);
  for (int64_t j = 0; j < b_rows; ++j)
    for (int64_t c = 0; c < g.nr; ++c) bb[(j / 2) * ldb + 2 * c + j % 2] = to_bf16(b[j * g.nr + c]);
  std::vector<int64_t> offsets(taps);
  for (int64_t t = 0; t < taps; ++t) offsets[t] = k0[t] / 2 * ldb;
  std::vector<float> c(g.mr * ldc, 2.0f);
  if (g.prepare) g.prepare();
  g.tile({ab.data(), taps * kp, bb.data(), ldb, c.data(), ldc, kp, rows, cols, nullptr, false, taps, offsets.data(), nullptr});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < ldc; ++j) {
      float ref = 2.0f;
      if (j < cols) {
        ref = 0.0f;
        for (int64_t t = 0; t < taps; ++t)
          for (int64_t p = 0; p < kp; ++p) ref += a[r * taps * kp + t * kp + p] * b[(k0[t] + p) * g.nr + j];
      }
      ASSERT_EQ(c[r * ldc + j], ref) << "C[" << r << "][" << j << "]";
    }
  }
}

TEST_P(IsaKernels, Im2col16MatchesTheOracleBitForBit) {
  // Random plans (any input position, any kept subset) at the sizes that matter: outputs in one
  // vector of 32 or two, inputs filling one or both, the 64-value limits. Rows are ld apart with
  // room past n_out, which must keep its sentinel; planes are plane_stride apart.
  const Im2col16 f = t().bf16.im2col16;
  if (!f) GTEST_SKIP() << level_name(GetParam()) << " has no 16-bit im2col: its bf16 is widened into fp32";
  std::mt19937 rng(17);
  struct Shape {
    int64_t taps, n_in, n_out;
  };
  for (const Shape& sh : {Shape{9, 49, 49}, Shape{9, 9, 9}, Shape{4, 64, 64}, Shape{6, 15, 33}, Shape{3, 40, 32},
                          Shape{1, 1, 1}, Shape{2, 33, 20}}) {
    SCOPED_TRACE("taps " + std::to_string(sh.taps) + ", " + std::to_string(sh.n_in) + " -> " + std::to_string(sh.n_out));
    constexpr int64_t kMax = Im2colPlan::kMaxValues;
    std::vector<uint16_t> index(sh.taps * kMax);
    std::vector<uint64_t> keep(sh.taps);
    std::uniform_int_distribution<int> pos(0, static_cast<int>(sh.n_in) - 1);
    for (int64_t t = 0; t < sh.taps; ++t) {
      for (int64_t p = 0; p < sh.n_out; ++p) index[t * kMax + p] = static_cast<uint16_t>(pos(rng));
      keep[t] = (uint64_t{rng()} << 32 | rng()) & (sh.n_out == 64 ? ~uint64_t{0} : (uint64_t{1} << sh.n_out) - 1);
    }
    const Im2colPlan plan{sh.taps, sh.n_in, sh.n_out, index.data(), keep.data()};
    const int64_t channels = 3, stride = sh.n_in + 5, ld = sh.n_out + 7;
    std::vector<uint16_t> x(channels * stride);
    for (uint16_t& v : x) v = static_cast<uint16_t>(rng() | 1);  // never 0, so a dropped value shows
    std::vector<uint16_t> got(channels * sh.taps * ld, 0xABCD), want = got;
    f(x.data(), channels, stride, plan, got.data(), ld);
    oracle().bf16.im2col16(x.data(), channels, stride, plan, want.data(), ld);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "col[" << i << "]";
  }
}

}  // namespace
}  // namespace demi::backend::cpu::isa
