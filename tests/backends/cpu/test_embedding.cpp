// Tests for backends/cpu/embedding.cpp: the forward copies rows exactly; the backward sums each
// row's gradients in ascending position in fp32 (fp64 for fp64) and rounds once, bit for bit that
// order's result on any thread count, with padding_idx's row and unnamed rows zero; an index out of
// range is an error naming it, its position and the range. Once per ISA level: half gradients are
// widened and rounded by per-level conversion kernels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/error_of.h"
#include "support/host_tensor.h"

namespace {

using demi::backend::EmbeddingArgs;
using demi::test::error_of;
using testing::HasSubstr;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }

HostTensor indices(const Shape& shape, const std::vector<int64_t>& values) {
  HostTensor t(shape, DType::I64);
  for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), static_cast<double>(values[i]));
  return t;
}

void forward(HostTensor& weight, HostTensor& idx, HostTensor& out) {
  EmbeddingArgs args;
  args.weight = weight.ref();
  args.indices = idx.ref();
  args.output = out.ref();
  cpu().embedding_forward(args);
}

void backward(HostTensor& idx, HostTensor& grad_out, HostTensor& grad_weight, int64_t padding_idx = -1) {
  EmbeddingArgs args;
  args.indices = idx.ref();
  args.grad_output = grad_out.ref();
  args.grad_weight = grad_weight.ref();
  args.padding_idx = padding_idx;
  cpu().embedding_backward(args);
}

// grad_weight as the kernel must compute it: per row, ascending positions, in fp32 (fp64 for F64),
// rounded once to the dtype.
std::vector<double> backward_ref(DType dtype, const std::vector<int64_t>& idx, const std::vector<double>& g,
                                 int64_t V, int64_t D, int64_t padding_idx) {
  std::vector<double> out(static_cast<size_t>(V * D), 0.0);
  HostTensor one({1}, dtype);
  for (int64_t v = 0; v < V; ++v) {
    for (int64_t d = 0; d < D; ++d) {
      double wide = 0.0;
      float narrow = 0.0f;
      for (size_t m = 0; m < idx.size(); ++m) {
        if (idx[m] != v || v == padding_idx) continue;
        wide += g[m * D + d];
        narrow += static_cast<float>(g[m * D + d]);
      }
      one.set(0, dtype == DType::F64 ? wide : static_cast<double>(narrow));
      out[v * D + d] = one.get(0);
    }
  }
  return out;
}

class CpuEmbedding : public demi_test::IsaFixture<std::tuple<demi_test::Level, DType>> {
 protected:
  DType dtype() const { return std::get<1>(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(IsaDtypes, CpuEmbedding,
                         ::testing::Combine(::testing::ValuesIn(demi_test::isa_levels()),
                                            ::testing::Values(DType::F32, DType::F64, DType::F16, DType::BF16)),
                         demi_test::isa_dtype_name);

TEST_P(CpuEmbedding, ForwardCopiesTheRows) {
  std::mt19937 rng(1);
  const int64_t V = 7, D = 37;  // rows of 37: vector bodies and tails of the copies
  HostTensor weight({V, D}, dtype());
  const std::vector<double> w = weight.randomize(rng, -2.0, 2.0);
  const std::vector<int64_t> ids = {3, 0, 6, 3, 3, 1};
  HostTensor idx = indices({2, 3}, ids), out({2, 3, D}, dtype());
  forward(weight, idx, out);
  for (size_t m = 0; m < ids.size(); ++m) {
    for (int64_t d = 0; d < D; ++d) ASSERT_EQ(out.get(m * D + d), w[ids[m] * D + d]) << "position " << m << ", " << d;
  }
}

TEST_P(CpuEmbedding, BackwardSumsDuplicatesInPositionOrder) {
  std::mt19937 rng(2);
  const int64_t V = 9, D = 21;
  std::vector<int64_t> ids;
  std::uniform_int_distribution<int64_t> pick(0, 5);  // rows 6, 7, 8 never named
  for (int i = 0; i < 300; ++i) ids.push_back(i % 7 == 0 ? 2 : pick(rng));  // row 2 is hot
  const int64_t M = static_cast<int64_t>(ids.size());
  for (int64_t padding : {int64_t{-1}, int64_t{2}, int64_t{4}}) {
    SCOPED_TRACE("padding_idx " + std::to_string(padding));
    HostTensor idx = indices({M}, ids), g({M, D}, dtype()), gw({V, D}, dtype());
    const std::vector<double> vg = g.randomize(rng, -1.0, 1.0);
    gw.fill(123.0);  // every element is written
    backward(idx, g, gw, padding);
    const std::vector<double> want = backward_ref(dtype(), ids, vg, V, D, padding);
    for (int64_t i = 0; i < V * D; ++i) ASSERT_EQ(gw.get(i), want[i]) << "row " << i / D << ", column " << i % D;
  }
}

TEST_P(CpuEmbedding, BackwardIsTheSameOnAnyThreadCount) {
  std::mt19937 rng(4);
  const int64_t V = 1000, D = 64, M = 20000;
  std::vector<int64_t> ids(static_cast<size_t>(M));
  std::uniform_int_distribution<int64_t> pick(0, V - 1);
  for (int64_t m = 0; m < M; ++m) ids[m] = m % 3 == 0 ? 17 : pick(rng);
  HostTensor idx = indices({M}, ids), g({M, D}, dtype());
  g.fill_random(rng, -1.0, 1.0);
  const int threads = demi::backend::cpu_threads();
  std::vector<std::vector<double>> results;
  for (int t : {1, 2, 3}) {
    demi::backend::set_cpu_threads(t);
    HostTensor gw({V, D}, dtype());
    backward(idx, g, gw);
    results.push_back(gw.values());
  }
  demi::backend::set_cpu_threads(threads);
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(results[2], results[0]);
}

TEST(CpuEmbeddingChecks, EmptyIndicesGiveZeroGradients) {
  HostTensor weight({3, 4}, DType::F32), idx({0}, DType::I64), out({0, 4}, DType::F32), gw({3, 4}, DType::F32);
  forward(weight, idx, out);
  gw.fill(5.0);
  backward(idx, out, gw);
  for (int64_t i = 0; i < gw.numel(); ++i) EXPECT_EQ(gw.get(i), 0.0);
}

TEST(CpuEmbeddingChecks, AnIndexOutOfRangeNamesItsValuePositionAndTheRange) {
  HostTensor weight({5, 3}, DType::F32), out({2, 2, 3}, DType::F32), gw({5, 3}, DType::F32);
  HostTensor high = indices({2, 2}, {0, 4, 7, 1}), low = indices({2, 2}, {0, 1, 2, -1});
  const std::string f = error_of([&] { forward(weight, high, out); });
  EXPECT_THAT(f, HasSubstr("embedding: index 7 at position [1, 0] of indices [2, 2] is out of range for 5 embeddings"));
  EXPECT_THAT(f, HasSubstr("indices must be in [0, 5)"));
  EXPECT_THAT(error_of([&] { forward(weight, low, out); }), HasSubstr("index -1 at position [1, 1]"));
  EXPECT_THAT(error_of([&] { backward(high, out, gw); }),
              HasSubstr("embedding_backward: index 7 at position [1, 0] of indices [2, 2]"));
}

TEST(CpuEmbeddingChecks, RefusesBadArguments) {
  HostTensor weight({5, 3}, DType::F32), idx = indices({2}, {0, 1}), out({2, 3}, DType::F32);
  HostTensor short_out({2, 2}, DType::F32), half_out({2, 3}, DType::F16), float_idx({2}, DType::F32);
  HostTensor vector_weight({5}, DType::F32);
  EXPECT_THAT(error_of([&] { forward(weight, idx, short_out); }), HasSubstr("must hold one float32 row of 3 per index"));
  EXPECT_THAT(error_of([&] { forward(weight, idx, half_out); }), HasSubstr("must hold one float32 row"));
  EXPECT_THAT(error_of([&] { forward(weight, float_idx, out); }), HasSubstr("indices must be int64"));
  EXPECT_THAT(error_of([&] { forward(vector_weight, idx, out); }), HasSubstr("[num_embeddings, embedding_dim]"));
  EXPECT_THAT(error_of([&] { backward(idx, out, weight, 5); }), HasSubstr("padding_idx 5 must be -1 (none) or in [0, 5)"));
}

}  // namespace
