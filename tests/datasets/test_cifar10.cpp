// The CIFAR-10 binary reader on synthetic batches, load_cifar10's format detection, and the real
// data set at $DEMI_CIFAR10 (an image-folder tree: decoded cold, then served from the cache).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "datasets/cifar10.h"
#include "support/error_of.h"
#include "support/real_data.h"
#include "support/temp_dir.h"

namespace demi::data {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

using test::error_of;

using test::TempDir;

uint8_t pixel(int file, int record, int byte) { return static_cast<uint8_t>(file * 101 + record * 13 + byte * 7); }

// `records` records with label (file + record) % 10 and pixels from pixel(); `extra` appends bytes.
void write_batch(const fs::path& path, int file, int records, const std::vector<uint8_t>& extra = {}) {
  std::vector<uint8_t> bytes;
  for (int r = 0; r < records; ++r) {
    bytes.push_back(static_cast<uint8_t>((file + r) % 10));
    for (int b = 0; b < 3072; ++b) bytes.push_back(pixel(file, r, b));
  }
  bytes.insert(bytes.end(), extra.begin(), extra.end());
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_binary_set(const fs::path& dir) {
  for (int f = 1; f <= 5; ++f) write_batch(dir / ("data_batch_" + std::to_string(f) + ".bin"), f, 3);
  write_batch(dir / "test_batch.bin", 0, 4);
}

TEST(Cifar10Binary, ReadsRecordsInFileOrder) {
  TempDir tmp;
  write_binary_set(tmp.path);
  const Dataset train = load_cifar10_binary(tmp.path.string(), Split::Train);
  EXPECT_EQ(train.images.shape(), (Shape{15, 3, 32, 32}));
  EXPECT_EQ(train.labels.shape(), (Shape{15}));
  EXPECT_EQ(train.classes, cifar10_classes());
  EXPECT_EQ(train.classes.front(), "airplane");
  EXPECT_EQ(train.classes.back(), "truck");
  const std::vector<int64_t> labels = train.labels.to_vector<int64_t>();
  const uint8_t* images = train.images.data<uint8_t>();
  for (int f = 1; f <= 5; ++f) {
    for (int r = 0; r < 3; ++r) {
      const size_t n = static_cast<size_t>((f - 1) * 3 + r);
      EXPECT_EQ(labels[n], (f + r) % 10);
      for (int b : {0, 1, 1023, 1024, 2048, 3071}) EXPECT_EQ(images[n * 3072 + static_cast<size_t>(b)], pixel(f, r, b));
    }
  }
  const Dataset test = load_cifar10_binary(tmp.path.string(), Split::Test);
  EXPECT_EQ(test.size(), 4);
  EXPECT_EQ(test.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(test.images.data<uint8_t>()[3 * 3072 + 5], pixel(0, 3, 5));
}

TEST(Cifar10Binary, ClassNamesFromBatchesMeta) {
  TempDir tmp;
  write_binary_set(tmp.path);
  std::ofstream meta(tmp.path / "batches.meta.txt");
  for (int c = 0; c < 10; ++c) meta << "class" << c << "\n";
  meta << "\n";
  meta.close();
  EXPECT_EQ(load_cifar10_binary(tmp.path.string(), Split::Test).classes[9], "class9");
  std::ofstream(tmp.path / "batches.meta.txt") << "one\ntwo\n";
  EXPECT_THAT(error_of([&] { load_cifar10_binary(tmp.path.string(), Split::Test); }), HasSubstr("names 2 classes"));
}

TEST(Cifar10Binary, TruncatedRecordNamesFileRecordAndSize) {
  TempDir tmp;
  write_binary_set(tmp.path);
  const fs::path bad = tmp.path / "data_batch_4.bin";
  write_batch(bad, 4, 2, std::vector<uint8_t>(100, 1));  // record 2 has 100 of its 3073 bytes
  const std::string e = error_of([&] { load_cifar10_binary(tmp.path.string(), Split::Train); });
  EXPECT_THAT(e, HasSubstr(bad.string()));
  EXPECT_THAT(e, HasSubstr("record 2"));
  EXPECT_THAT(e, HasSubstr("3073"));
  std::ofstream(bad, std::ios::trunc);
  EXPECT_THAT(error_of([&] { load_cifar10_binary(tmp.path.string(), Split::Train); }), HasSubstr("is empty"));
}

TEST(Cifar10Binary, LabelOutOfRangeNamesFileRecordAndValue) {
  TempDir tmp;
  write_binary_set(tmp.path);
  const fs::path bad = tmp.path / "test_batch.bin";
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2 * 3073);
    f.put(static_cast<char>(57));
  }
  const std::string e = error_of([&] { load_cifar10_binary(tmp.path.string(), Split::Test); });
  EXPECT_THAT(e, HasSubstr(bad.string()));
  EXPECT_THAT(e, HasSubstr("record 2"));
  EXPECT_THAT(e, HasSubstr("label 57"));
}

// parse_cifar10_binary is what load_cifar10_binary runs on each file's bytes (and what the fuzzer feeds).
TEST(Cifar10Binary, ParsesBytesAndNamesTheirSource) {
  std::vector<uint8_t> bytes(2 * 3073, 9);
  bytes[0] = 3;
  bytes[3073] = 7;
  bytes[3073 + 1 + 3071] = 200;
  const Dataset d = parse_cifar10_binary(bytes.data(), bytes.size(), "two.bin");
  EXPECT_EQ(d.labels.to_vector<int64_t>(), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(d.images.data<uint8_t>()[3072 + 3071], 200);
  EXPECT_EQ(d.classes, cifar10_classes());
  EXPECT_THAT(error_of([&] { parse_cifar10_binary(bytes.data(), 3072, "short.bin"); }),
              HasSubstr("short.bin is truncated: record 0 has 3072 bytes"));
  EXPECT_THAT(error_of([&] { parse_cifar10_binary(bytes.data(), 0, "none.bin"); }), HasSubstr("none.bin is empty"));
  bytes[3073] = 10;
  EXPECT_THAT(error_of([&] { parse_cifar10_binary(bytes.data(), bytes.size(), "bad.bin"); }),
              HasSubstr("bad.bin record 1 has label 10"));
}

TEST(Cifar10Binary, MissingBatchIsNamed) {
  TempDir tmp;
  write_binary_set(tmp.path);
  fs::remove(tmp.path / "data_batch_3.bin");
  const std::string e = error_of([&] { load_cifar10_binary(tmp.path.string(), Split::Train); });
  EXPECT_THAT(e, HasSubstr((tmp.path / "data_batch_3.bin").string()));
  EXPECT_THAT(e, HasSubstr("missing"));
}

TEST(Cifar10, DetectsTheFormatOrSaysWhatIsMissing) {
  TempDir tmp;
  write_binary_set(tmp.path / "flat");
  EXPECT_EQ(load_cifar10((tmp.path / "flat").string(), Split::Train).size(), 15);
  write_binary_set(tmp.path / "tarball" / "cifar-10-batches-bin");
  EXPECT_EQ(load_cifar10((tmp.path / "tarball").string(), Split::Test).size(), 4);

  fs::create_directories(tmp.path / "empty");
  const std::string e = error_of([&] { load_cifar10((tmp.path / "empty").string(), Split::Test); });
  EXPECT_THAT(e, HasSubstr("missing split"));
  EXPECT_THAT(e, HasSubstr((tmp.path / "empty").string()));
  EXPECT_THAT(e, HasSubstr("test_batch.bin"));
  EXPECT_THAT(e, HasSubstr((tmp.path / "empty" / "test").string()));
  EXPECT_THAT(error_of([&] { load_cifar10((tmp.path / "nowhere").string(), Split::Train); }),
              HasSubstr("not a directory"));
}

// --- the real data set -------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::vector<int64_t> class_counts(const Dataset& d) {
  std::vector<int64_t> counts(d.classes.size(), 0);
  for (const int64_t l : d.labels.to_vector<int64_t>()) ++counts.at(static_cast<size_t>(l));
  return counts;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// Per-channel mean of pixel / 255: catches swapped channels or an HWC/CHW mix-up.
std::array<double, 3> channel_means(const Dataset& d) {
  std::array<double, 3> sum{};
  const uint8_t* p = d.images.data<uint8_t>();
  for (int64_t n = 0; n < d.size(); ++n)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 1024; ++i) sum[static_cast<size_t>(c)] += p[n * 3072 + c * 1024 + i];
  for (double& s : sum) s /= 255.0 * 1024.0 * static_cast<double>(d.size());
  return sum;
}

TEST(Cifar10Real, TestSplitDecodesAndRoundTripsThroughTheCache) {
  DEMI_REQUIRE_REAL_DATA();
  const fs::path dir = test::real_data_dir();
  TempDir cache;  // cold: a fresh cache for this run
  ImageFolderOptions o;
  o.cache_dir = cache.path.string();
  ImageFolderInfo info;

  auto start = std::chrono::steady_clock::now();
  const Dataset built = load_cifar10(dir.string(), Split::Test, o, &info);
  std::cout << "[ timing   ] test split, decode + cache write: " << seconds_since(start) << " s\n";
  EXPECT_EQ(info.cache, CacheStatus::Built);
  ASSERT_EQ(built.images.shape(), (Shape{10000, 3, 32, 32}));
  EXPECT_EQ(built.labels.shape(), (Shape{10000}));
  EXPECT_EQ(built.classes, cifar10_classes()) << "sorted folder names are the CIFAR-10 label order";
  EXPECT_EQ(class_counts(built), std::vector<int64_t>(10, 1000));
  const std::array<double, 3> mean = channel_means(built);
  std::cout << "[ means    ] test split R G B: " << mean[0] << " " << mean[1] << " " << mean[2] << "\n";
  EXPECT_NEAR(mean[0], 0.4942, 0.01);  // the test split's R, G, B means
  EXPECT_NEAR(mean[1], 0.4851, 0.01);
  EXPECT_NEAR(mean[2], 0.4504, 0.01);

  start = std::chrono::steady_clock::now();
  const Dataset hit = load_cifar10(dir.string(), Split::Test, o, &info);
  std::cout << "[ timing   ] test split, cache hit: " << seconds_since(start) << " s\n";
  EXPECT_EQ(info.cache, CacheStatus::Hit);
  EXPECT_TRUE(same_bytes(hit.images, built.images));
  EXPECT_TRUE(same_bytes(hit.labels, built.labels));

  ImageFolderOptions fresh;
  fresh.use_cache = false;
  const Dataset decoded = load_cifar10(dir.string(), Split::Test, fresh);
  EXPECT_TRUE(same_bytes(decoded.images, hit.images));
  // Spot check: the first cat (test/cat/0000.jpg is example 3000), channel G, row 16, column 5.
  const size_t at = 3000 * 3072 + 1 * 1024 + 16 * 32 + 5;
  EXPECT_EQ(hit.images.data<uint8_t>()[at], decoded.images.data<uint8_t>()[at]);
  EXPECT_EQ(hit.labels.data<int64_t>()[3000], 3);
  EXPECT_EQ(hit.labels.data<int64_t>()[2999], 2);
}

TEST(Cifar10Real, TrainSplitDecodesThenHitsTheCache) {
  DEMI_REQUIRE_REAL_DATA();
  const fs::path dir = test::real_data_dir();
  TempDir cache;
  ImageFolderOptions o;
  o.cache_dir = cache.path.string();
  ImageFolderInfo info;

  auto start = std::chrono::steady_clock::now();
  const Dataset built = load_cifar10(dir.string(), Split::Train, o, &info);
  std::cout << "[ timing   ] train split, decode + cache write: " << seconds_since(start) << " s\n";
  EXPECT_EQ(info.cache, CacheStatus::Built);
  ASSERT_EQ(built.images.shape(), (Shape{50000, 3, 32, 32}));
  EXPECT_EQ(class_counts(built), std::vector<int64_t>(10, 5000));
  const std::array<double, 3> mean = channel_means(built);
  std::cout << "[ means    ] train split R G B: " << mean[0] << " " << mean[1] << " " << mean[2] << "\n";
  const Normalization& norm = kCifar10Normalization;
  for (size_t c = 0; c < 3; ++c) EXPECT_NEAR(mean[c], norm.mean[c], 0.005) << "channel " << c;

  start = std::chrono::steady_clock::now();
  const Dataset hit = load_cifar10(dir.string(), Split::Train, o, &info);
  std::cout << "[ timing   ] train split, cache hit: " << seconds_since(start) << " s\n";
  EXPECT_EQ(info.cache, CacheStatus::Hit);
  EXPECT_TRUE(same_bytes(hit.images, built.images));
  EXPECT_TRUE(same_bytes(hit.labels, built.labels));
}

}  // namespace
}  // namespace demi::data
