// matmul as torch.matmul: batch dims broadcast, 1-D operands as a row or a column that the result
// drops, the shared-matrix and folded paths, gradients summed over broadcast batch dims; each
// against a loop of 2-D products on the same values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

std::vector<double> values(const Tensor& t) { return t.to(DType::F64).to_vector<double>(); }

// The product by a loop of 2-D matmuls over the broadcast batch, in float64.
Tensor reference(const Tensor& a, const Tensor& b) {
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(batch_a, batch_b, "reference");
  Shape full_a = batch, full_b = batch;
  full_a.insert(full_a.end(), a.shape().end() - 2, a.shape().end());
  full_b.insert(full_b.end(), b.shape().end() - 2, b.shape().end());
  const Tensor ea = expand(a.to(DType::F64), full_a).reshape({-1, a.size(-2), a.size(-1)});
  const Tensor eb = expand(b.to(DType::F64), full_b).reshape({-1, b.size(-2), b.size(-1)});
  std::vector<Tensor> products;
  for (int64_t i = 0; i < ea.size(0); ++i) products.push_back(matmul(ea[i], eb[i]).reshape({1, a.size(-2), b.size(-1)}));
  Shape out = batch;
  out.push_back(a.size(-2));
  out.push_back(b.size(-1));
  return cat(products, 0).reshape(out);
}

TEST(Matmul, BroadcastsBatchDimsAsTorch) {
  struct Case {
    Shape a, b, y;
  };
  const std::vector<Case> cases = {
      {{2, 1, 3, 4}, {3, 4, 5}, {2, 3, 3, 5}},  // partly broadcast: expanded
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},           // a shared by the batch (stride 0)
      {{1, 3, 4}, {2, 4, 5}, {2, 3, 5}},
      {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}},
      {{2, 2, 3, 4}, {2, 2, 4, 5}, {2, 2, 3, 5}},  // attention's [B, H, S, D] @ [B, H, D, S]
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},              // b without batch: folded into one GEMM
      {{2, 3, 4}, {1, 1, 4, 5}, {1, 2, 3, 5}},
      {{4, 2, 3, 4}, {4, 1, 4, 5}, {4, 2, 3, 5}},
  };
  Generator gen(3);
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::PrintToString(c.a) + " @ " + testing::PrintToString(c.b));
    const Tensor a = randn(c.a, gen, DType::F64), b = randn(c.b, gen, DType::F64);
    const Tensor y = matmul(a, b);
    ASSERT_EQ(y.shape(), c.y);
    const std::vector<double> got = values(y), want = values(reference(a, b));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
    // gradients: those of the reference, which expands explicitly and sums the copies back
    Tensor ga = a.clone().requires_grad_(), gb = b.clone().requires_grad_();
    Tensor ra = a.clone().requires_grad_(), rb = b.clone().requires_grad_();
    const Tensor w = randn(c.y, gen, DType::F64);
    sum(matmul(ga, gb) * w).backward();
    sum(reference(ra, rb) * w).backward();
    const std::vector<double> da = values(ga.grad()), dra = values(ra.grad());
    const std::vector<double> db = values(gb.grad()), drb = values(rb.grad());
    for (size_t i = 0; i < da.size(); ++i) EXPECT_NEAR(da[i], dra[i], 1e-12) << "grad a " << i;
    for (size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db[i], drb[i], 1e-12) << "grad b " << i;
  }
}

// The gradient of a matrix the whole batch shares sums every product's: formed in fp32 and rounded
// once into bf16, as one GEMM over the folded batch (PyTorch's) is; summing per-product bf16
// roundings left elements 11% off where the products cancel (crosscheck/).
TEST(Matmul, ASharedMatrixsGradientIsRoundedOnce) {
  Generator gen(9);
  const Tensor a = randn({5, 16}, gen).to(DType::BF16), b = randn({8, 16, 12}, gen).to(DType::BF16);
  const Tensor g = randn({8, 5, 12}, gen).to(DType::BF16);
  Tensor x = a.clone().requires_grad_();
  matmul(x, b).backward(g);
  // float64 from the same bf16 values: sum over the batch of g_i @ b_i^T, rounded once to bf16
  const Tensor want = sum(matmul(g.to(DType::F64), transpose(b.to(DType::F64), 1, 2)), {0}).to(DType::BF16);
  const std::vector<double> got = values(x.grad()), w = values(want);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], w[i], std::ldexp(std::fabs(w[i]), -8)) << i;
}

TEST(Matmul, VectorsAreARowOrAColumnThatTheResultDrops) {
  const Tensor m = tensor({1, 2, 3, 4, 5, 6}, {2, 3}), v = tensor({1, 0, -1}, {3}), u = tensor({2, 1}, {2});
  EXPECT_EQ(matmul(m, v).shape(), (Shape{2}));
  EXPECT_EQ(values(matmul(m, v)), (std::vector<double>{-2, -2}));
  EXPECT_EQ(values(matmul(u, m)), (std::vector<double>{6, 9, 12}));
  const Tensor dot = matmul(v, tensor({4, 5, 6}, {3}));
  EXPECT_EQ(dot.dim(), 0);
  EXPECT_EQ(dot.item(), -2.0);
  const Tensor batch = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2});
  EXPECT_EQ(matmul(v, batch).shape(), (Shape{2, 2}));  // [3] @ [2, 3, 2]
  EXPECT_EQ(values(matmul(v, batch)), (std::vector<double>{-4, -4, -4, -4}));
  EXPECT_EQ(matmul(batch.transpose(1, 2), v).shape(), (Shape{2, 2}));  // [2, 2, 3] @ [3]
  Tensor x = v.clone().requires_grad_();
  matmul(m, x).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{5, 7, 9}));
}

TEST(Matmul, HalfAndAutocastKeepTheirDtypes) {
  const Tensor a = randn({2, 1, 3, 8}).to(DType::BF16), b = randn({4, 8, 5}).to(DType::BF16);
  EXPECT_EQ(matmul(a, b).dtype(), DType::BF16);
  EXPECT_EQ(matmul(a, b).shape(), (Shape{2, 4, 3, 5}));
  amp::AutocastGuard guard(Device::Kind::CPU, DType::BF16);
  EXPECT_EQ(matmul(randn({3, 2, 4}), randn({3, 4, 2})).dtype(), DType::BF16);
}

TEST(Matmul, ErrorsNameTheShapes) {
  EXPECT_THAT(error_of([] { matmul(zeros({2, 3, 4}), zeros({2, 5, 6})); }),
              HasSubstr("matmul: inner dimensions differ: [2, 3, 4] @ [2, 5, 6] (4 vs 5)"));
  EXPECT_THAT(error_of([] { matmul(zeros({2, 3, 4}), zeros({3, 4, 6})); }),
              HasSubstr("matmul (batch dims): shapes [2] and [3] cannot be broadcast"));
  EXPECT_THAT(error_of([] { matmul(full({}, 1.0), zeros({2})); }),
              HasSubstr("matmul: both operands need at least one dim, got [] @ [2]"));
  EXPECT_THAT(error_of([] { matmul(zeros({3}), zeros({4})); }), HasSubstr("matmul: inner dimensions differ: [3] @ [4]"));
}

TEST(Matmul, EmptyBatchesAndExtents) {
  EXPECT_EQ(matmul(zeros({0, 3, 4}), zeros({0, 4, 2})).shape(), (Shape{0, 3, 2}));
  EXPECT_EQ(matmul(zeros({3, 4}), zeros({0, 4, 2})).shape(), (Shape{0, 3, 2}));
  EXPECT_EQ(values(matmul(zeros({2, 2, 0}), zeros({2, 0, 3}))), std::vector<double>(12, 0.0));
}

}  // namespace
}  // namespace demi
