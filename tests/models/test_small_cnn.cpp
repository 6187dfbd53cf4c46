// The reference models have exactly the reference's parameter counts and output shapes.
#include <gtest/gtest.h>

#include "models/small_cnn.h"

namespace demi {
namespace {

int64_t parameter_count(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

TEST(Models, ParameterCountsMatchTheReference) {
  EXPECT_EQ(parameter_count(*models::make_model("SmallCNN")), 141034);
  EXPECT_EQ(parameter_count(*models::make_model("AirNet")), 1972792);
}

TEST(Models, ForwardShapes) {
  Generator gen(0);
  NoGradGuard no_grad;
  const Tensor x = randn({2, 3, 32, 32}, gen);
  for (const char* name : {"SmallCNN", "AirNet"}) {
    auto m = models::make_model(name, gen);
    EXPECT_EQ((*m)(x).shape(), (Shape{2, 10})) << name;
  }
}

TEST(Models, UnknownNameNamesTheChoices) {
  try {
    models::make_model("ResNet");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("choose SmallCNN or AirNet"), std::string::npos);
  }
}

}  // namespace
}  // namespace demi
