// TempDir: a fresh, uniquely named directory under the system temp dir, removed with everything
// in it when the test is done.
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace demi::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "demi_test_") {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / (prefix + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace demi::test
