// Test-time augmentation transforms: mirror and reflect-bordered translate, pixel for pixel
// against torch.nn.functional.pad(mode="reflect") + crop, and their errors.
#include <gtest/gtest.h>

#include <numeric>

#include "datasets/transforms.h"
#include "framework/tensor/factories.h"

namespace demi::data {
namespace {

// [2, 1, 3, 4] with value 100 * n + 10 * y + x.
Tensor grid() {
  std::vector<float> v;
  for (int n = 0; n < 2; ++n)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x) v.push_back(static_cast<float>(100 * n + 10 * y + x));
  return tensor(v, {2, 1, 3, 4});
}

TEST(Transforms, MirrorReversesEachRow) {
  const std::vector<float> m = mirror(grid()).to_vector<float>();
  EXPECT_EQ(m[0], 3.0f);
  EXPECT_EQ(m[3], 0.0f);
  EXPECT_EQ(m[12 + 4 + 1], 112.0f);  // image 1, row 1, column 1 <- column 2
}

TEST(Transforms, TranslateMovesContentAndMirrorsTheBorder) {
  // Down-right by one: F.pad(x, (1, 1, 1, 1), mode="reflect")[..., 0:3, 0:4]; row -1 is row 1.
  const std::vector<float> t = translate(grid(), 1, 1).to_vector<float>();
  const std::vector<float> expected_first_image = {11, 10, 11, 12,   // row 0 <- row 1 (mirrored), columns 1 0 1 2
                                                   1,  0,  1,  2,    // row 1 <- row 0
                                                   11, 10, 11, 12};  // row 2 <- row 1
  for (size_t k = 0; k < 12; ++k) EXPECT_EQ(t[k], expected_first_image[k]) << k;
  // Up-left by one: [..., 2:5, 2:6] of the padded image; the last row and column mirror back.
  const std::vector<float> u = translate(grid(), -1, -1).to_vector<float>();
  const std::vector<float> expected_up_left = {11, 12, 13, 12, 21, 22, 23, 22, 11, 12, 13, 12};
  for (size_t k = 0; k < 12; ++k) EXPECT_EQ(u[k], expected_up_left[k]) << k;
  EXPECT_EQ(translate(grid(), 0, 0).to_vector<float>(), grid().to_vector<float>());
}

TEST(Transforms, BadInputNamesTheProblem) {
  EXPECT_THROW(mirror(grid().to(DType::F16)), Error);
  EXPECT_THROW(mirror(tensor({1, 2, 3}, {3})), Error);
  EXPECT_THROW(translate(grid(), 3, 0), Error);  // height 3: at most 2
}

}  // namespace
}  // namespace demi::data
