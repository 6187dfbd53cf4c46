// balanced_subset: exact class balance, determinism per seed, images that follow their labels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "datasets/dataset.h"

namespace demi::data {
namespace {

using testing::HasSubstr;

// Class c has 20 + 3c examples, interleaved; pixel 0 of example i is i % 256, pixel 1 is i / 256.
Dataset unbalanced(int classes = 10) {
  std::vector<int64_t> labels;
  for (int c = 0; c < classes; ++c)
    for (int k = 0; k < 20 + 3 * c; ++k) labels.push_back(c);
  for (size_t i = 0; i < labels.size(); ++i) std::swap(labels[i], labels[(i * 7919) % labels.size()]);
  const int64_t n = static_cast<int64_t>(labels.size());
  Dataset d;
  d.labels = tensor(labels, {n});
  d.images = zeros({n, 3, 32, 32}, DType::U8);
  uint8_t* p = d.images.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    p[i * 3072] = static_cast<uint8_t>(i % 256);
    p[i * 3072 + 1] = static_cast<uint8_t>(i / 256);
  }
  for (int c = 0; c < classes; ++c) d.classes.push_back("c" + std::to_string(c));
  return d;
}

// The original index of each example, read back from its pixels.
std::vector<int64_t> origins(const Dataset& d) {
  std::vector<int64_t> out;
  const uint8_t* p = d.images.data<uint8_t>();
  for (int64_t i = 0; i < d.size(); ++i) out.push_back(p[i * 3072] + 256 * p[i * 3072 + 1]);
  return out;
}

TEST(BalancedSubset, EqualCountsPerClassAndLabelsFollowImages) {
  const Dataset d = unbalanced();
  const Dataset s = balanced_subset(d, 50, 7);
  ASSERT_EQ(s.size(), 50);
  EXPECT_EQ(s.images.shape(), (Shape{50, 3, 32, 32}));
  EXPECT_EQ(s.classes, d.classes);
  std::map<int64_t, int> counts;
  const std::vector<int64_t> labels = s.labels.to_vector<int64_t>();
  const std::vector<int64_t> all_labels = d.labels.to_vector<int64_t>();
  const std::vector<int64_t> from = origins(s);
  for (size_t k = 0; k < labels.size(); ++k) {
    ++counts[labels[k]];
    EXPECT_EQ(labels[k], all_labels[static_cast<size_t>(from[k])]) << "example " << k;
    if (k > 0) {
      EXPECT_LT(from[k - 1], from[k]) << "kept in original order";
    }
  }
  for (int64_t c = 0; c < 10; ++c) EXPECT_EQ(counts[c], 5) << "class " << c;
}

TEST(BalancedSubset, DeterministicPerSeed) {
  const Dataset d = unbalanced();
  EXPECT_EQ(origins(balanced_subset(d, 30, 1)), origins(balanced_subset(d, 30, 1)));
  EXPECT_NE(origins(balanced_subset(d, 30, 1)), origins(balanced_subset(d, 30, 2)));
}

TEST(BalancedSubset, RemainderGoesToTheFirstClasses) {
  const Dataset s = balanced_subset(unbalanced(), 53, 0);
  std::map<int64_t, int> counts;
  for (const int64_t l : s.labels.to_vector<int64_t>()) ++counts[l];
  for (int64_t c = 0; c < 10; ++c) EXPECT_EQ(counts[c], c < 3 ? 6 : 5) << "class " << c;
}

TEST(BalancedSubset, AllOrTooManyOrNegative) {
  const Dataset d = unbalanced();
  EXPECT_EQ(balanced_subset(d, d.size(), 0).size(), d.size());
  EXPECT_EQ(balanced_subset(d, d.size() + 10, 0).size(), d.size());
  EXPECT_EQ(balanced_subset(d, 0, 0).size(), 0);
  // Class 0 has 20 examples: 25 per class cannot be balanced.
  try {
    balanced_subset(d, 250, 0);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("class 0 (c0) has 20 examples"));
  }
  EXPECT_THROW(balanced_subset(d, -1, 0), Error);
}

}  // namespace
}  // namespace demi::data
