// Tensor basics: factories, views sharing storage, conversions, printing, errors, and the caching
// allocator's steady state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using testing::HasSubstr;

using test::error_of;

TEST(Tensor, FactoriesAndAccessors) {
  const Tensor t = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::F32);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(zeros({3}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(ones({2}, DType::BF16).to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_EQ(full({2}, 2.5, DType::F16).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(arange(0, 5, 2).to_vector<float>(), (std::vector<float>{0, 2, 4}));
  EXPECT_EQ(arange(0, 3, 1, DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(full({}, 7.0).item<float>(), 7.0f);
}

TEST(Tensor, ReshapeFlattenAndSliceShareStorage) {
  const Tensor t = arange(0, 24).reshape({2, 3, 4});
  const Tensor flat = t.flatten(1);
  EXPECT_EQ(flat.shape(), (Shape{2, 12}));
  EXPECT_EQ(flat.data_ptr(), t.data_ptr());
  EXPECT_EQ(t.reshape({-1, 6}).shape(), (Shape{4, 6}));
  const Tensor rows = t.slice(1, 2);
  EXPECT_EQ(rows.shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(rows.to_vector<float>()[0], 12.0f);
  EXPECT_EQ(static_cast<char*>(rows.data_ptr()) - static_cast<char*>(t.data_ptr()), 12 * 4);
  t.data<float>()[12] = 100.0f;
  EXPECT_EQ(rows.to_vector<float>()[0], 100.0f);  // a view, not a copy
  EXPECT_NE(t.clone().data_ptr(), t.data_ptr());
}

TEST(Tensor, DtypeConversionsRoundOnce) {
  const Tensor t = tensor({1e-8f, 65504.0f, 131072.0f, 1.0f + 1.0f / 512}, {4});
  const std::vector<float> h = t.to(DType::F16).to_vector<float>();
  EXPECT_EQ(h[0], 0.0f);
  EXPECT_EQ(h[1], 65504.0f);
  EXPECT_TRUE(std::isinf(h[2]));
  EXPECT_EQ(h[3], 1.0f + 1.0f / 512);
  const std::vector<float> b = t.to(DType::BF16).to_vector<float>();
  EXPECT_NE(b[0], 0.0f);
  EXPECT_EQ(b[3], 1.0f);
  EXPECT_EQ(tensor({2.7f, -1.2f}, {2}).to(DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{2, -1}));
}

TEST(Tensor, RandomIsSeededAndDeviceIndependentOfThreads) {
  Generator a(5), b(5);
  EXPECT_EQ(randn({100}, a).to_vector<float>(), randn({100}, b).to_vector<float>());
  Generator c(6);
  EXPECT_NE(randn({100}, a).to_vector<float>(), randn({100}, c).to_vector<float>());
}

// 0, 1, ..., n - 1 as fp32.
Tensor arange_like_torch(int64_t n) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i);
  return tensor(values, {n});
}

TEST(Tensor, PrintsShapeDtypeAndValues) {
  std::ostringstream out;
  out << tensor({1, 2, 3, 4}, {2, 2}, DType::F16);
  EXPECT_THAT(out.str(), HasSubstr("[[1, 2],\n [3, 4]]"));
  EXPECT_THAT(out.str(), HasSubstr("shape=[2, 2]"));
  EXPECT_THAT(out.str(), HasSubstr("dtype=float16"));
  std::ostringstream big;
  big << arange_like_torch(2000);
  EXPECT_THAT(big.str(), HasSubstr("tensor([0, 1, 2, ..., 1997, 1998, 1999], shape=[2000]"));
  std::ostringstream rows;
  rows << arange_like_torch(2000).reshape({1000, 2});
  EXPECT_THAT(rows.str(), HasSubstr("[[0, 1],\n [2, 3],\n [4, 5],\n ...,\n [1994, 1995],\n [1996, 1997],\n [1998, 1999]]"));
}

TEST(Tensor, ErrorsNameTheProblem) {
  EXPECT_THAT(error_of([] { tensor({1, 2, 3}, {2, 2}); }), HasSubstr("3 values do not fill shape [2, 2]"));
  EXPECT_THAT(error_of([] { zeros({2, 3}).reshape({4, 2}); }), HasSubstr("reshape: shape [4, 2] holds 8 elements"));
  EXPECT_THAT(error_of([] { zeros({2, 3}).item<float>(); }), HasSubstr("item(): tensor has 6 elements"));
  EXPECT_THAT(error_of([] { zeros({2}).data<double>(); }), HasSubstr("tensor is float32, not float64"));
  EXPECT_THAT(error_of([] { zeros({3}).slice(2, 5); }), HasSubstr("slice: rows [2, 5) out of range"));
  EXPECT_THAT(error_of([] { zeros({2, 3}) + zeros({4}); }), HasSubstr("add: shapes [2, 3] and [4] cannot be broadcast"));
  EXPECT_THAT(error_of([] { matmul(zeros({2, 3}), zeros({4, 5})); }), HasSubstr("matmul: inner dimensions differ: [2, 3] @ [4, 5]"));
  EXPECT_THAT(error_of([] { matmul(zeros({2, 3}), zeros({3, 5}, DType::F16)); }),
              HasSubstr("different dtypes (float32 and float16)"));
  EXPECT_THAT(error_of([] { conv2d(zeros({1, 3, 8, 8}), zeros({4, 2, 3, 3})); }),
              HasSubstr("conv2d: input [1, 3, 8, 8] has 3 channels but weight [4, 2, 3, 3] expects 2"));
  EXPECT_THAT(error_of([] { conv2d(zeros({3, 8, 8}), zeros({4, 3, 3, 3})); }),
              HasSubstr("conv2d: input must be [N, C, H, W], got shape [3, 8, 8]"));
  EXPECT_THAT(error_of([] { cross_entropy(zeros({2, 3}), tensor({0.0f, 1.0f}, {2})); }),
              HasSubstr("target must hold int64 class indices, got float32"));
  EXPECT_THAT(error_of([] { cross_entropy(zeros({2, 3}), tensor(std::vector<int64_t>{0, 3}, {2})); }),
              HasSubstr("out of range"));
  EXPECT_THAT(error_of([] { batch_norm(zeros({2, 3, 2, 2}, DType::F16), Tensor(), Tensor(),
                                       ones({3}, DType::F16), Tensor(), {true}); }),
              HasSubstr("weight must be float32"));
  EXPECT_THAT(error_of([] { relu(zeros({2}, DType::I64)); }), HasSubstr("relu: input must be a floating tensor"));
  EXPECT_THAT(error_of([] { zeros({2}).to(Device::cuda(0)); }), HasSubstr("cuda:0"));
}

TEST(Allocator, SteadyStateLoopAllocatesNothingNewFromTheSystem) {
  auto step = [] {
    const Tensor x = randn({64, 256});
    const Tensor w = randn({128, 256}).requires_grad_();
    sum(relu(linear(x, w))).backward();
  };
  step();
  step();
  const MemoryStats before = memory_stats(Device::cpu());
  for (int i = 0; i < 20; ++i) step();
  const MemoryStats after = memory_stats(Device::cpu());
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_GT(after.cache_hits, before.cache_hits);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
}

TEST(Allocator, BucketsAreExactSizeClasses) {
  EXPECT_EQ(detail::allocation_bucket(1), 512u);
  EXPECT_EQ(detail::allocation_bucket(1000), 1024u);
  EXPECT_EQ(detail::allocation_bucket(1025), 1280u);
  EXPECT_EQ(detail::allocation_bucket(4u << 20), 4u << 20);
}

}  // namespace
}  // namespace demi
