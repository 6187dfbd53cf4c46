// nn::Embedding: PyTorch's state_dict name and N(0, 1) initialisation, the padding row zero at the
// start and without gradient after, dtype moves, and the option errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

TEST(EmbeddingModule, WeightIsNamedAsInPyTorchAndDrawnFromNormal) {
  Generator gen(1), same(1);
  nn::Embedding emb(1000, 64, gen);
  const StateDict state = emb.state_dict();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state.begin()->first, "weight");
  EXPECT_EQ(emb.weight.shape(), (Shape{1000, 64}));
  EXPECT_TRUE(emb.weight.requires_grad());
  EXPECT_EQ(emb.weight.to_vector<float>(), randn({1000, 64}, same).to_vector<float>());  // N(0, 1) from gen
  double sum = 0, sq = 0;
  for (float v : emb.weight.to_vector<float>()) sum += v, sq += v * v;
  const double n = 64000;
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(sq / n, 1.0, 0.03);
}

TEST(EmbeddingModule, PaddingRowStartsAtZeroAndGetsNoGradient) {
  Generator gen(2);
  nn::Embedding emb(nn::Embedding::Options{6, 3, -1}, gen);  // the last row
  EXPECT_EQ(*emb.options().padding_idx, 5);
  const std::vector<float> w = emb.weight.to_vector<float>();
  for (int d = 0; d < 3; ++d) EXPECT_EQ(w[15 + d], 0.0f);
  EXPECT_NE(w[0], 0.0f);
  const Tensor y = emb(tensor(std::vector<int64_t>{5, 0, 5, 2}, {2, 2}));
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  sum(y).backward();
  const std::vector<float> g = emb.weight.grad().to_vector<float>();
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(g[15 + d], 0.0f);
    EXPECT_EQ(g[d], 1.0f);
    EXPECT_EQ(g[6 + d], 1.0f);
  }
}

TEST(EmbeddingModule, MovesToAHalfTypeAndLoadsAStateDict) {
  Generator gen(3);
  nn::Embedding a(10, 4, gen), b(10, 4, gen);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.weight.to_vector<float>(), a.weight.to_vector<float>());
  a.to(DType::BF16);
  EXPECT_EQ(a(tensor(std::vector<int64_t>{1, 2}, {2})).dtype(), DType::BF16);
}

TEST(EmbeddingModule, RefusesBadOptions) {
  EXPECT_THAT(error_of([] { nn::Embedding(0, 4); }),
              HasSubstr("nn::Embedding: num_embeddings and embedding_dim must be positive, got 0 and 4"));
  EXPECT_THAT(error_of([] { nn::Embedding(nn::Embedding::Options{4, 2, 4}); }),
              HasSubstr("nn::Embedding: padding_idx 4 is out of range for 4 embeddings; it must be in [-4, 4)"));
}

}  // namespace
}  // namespace demi
