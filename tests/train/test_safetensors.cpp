// safetensors checkpoints: round trip of every dtype, the byte layout PyTorch's reader expects,
// and clear errors for truncated or foreign files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "framework/demi/demi.h"
#include "train/safetensors.h"
#include "support/error_of.h"

namespace demi {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("demi_test_" + name)).string();
}

using test::error_of;

TEST(Safetensors, RoundTripsEveryDtype) {
  const std::string path = temp_path("roundtrip.safetensors");
  std::map<std::string, Tensor> tensors = {
      {"w32", tensor({1.5f, -2.0f, 3.25f, 0.0f}, {2, 2})},
      {"w16", tensor({65504.0f, 1e-8f}, {2}, DType::F16)},
      {"wbf", tensor({1.0f, -0.5f, 7.0f}, {3}, DType::BF16)},
      {"step", tensor(std::vector<int64_t>{42}, {})},
  };
  train::save_safetensors(path, tensors, {{"format", "pt"}});
  const auto loaded = train::load_safetensors(path);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_EQ(loaded.at(name).dtype(), t.dtype());
    EXPECT_EQ(loaded.at(name).shape(), t.shape());
    EXPECT_EQ(loaded.at(name).to_vector<double>(), t.to_vector<double>());
  }
  // layout: 8-byte little-endian header length, then JSON starting with '{'
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ(n % 8, 0u);
  EXPECT_NE(bytes.find("\"dtype\":\"BF16\""), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Safetensors, TruncatedAndForeignFilesGiveClearErrors) {
  const std::string path = temp_path("truncated.safetensors");
  train::save_safetensors(path, {{"w", ones({100})}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  EXPECT_NE(error_of([&] { train::load_safetensors(path); }).find("offsets outside the file"), std::string::npos);
  const std::string foreign = temp_path("foreign.safetensors");
  std::ofstream(foreign) << "not a checkpoint at all";
  EXPECT_NE(error_of([&] { train::load_safetensors(foreign); }).find(foreign), std::string::npos);
  EXPECT_NE(error_of([&] { train::load_safetensors(temp_path("missing.safetensors")); }).find("cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace demi
