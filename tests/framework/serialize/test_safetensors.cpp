// safetensors checkpoints: round trip of every dtype, the byte layout PyTorch's reader expects,
// clear errors for truncated, foreign or forged files, and a full disk that keeps the old file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "framework/demi/demi.h"
#include "framework/serialize/safetensors.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace demi {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("demi_test_" + name)).string();
}

using test::error_of;
using testing::HasSubstr;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A safetensors file from its header text and `body` data bytes, the length field as given.
std::string forged(const std::string& header, size_t body, uint64_t length_field) {
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((length_field >> (8 * i)) & 0xff);
  return file + header + std::string(body, '\x01');
}
std::string forged(const std::string& header, size_t body = 16) { return forged(header, body, header.size()); }

std::string parse_error(const std::string& file) {
  return error_of([&] {
    parse_safetensors(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "forged.safetensors");
  });
}

TEST(Safetensors, RoundTripsEveryDtype) {
  const std::string path = temp_path("roundtrip.safetensors");
  StateDict tensors = {
      {"w32", tensor({1.5f, -2.0f, 3.25f, 0.0f}, {2, 2})},
      {"w16", tensor({65504.0f, 1e-8f}, {2}, DType::F16)},
      {"wbf", tensor({1.0f, -0.5f, 7.0f}, {3}, DType::BF16)},
      {"step", tensor(std::vector<int64_t>{42}, {})},
  };
  save_safetensors(path, tensors, {{"format", "pt"}});
  const auto loaded = load_safetensors(path);
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
  save_safetensors(path, {{"w", ones({100})}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  EXPECT_NE(error_of([&] { load_safetensors(path); }).find("offsets outside the file"), std::string::npos);
  const std::string foreign = temp_path("foreign.safetensors");
  std::ofstream(foreign) << "not a checkpoint at all";
  EXPECT_NE(error_of([&] { load_safetensors(foreign); }).find(foreign), std::string::npos);
  EXPECT_NE(error_of([&] { load_safetensors(temp_path("missing.safetensors")); }).find("cannot open"),
            std::string::npos);
}

// Every length, offset and shape is checked against the file before anything is allocated: a
// forged field gives an error naming the tensor, never a crash or a huge allocation.
TEST(Safetensors, ForgedHeadersGiveClearErrors) {
  const std::string good = forged(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})");
  ASSERT_EQ(parse_safetensors(reinterpret_cast<const uint8_t*>(good.data()), good.size(), "good")
                .at("w")
                .shape(),
            (Shape{2, 2}));
  struct Case {
    std::string file, expected;
  };
  const Case cases[] = {
      {std::string(7, '\0'), "too short"},
      {forged("{}", 0, 1ull << 40), "header length 1099511627776 exceeds the file size"},
      {forged("{}", 0, ~0ull), "exceeds the file size"},
      {forged("[1,2]"), "header is a JSON array, expected an object"},
      {forged("{\"w\":"), "not valid JSON"},
      {forged(R"({"w":7})"), "tensor 'w' is a JSON number"},
      {forged(R"({"w":{"dtype":"F32","shape":[4]}})"), "tensor 'w' has no \"data_offsets\""},
      {forged(R"({"w":{"dtype":5,"shape":[4],"data_offsets":[0,16]}})"), "dtype is a JSON number"},
      {forged(R"({"w":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})"), "unsupported safetensors dtype 'Q4'"},
      {forged(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})"), "not a non-negative integer"},
      {forged(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,16]}})"), "not a non-negative integer"},
      {forged(R"({"w":{"dtype":"F32","shape":"4","data_offsets":[0,16]}})"), "expected an array"},
      {forged(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,16]}})"),
       "more than 2^56 elements"},
      {forged(R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
       "more than 2^56 elements"},
      {forged(R"({"w":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,16]}})"),
       "holds 16 bytes but F32 [1048576, 1048576] needs 4398046511104"},
      {forged(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,17]}})"), "outside the file ([0, 17] in 16 data bytes)"},
      {forged(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,4]}})"), "([8, 4] in 16"},
      {forged(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[18446744073709551615,16]}})"), "outside the file"},
      {forged(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0]}})"), "is not [begin, end]"},
      {forged(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,-16]}})"), "is not [begin, end]"},
      {forged(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})"),
       "tensors 'a' and 'b' overlap (data offsets [0, 16] and [8, 16])"},
      {forged(R"({"__metadata__":[1],"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"),
       "__metadata__ is a JSON array"},
  };
  for (const Case& c : cases) {
    const std::string e = parse_error(c.file);
    EXPECT_THAT(e, HasSubstr(c.expected)) << "header: " << c.file.substr(std::min<size_t>(8, c.file.size()));
    EXPECT_THAT(e, HasSubstr("forged.safetensors"));
  }
}

// A full disk, simulated by a file-size limit in a child process: save_safetensors says which
// file and why, removes its temporary file, and the previous checkpoint is byte-identical.
TEST(Safetensors, FullDiskLeavesThePreviousFileIntact) {
  const test::TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  save_safetensors(path, {{"w", full({16}, 3.0)}});
  const std::string before = read_bytes(path);
  ASSERT_FALSE(before.empty());
  const StateDict big = {{"w", ones({1 << 18})}};  // 1 MB: past the limit below

  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child: 64 KiB files at most; SIGXFSZ ignored so write() fails with EFBIG instead.
    ::close(pipe_fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string e = error_of([&] { save_safetensors(path, big); });
    const ssize_t n = ::write(pipe_fds[1], e.data(), e.size());
    ::_exit(n == static_cast<ssize_t>(e.size()) ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) message.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;

  EXPECT_THAT(message, HasSubstr("cannot write '" + path + "'"));
  EXPECT_THAT(message, HasSubstr(std::strerror(EFBIG)));
  EXPECT_THAT(message, HasSubstr("the previous '" + path + "' is untouched"));
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(load_safetensors(path).at("w").to_vector<float>(), std::vector<float>(16, 3.0f));
}

TEST(Safetensors, UnwritableDirectoryNamesThePath) {
  const test::TempDir dir;
  const std::string path = (dir.path / "no_such_dir" / "model.safetensors").string();
  const std::string e = error_of([&] { save_safetensors(path, {{"w", ones({4})}}); });
  EXPECT_THAT(e, HasSubstr("cannot write '" + path + "'"));
  EXPECT_THAT(e, HasSubstr(std::strerror(ENOENT)));
}

}  // namespace
}  // namespace demi
