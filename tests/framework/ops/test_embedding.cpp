// demi::embedding: rows picked by int64 indices of any shape ([..., dim]), the backward's sum of
// duplicates (in fp32 for half weights), padding_idx's row without gradient, and the errors that
// name the culprit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

Tensor ids(const std::vector<int64_t>& v, const Shape& shape) { return tensor(v, shape); }

TEST(Embedding, PicksRowsForIndicesOfAnyShape) {
  const Tensor w = arange(0, 12).reshape({4, 3});  // row r is 3r, 3r + 1, 3r + 2
  const Tensor y = embedding(w, ids({2, 0, 3, 2, 1, 1}, {2, 3}));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{6, 7, 8, 0, 1, 2, 9, 10, 11, 6, 7, 8, 3, 4, 5, 3, 4, 5}));
  const Tensor one = embedding(w, ids({3}, {}));  // a 0-d index gives one row
  EXPECT_EQ(one.shape(), (Shape{3}));
  EXPECT_EQ(one.to_vector<float>(), (std::vector<float>{9, 10, 11}));
  EXPECT_EQ(embedding(w, ids({}, {0, 5})).shape(), (Shape{0, 5, 3}));
}

TEST(Embedding, GradientSumsDuplicatesAndLeavesOtherRowsZero) {
  const Tensor w = zeros({4, 2}).requires_grad_();
  const Tensor y = embedding(w, ids({1, 3, 1, 1}, {4}));
  y.backward(tensor({1, 2, 10, 20, 100, 200, 1000, 2000}, {4, 2}));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 0, 1101, 2202, 0, 0, 10, 20}));
}

TEST(Embedding, HalfWeightsAccumulateInFp32AndRoundOnce) {
  // 2048 + 4 + 4 + 4 + 4: rounded to bf16 after each addition the sum stays 2048 (its ulp is 16).
  const Tensor w = zeros({2, 1}, DType::BF16).requires_grad_();
  const Tensor y = embedding(w, ids({0, 0, 0, 0, 0}, {5}));
  y.backward(tensor({2048, 4, 4, 4, 4}, {5, 1}, DType::BF16));
  EXPECT_EQ(w.grad().dtype(), DType::BF16);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2064, 0}));
}

TEST(Embedding, PaddingRowGetsNoGradient) {
  for (int64_t padding : {int64_t{1}, int64_t{-3}}) {  // -3 of 4 rows is row 1
    const Tensor w = ones({4, 2}).requires_grad_();
    const Tensor y = embedding(w, ids({1, 2, 1}, {3}), padding);
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>(6, 1.0f)));  // the forward still reads the row
    sum(y).backward();
    EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 0, 0, 0, 1, 1, 0, 0}));
  }
}

TEST(Embedding, ErrorsNameTheCulprit) {
  const Tensor w = zeros({5, 3});
  EXPECT_THAT(error_of([&] { embedding(w, ids({0, 1, 5, 2}, {2, 2})); }),
              HasSubstr("embedding: index 5 at position [1, 0] of indices [2, 2] is out of range for 5 embeddings; "
                        "indices must be in [0, 5)"));
  EXPECT_THAT(error_of([&] { embedding(w, ids({-1}, {1})); }), HasSubstr("index -1 at position [0]"));
  EXPECT_THAT(error_of([&] { embedding(w, tensor({1, 2}, {2})); }),
              HasSubstr("embedding: indices must be int64, got float32; convert them with .to(DType::I64)"));
  EXPECT_THAT(error_of([&] { embedding(zeros({5}), ids({1}, {1})); }),
              HasSubstr("embedding: weight must be [num_embeddings, embedding_dim]"));
  EXPECT_THAT(error_of([&] { embedding(w, ids({1}, {1}), 5); }),
              HasSubstr("embedding: padding_idx 5 is out of range for 5 embeddings; it must be in [-5, 5)"));
}

TEST(Embedding, AutocastLeavesItsDtype) {
  const Tensor w = zeros({5, 3});
  amp::AutocastGuard guard(Device::Kind::CPU, DType::BF16);
  EXPECT_EQ(embedding(w, ids({1, 2}, {2})).dtype(), DType::F32);
  EXPECT_EQ(embedding(w.to(DType::F16), ids({1, 2}, {2})).dtype(), DType::F16);
}

}  // namespace
}  // namespace demi
