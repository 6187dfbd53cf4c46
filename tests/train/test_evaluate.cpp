// Evaluation: the argmax count, and evaluate's accuracy with and without test-time augmentation
// on a model whose answer is known (no CIFAR-10).
#include <gtest/gtest.h>

#include "train/evaluate.h"

namespace demi {
namespace {

// Answers `label` for every image whose top-left pixel is darker than the middle, else label + 1:
// a mirror image (its top-right pixel in that place) can change the answer, a constant image not.
class CornerModel : public nn::Module {
 public:
  explicit CornerModel(int64_t label) : label_(label) {}
  Tensor forward(const Tensor& x) override {
    const std::vector<float> v = x.to(DType::F32).to_vector<float>();
    const int64_t n = x.size(0), per_image = x.numel() / n;
    std::vector<float> logits(static_cast<size_t>(n * 10), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const bool dark_corner = v[i * per_image] < v[i * per_image + 16 * 32 + 16];
      logits[i * 10 + (dark_corner ? label_ : label_ + 1)] = 1.0f;
    }
    return tensor(logits, {n, 10});
  }

 private:
  int64_t label_;
};

// n images labelled 3; image i has a dark top-left corner when i is even, a dark top-right one
// when it is odd (the rest mid-grey).
data::Dataset corner_images(int64_t n) {
  std::vector<float> pixels(static_cast<size_t>(n * 3 * 32 * 32), 128.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < 3; ++c) pixels[((i * 3 + c) * 32) * 32 + (i % 2 == 0 ? 0 : 31)] = 0.0f;
  }
  data::Dataset d;
  d.images = tensor(pixels, {n, 3, 32, 32}).to(DType::U8);
  d.labels = tensor(std::vector<int64_t>(static_cast<size_t>(n), 3), {n});
  return d;
}

TEST(Evaluate, CountCorrectComparesEachRowsArgmaxWithItsLabel) {
  const Tensor logits = tensor(std::vector<float>{0.1f, 0.9f, 0.0f, 0.7f, 0.2f, 0.1f, 0.3f, 0.3f, 0.4f}, {3, 3});
  EXPECT_EQ(train::count_correct(logits, {1, 0, 2}), 3);
  EXPECT_EQ(train::count_correct(logits, {0, 0, 0}), 1);
}

TEST(Evaluate, PlainAndMirroredAccuracy) {
  data::DataLoader::Options o;
  o.batch_size = 4;
  o.shuffle = false;
  data::DataLoader loader(corner_images(10), o);
  CornerModel model(3);
  const train::Accuracy plain = train::evaluate(model, loader, Device::cpu(), DType::F32, nullptr, 0);
  EXPECT_DOUBLE_EQ(plain.plain, 0.5);  // the even images
  EXPECT_DOUBLE_EQ(plain.augmented, plain.plain) << "no augmentation: the same score";
  // tta 1 averages each image's logits with its mirror's: every image then has label 3 tied with
  // label 4 at 0.5, and the argmax takes the first.
  const train::Accuracy mirrored = train::evaluate(model, loader, Device::cpu(), DType::F32, nullptr, 1);
  EXPECT_DOUBLE_EQ(mirrored.plain, 0.5);
  EXPECT_DOUBLE_EQ(mirrored.augmented, 1.0);
}

}  // namespace
}  // namespace demi
