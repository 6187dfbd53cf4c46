// demi::Error messages end with where they were raised, relative to the repository
// ("(framework/ops/conv2d.cpp:42)"), never the build machine's absolute path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

// True when `message` ends with "(framework/...ext:line)" or "(backends/...ext:line)". A scan rather
// than std::regex: GCC 12's <regex> trips -Wmaybe-uninitialized under ASan.
bool ends_with_repository_location(const std::string& message) {
  const size_t open = message.rfind('(');
  if (open == std::string::npos || message.empty() || message.back() != ')') return false;
  const std::string location = message.substr(open + 1, message.size() - open - 2);
  if (location.rfind("framework/", 0) != 0 && location.rfind("backends/", 0) != 0) return false;
  const size_t colon = location.rfind(':');
  if (colon == std::string::npos || colon + 1 == location.size()) return false;
  for (size_t i = colon + 1; i < location.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(location[i]))) return false;
  }
  const std::string path = location.substr(0, colon);
  for (char c : path) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_' ||
          c == '/' || c == '.')) {
      return false;
    }
  }
  for (const char* ext : {".cpp", ".h", ".cu", ".cuh"}) {
    const std::string e = ext;
    if (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

TEST(Error, LocationIsRelativeToTheRepository) {
  const std::vector<std::string> messages = {
      test::error_of([] { conv2d(zeros({2, 3}), zeros({1, 3, 3, 3})); }),  // framework/ops
      test::error_of([] { zeros({2, 3}).item<float>(); }),                 // framework/tensor
      test::error_of([] {                                                  // backends/
        backend::TensorRef x = zeros({2}).ref(), y = zeros({3}).ref();
        kernels(zeros({2})).unary(backend::UnaryKind::Relu, x, y);
      }),
  };
  for (const std::string& message : messages) {
    EXPECT_TRUE(ends_with_repository_location(message)) << message;
    EXPECT_EQ(message.find(" (/"), std::string::npos) << "an absolute path: " << message;
  }
}

}  // namespace
}  // namespace demi
