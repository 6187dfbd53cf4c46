// Pins every ISA level's 16-bit microkernels against the plain C++ oracle (the scalar table): batch
// norm's bf16 and fp16 passes, the bf16 tile's sums and the 16-bit im2col. The level choice and the
// fp32 kernels are pinned in test_isa.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa/select.h"
#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"

namespace demi::backend::cpu::isa {
namespace {

using demi_test::IsaFixture;

class IsaKernels : public IsaFixture<Level> {
 protected:
  const Table& t() const { return active(); }
  const Table& oracle() const { return *table(Level::Scalar); }
};
INSTANTIATE_TEST_SUITE_P(Isa, IsaKernels, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
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
