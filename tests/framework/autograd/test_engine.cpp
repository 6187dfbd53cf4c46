// The autograd engine: accumulation, reuse of a tensor, no_grad, detach, dtype of leaf grads,
// deep graphs, freed saved tensors and the saved-bytes count.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/demi/demi.h"

namespace demi {
namespace {

using testing::HasSubstr;

TEST(Autograd, TensorUsedTwiceGetsBothContributions) {
  Tensor x = tensor({2, 3}, {2}).requires_grad_();
  sum(x * x + x).backward();  // d/dx = 2x + 1
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{5, 7}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = tensor({1, 1}, {2}).requires_grad_();
  sum(x * 3.0).backward();
  sum(x * 4.0).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{7, 7}));
}

TEST(Autograd, NoGradRecordsNothingAndDetachCutsTheGraph) {
  Tensor x = ones({3}).requires_grad_();
  {
    NoGradGuard guard;
    const Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
  const Tensor d = (x * 2.0).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE((x * 2.0).requires_grad());
  EXPECT_FALSE((d * 2.0).requires_grad());
}

TEST(Autograd, LeafGradKeepsTheLeafDtype) {
  Tensor w = ones({4}).requires_grad_();
  sum(w.to(DType::F16) * 2.0).backward();
  ASSERT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
}

TEST(Autograd, DeepGraphDoesNotOverflowTheStack) {
  Tensor x = ones({1}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y * 1.0;
  y.backward();
  EXPECT_EQ(x.grad().item<float>(), 1.0f);
}

TEST(Autograd, SecondBackwardThroughFreedGraphExplains) {
  Tensor x = ones({2}).requires_grad_();
  const Tensor loss = sum(exp(x));
  loss.backward();
  try {
    loss.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("saved tensors were freed"));
  }
}

TEST(Autograd, BackwardErrors) {
  try {
    ones({2}).backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not require grad"));
  }
  Tensor x = ones({2}).requires_grad_();
  try {
    (x * 2.0).backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("one-element output"));
  }
}

TEST(Autograd, SavedTensorBytesAreCountedAndReleased) {
  const int64_t base = autograd::saved_tensor_stats().current_bytes;
  Tensor x = ones({1000}).requires_grad_();
  {
    const Tensor y = exp(x);  // saves its fp32 output: 4000 bytes
    EXPECT_EQ(autograd::saved_tensor_stats().current_bytes - base, 4000);
    const Tensor z = exp(x.to(DType::F16));  // half activation: 2000 bytes more
    EXPECT_EQ(autograd::saved_tensor_stats().current_bytes - base, 6000);
    sum(y).backward();  // backward frees what it used
    EXPECT_EQ(autograd::saved_tensor_stats().current_bytes - base, 2000);
  }
  EXPECT_EQ(autograd::saved_tensor_stats().current_bytes, base);  // dropping a graph frees the rest
  EXPECT_GE(autograd::saved_tensor_stats().peak_bytes - base, 6000);
  {
    NoGradGuard guard;
    const Tensor y = exp(x);
    EXPECT_EQ(autograd::saved_tensor_stats().current_bytes, base);  // nothing saved without a graph
  }
}

}  // namespace
}  // namespace demi
