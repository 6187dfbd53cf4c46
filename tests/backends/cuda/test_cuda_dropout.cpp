// Pins backends/cuda/dropout.cu against the CPU backend: the same (seed, offset, p) gives the same
// output bytes in every floating dtype (the same mask, the same fp32 scaling and one rounding), in
// place too, at sizes that make the grid-stride loop go round; and the same argument errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"
#include "support/error_of.h"

namespace demi::backend {
namespace {

using namespace cuda_test;
using test::error_of;
using testing::HasSubstr;

DropoutArgs args_for(const TensorRef& in, const TensorRef& out, double p, uint64_t seed, uint64_t offset) {
  DropoutArgs args;
  args.input = in;
  args.output = out;
  args.p = p;
  args.seed = seed;
  args.offset = offset;
  return args;
}

// The CPU's output bytes for x (given as bytes of dtype) under (seed, offset, p).
std::vector<uint8_t> on_cpu(std::vector<uint8_t> x, DType dtype, int64_t n, double p, uint64_t seed, uint64_t offset) {
  std::vector<uint8_t> y(x.size());
  cpu().dropout(args_for({x.data(), {n}, dtype}, {y.data(), {n}, dtype}, p, seed, offset));
  return y;
}

struct Draw {
  uint64_t seed, offset;
  int64_t n;
};
const std::vector<Draw> kDraws = {
    {0, 0, 1}, {42, 7, 1031}, {0x0123456789abcdefull, (uint64_t{1} << 32) - 5, 4099}, {7, 3, (int64_t{1} << 20) + 3}};

TEST(CudaDropout, MatchesCpuBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (DType dtype : kFloatDTypes) {
    for (const Draw& d : kDraws) {
      for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
        const std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(d.n) +
                                 " p=" + std::to_string(p);
        std::vector<double> values = uniform(static_cast<size_t>(d.n), -3.0, 3.0, 11);
        if (d.n > 8) values[1] = INFINITY, values[2] = std::nan(""), values[3] = -0.0;
        const std::vector<uint8_t> x = encode(values, dtype);
        const std::vector<uint8_t> want = on_cpu(x, dtype, d.n, p, d.seed, d.offset);
        Buffer in(gpu(), x), out(gpu(), x.size());
        gpu().dropout(args_for(in.ref({d.n}, dtype), out.ref({d.n}, dtype), p, d.seed, d.offset));
        expect_same(out.read(), want, dtype, what);
        gpu().dropout(args_for(in.ref({d.n}, dtype), in.ref({d.n}, dtype), p, d.seed, d.offset));  // in place
        expect_same(in.read(), want, dtype, what + " in place");
      }
    }
  }
}

TEST(CudaDropout, RefusesWhatTheCpuRefuses) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  Buffer a(gpu(), 64), b(gpu(), 64);
  EXPECT_THAT(error_of([&] { gpu().dropout(args_for(a.ref({4}, DType::F32), b.ref({4}, DType::F32), 1.5, 0, 0)); }),
              HasSubstr("dropout: p must be in [0, 1], got p = 1.5"));
  EXPECT_THAT(error_of([&] { gpu().dropout(args_for(a.ref({4}, DType::I64), b.ref({4}, DType::I64), 0.5, 0, 0)); }),
              HasSubstr("dropout: input must be floating"));
}

}  // namespace
}  // namespace demi::backend
