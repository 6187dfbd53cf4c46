// demi::Error messages end with where they were raised, relative to the repository
// ("(framework/ops/conv2d.cpp:42)"), never the build machine's absolute path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

TEST(Error, LocationIsRelativeToTheRepository) {
  const std::vector<std::string> messages = {
      test::error_of([] { conv2d(zeros({2, 3}), zeros({1, 3, 3, 3})); }),  // framework/ops
      test::error_of([] { zeros({2, 3}).item<float>(); }),                 // framework/tensor
      test::error_of([] {                                                  // backends/
        backend::TensorRef x = zeros({2}).ref(), y = zeros({3}).ref();
        kernels(zeros({2})).unary(backend::UnaryKind::Relu, x, y);
      }),
  };
  const std::regex located(R"(\((framework|backends)/[a-z0-9_/]+\.(cpp|h|cu|cuh):[0-9]+\)$)");
  for (const std::string& message : messages) {
    EXPECT_TRUE(std::regex_search(message, located)) << message;
    EXPECT_EQ(message.find(" (/"), std::string::npos) << "an absolute path: " << message;
  }
}

}  // namespace
}  // namespace demi
