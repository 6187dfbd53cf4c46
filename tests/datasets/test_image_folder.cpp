// load_image_folder on small synthetic trees written here as PNGs (by a minimal encoder, so stb
// is checked against an independent writer): layout, CHW order, the cache's hit/stale/corrupt
// paths, and an error that names the file for every kind of bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "datasets/cifar10.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace demi::data {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

using test::error_of;

using test::TempDir;

// --- a minimal PNG encoder: 8-bit, deflate "stored" blocks, no filtering ---
uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}
void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}
void put_chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  std::vector<uint8_t> body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  put_be32(out, crc32(body.data(), body.size()));
}
// pixels: HWC, `channels` 1 (gray), 3 (RGB) or 4 (RGBA).
std::vector<uint8_t> encode_png(int w, int h, int channels, const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> raw;
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), pixels.begin() + y * w * channels, pixels.begin() + (y + 1) * w * channels);
  }
  std::vector<uint8_t> z = {0x78, 0x01};
  for (size_t pos = 0; pos < raw.size();) {
    const size_t len = std::min<size_t>(65535, raw.size() - pos);
    z.push_back(pos + len == raw.size() ? 1 : 0);
    z.push_back(static_cast<uint8_t>(len));
    z.push_back(static_cast<uint8_t>(len >> 8));
    z.push_back(static_cast<uint8_t>(~len));
    z.push_back(static_cast<uint8_t>(~len >> 8));
    z.insert(z.end(), raw.begin() + static_cast<std::ptrdiff_t>(pos), raw.begin() + static_cast<std::ptrdiff_t>(pos + len));
    pos += len;
  }
  uint32_t a = 1, b = 0;
  for (uint8_t v : raw) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  put_be32(z, (b << 16) | a);
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, static_cast<uint32_t>(w));
  put_be32(ihdr, static_cast<uint32_t>(h));
  const uint8_t color_type = channels == 1 ? 0 : channels == 3 ? 2 : 6;
  ihdr.insert(ihdr.end(), {8, color_type, 0, 0, 0});
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", {});
  return png;
}
void write_png(const fs::path& path, int w, int h, int channels, const std::vector<uint8_t>& pixels) {
  const std::vector<uint8_t> png = encode_png(w, h, channels, pixels);
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
}

// A 32x32 RGB image whose pixel (y, x, c) is a function of `seed`, so every image differs.
std::vector<uint8_t> test_pixels(int seed) {
  std::vector<uint8_t> p(32 * 32 * 3);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 7 + static_cast<size_t>(seed) * 31);
  return p;
}

// root/<split>/{cat,ant,bee}: 2, 3 and 1 images (class folders created out of order).
void write_tree(const fs::path& root, Split split) {
  const std::string s = split_name(split);
  write_png(root / s / "cat" / "b.png", 32, 32, 3, test_pixels(10));
  write_png(root / s / "cat" / "a.png", 32, 32, 3, test_pixels(11));
  write_png(root / s / "ant" / "x.PNG", 32, 32, 3, test_pixels(20));
  write_png(root / s / "ant" / "y.png", 32, 32, 3, test_pixels(21));
  write_png(root / s / "ant" / "z.png", 32, 32, 3, test_pixels(22));
  write_png(root / s / "bee" / "only.png", 32, 32, 3, test_pixels(30));
  std::ofstream(root / s / "ant" / "notes.txt") << "not an image: ignored";
  std::ofstream(root / s / "README") << "a file beside the class folders: ignored";
}

ImageFolderOptions cached_in(const fs::path& dir) {
  ImageFolderOptions o;
  o.cache_dir = dir.string();
  o.threads = 2;
  return o;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// Collects warnings for the life of the object.
struct WarningLog {
  std::vector<std::string> messages;
  WarningHandler previous;
  WarningLog() { previous = set_warning_handler([this](const std::string& m) { messages.push_back(m); }); }
  ~WarningLog() { set_warning_handler(previous); }
};

TEST(ImageFolder, LayoutLabelsAndChwOrder) {
  TempDir tmp;
  write_tree(tmp.path / "data", Split::Train);
  ImageFolderOptions o;
  o.use_cache = false;
  ImageFolderInfo info;
  const Dataset d = load_image_folder((tmp.path / "data").string(), Split::Train, o, &info);
  EXPECT_EQ(info.cache, CacheStatus::Off);
  EXPECT_EQ(d.classes, (std::vector<std::string>{"ant", "bee", "cat"}));
  EXPECT_EQ(d.images.shape(), (Shape{6, 3, 32, 32}));
  EXPECT_EQ(d.images.dtype(), DType::U8);
  EXPECT_EQ(d.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 1, 2, 2}));
  // Files sorted within a class: cat/a.png (seed 11) before cat/b.png (seed 10).
  const std::vector<int> seeds = {20, 21, 22, 30, 11, 10};
  const uint8_t* images = d.images.data<uint8_t>();
  for (size_t n = 0; n < seeds.size(); ++n) {
    const std::vector<uint8_t> hwc = test_pixels(seeds[n]);
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 1024; ++i)
        ASSERT_EQ(images[n * 3072 + static_cast<size_t>(c) * 1024 + static_cast<size_t>(i)], hwc[static_cast<size_t>(i) * 3 + static_cast<size_t>(c)])
            << "image " << n << " channel " << c << " pixel " << i;
  }
}

TEST(ImageFolder, ThreadCountDoesNotChangeTheResult) {
  TempDir tmp;
  write_tree(tmp.path / "data", Split::Test);
  ImageFolderOptions one, three;
  one.use_cache = three.use_cache = false;
  one.threads = 1;
  three.threads = 3;
  const Dataset a = load_image_folder((tmp.path / "data").string(), Split::Test, one);
  const Dataset b = load_image_folder((tmp.path / "data").string(), Split::Test, three);
  EXPECT_EQ(bytes_of(a.images), bytes_of(b.images));
  EXPECT_EQ(a.labels.to_vector<int64_t>(), b.labels.to_vector<int64_t>());
}

TEST(ImageFolder, CacheIsBuiltThenHitAndLivesOutsideTheData) {
  TempDir tmp;
  const fs::path root = tmp.path / "data";
  write_tree(root, Split::Train);
  size_t files_before = 0;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) ++files_before;

  ImageFolderInfo first, second;
  const Dataset a = load_image_folder(root.string(), Split::Train, cached_in(tmp.path / "cache"), &first);
  const Dataset b = load_image_folder(root.string(), Split::Train, cached_in(tmp.path / "cache"), &second);
  EXPECT_EQ(first.cache, CacheStatus::Built);
  EXPECT_EQ(second.cache, CacheStatus::Hit);
  EXPECT_EQ(first.cache_path, second.cache_path);
  EXPECT_EQ(fs::path(first.cache_path).parent_path(), tmp.path / "cache");
  EXPECT_TRUE(fs::is_regular_file(first.cache_path));
  EXPECT_EQ(bytes_of(a.images), bytes_of(b.images));
  EXPECT_EQ(a.labels.to_vector<int64_t>(), b.labels.to_vector<int64_t>());
  EXPECT_EQ(a.classes, b.classes);

  size_t files_after = 0;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) ++files_after;
  EXPECT_EQ(files_after, files_before) << "the cache must never be written next to the data";
  size_t cache_files = 0;
  for (auto it = fs::directory_iterator(tmp.path / "cache"); it != fs::directory_iterator(); ++it) ++cache_files;
  EXPECT_EQ(cache_files, 1u) << "one file per (root, split), no temporaries left behind";
}

TEST(ImageFolder, DefaultCacheDirFollowsXdgCacheHome) {
  TempDir tmp;
  write_tree(tmp.path / "data", Split::Test);
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", (tmp.path / "xdg").c_str(), 1);
  ImageFolderInfo info;
  load_image_folder((tmp.path / "data").string(), Split::Test, {}, &info);
  if (old) setenv("XDG_CACHE_HOME", saved.c_str(), 1); else unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(info.cache, CacheStatus::Built);
  EXPECT_EQ(fs::path(info.cache_path).parent_path(), tmp.path / "xdg" / "demi");
}

TEST(ImageFolder, UnwritableCacheWarnsAndStillLoads) {
  TempDir tmp;
  write_tree(tmp.path / "data", Split::Test);
  std::ofstream(tmp.path / "a_file") << "a file where the cache directory should be";
  WarningLog log;
  ImageFolderInfo info;
  const Dataset d = load_image_folder((tmp.path / "data").string(), Split::Test, cached_in(tmp.path / "a_file" / "cache"), &info);
  EXPECT_EQ(d.size(), 6);
  ASSERT_EQ(log.messages.size(), 1u);
  EXPECT_THAT(log.messages[0], HasSubstr("cannot create the cache directory"));
}

TEST(ImageFolder, ChangedTreeRebuildsTheCache) {
  TempDir tmp;
  const fs::path root = tmp.path / "data";
  write_tree(root, Split::Train);
  const ImageFolderOptions o = cached_in(tmp.path / "cache");
  load_image_folder(root.string(), Split::Train, o);

  // Same size, new pixels, later mtime: only the mtime tells the trees apart.
  const fs::path changed = root / "train" / "bee" / "only.png";
  const auto size_before = fs::file_size(changed);
  const auto mtime = fs::last_write_time(changed);
  write_png(changed, 32, 32, 3, test_pixels(99));
  fs::last_write_time(changed, mtime + std::chrono::seconds(10));
  ASSERT_EQ(fs::file_size(changed), size_before);
  ImageFolderInfo info;
  const Dataset d = load_image_folder(root.string(), Split::Train, o, &info);
  EXPECT_EQ(info.cache, CacheStatus::Stale);
  EXPECT_EQ(d.images.data<uint8_t>()[3 * 3072], test_pixels(99)[0]);

  // An added image changes the file list.
  write_png(root / "train" / "bee" / "second.png", 32, 32, 3, test_pixels(40));
  const Dataset e = load_image_folder(root.string(), Split::Train, o, &info);
  EXPECT_EQ(info.cache, CacheStatus::Stale);
  EXPECT_EQ(e.size(), 7);
  load_image_folder(root.string(), Split::Train, o, &info);
  EXPECT_EQ(info.cache, CacheStatus::Hit);
}

TEST(ImageFolder, CorruptOrTruncatedCacheIsRebuiltNotTrusted) {
  TempDir tmp;
  const fs::path root = tmp.path / "data";
  write_tree(root, Split::Test);
  const ImageFolderOptions o = cached_in(tmp.path / "cache");
  ImageFolderInfo info;
  const Dataset good = load_image_folder(root.string(), Split::Test, o, &info);
  const fs::path cache = info.cache_path;
  const auto size = fs::file_size(cache);

  {  // one flipped pixel byte in the body: only the checksum can see it
    std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 100));
    f.put('\x5a' ^ static_cast<char>(good.images.data<uint8_t>()[good.images.numel() - 92]));
  }
  WarningLog log;
  Dataset d = load_image_folder(root.string(), Split::Test, o, &info);
  EXPECT_EQ(info.cache, CacheStatus::Corrupt);
  EXPECT_EQ(bytes_of(d.images), bytes_of(good.images));
  ASSERT_EQ(log.messages.size(), 1u);
  EXPECT_THAT(log.messages[0], HasSubstr(cache.string()));
  load_image_folder(root.string(), Split::Test, o, &info);
  EXPECT_EQ(info.cache, CacheStatus::Hit) << "the rebuilt cache is whole again";

  fs::resize_file(cache, size - 5000);  // truncated
  d = load_image_folder(root.string(), Split::Test, o, &info);
  EXPECT_EQ(info.cache, CacheStatus::Corrupt);
  EXPECT_EQ(bytes_of(d.images), bytes_of(good.images));

  std::ofstream(cache, std::ios::binary | std::ios::trunc) << "garbage";  // not a cache file at all
  d = load_image_folder(root.string(), Split::Test, o, &info);
  EXPECT_EQ(info.cache, CacheStatus::Corrupt);
  EXPECT_EQ(bytes_of(d.images), bytes_of(good.images));
}

TEST(ImageFolder, BadImagesNameTheFile) {
  TempDir tmp;
  const fs::path root = tmp.path / "data";
  ImageFolderOptions o;
  o.use_cache = false;

  write_tree(root, Split::Train);
  const fs::path small = root / "train" / "bee" / "small.png";
  write_png(small, 16, 16, 3, std::vector<uint8_t>(16 * 16 * 3, 7));
  std::string e = error_of([&] { load_image_folder(root.string(), Split::Train, o); });
  EXPECT_THAT(e, HasSubstr(small.string()));
  EXPECT_THAT(e, HasSubstr("16x16"));
  EXPECT_THAT(e, HasSubstr("expected 32x32 RGB"));
  fs::remove(small);

  const fs::path gray = root / "train" / "bee" / "gray.png";
  write_png(gray, 32, 32, 1, std::vector<uint8_t>(32 * 32, 7));
  e = error_of([&] { load_image_folder(root.string(), Split::Train, o); });
  EXPECT_THAT(e, HasSubstr(gray.string()));
  EXPECT_THAT(e, HasSubstr("1 channel"));
  fs::remove(gray);

  const fs::path rgba = root / "train" / "bee" / "rgba.png";
  write_png(rgba, 32, 32, 4, std::vector<uint8_t>(32 * 32 * 4, 7));
  e = error_of([&] { load_image_folder(root.string(), Split::Train, o); });
  EXPECT_THAT(e, HasSubstr(rgba.string()));
  EXPECT_THAT(e, HasSubstr("4 channel"));
  fs::remove(rgba);

  const fs::path junk = root / "train" / "cat" / "junk.jpg";
  std::ofstream(junk, std::ios::binary) << "this is not a jpeg at all";
  e = error_of([&] { load_image_folder(root.string(), Split::Train, o); });
  EXPECT_THAT(e, HasSubstr(junk.string()));
  EXPECT_THAT(e, HasSubstr("could not be decoded"));
  std::ofstream(junk, std::ios::binary | std::ios::trunc);  // empty file
  e = error_of([&] { load_image_folder(root.string(), Split::Train, o); });
  EXPECT_THAT(e, HasSubstr(junk.string()));
  fs::remove(junk);

  EXPECT_NO_THROW(load_image_folder(root.string(), Split::Train, o));
}

// decode_cifar10_image is what load_image_folder runs on each file's bytes (and what the fuzzer
// feeds): HWC -> CHW for a good image, an error before any pixel allocation for a forged header.
TEST(ImageFolder, DecodeChecksTheFormatAndTheHeaderFirst) {
  std::vector<uint8_t> chw(3072);
  const std::vector<uint8_t> hwc = test_pixels(5);
  const std::vector<uint8_t> png = encode_png(32, 32, 3, hwc);
  decode_cifar10_image(png.data(), png.size(), "good.png", chw.data());
  EXPECT_EQ(chw[0], hwc[0]);
  EXPECT_EQ(chw[1024 + 1], hwc[1 * 3 + 1]);
  EXPECT_EQ(chw[2048 + 1023], hwc[1023 * 3 + 2]);

  // IHDR of 10000x10000 RGB (300 MB of pixels) and no real data: refused from the header alone.
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, 10000);
  put_be32(ihdr, 10000);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  std::vector<uint8_t> huge = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_chunk(huge, "IHDR", ihdr);
  put_chunk(huge, "IDAT", {0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01});
  put_chunk(huge, "IEND", {});
  std::string e = error_of([&] { decode_cifar10_image(huge.data(), huge.size(), "huge.png", chw.data()); });
  EXPECT_THAT(e, HasSubstr("huge.png is 10000x10000 with 3 channel(s); expected 32x32 RGB"));

  // Regression (fuzz/corpus/image_decode/regress_png_chunk_length.png): an IDAT chunk declaring
  // 671 MB in a 522-byte file made stb_image allocate 671 MB before finding the data missing.
  std::vector<uint8_t> forged_chunk(png.begin(), png.begin() + 33);  // signature + IHDR
  put_be32(forged_chunk, 671088640);
  forged_chunk.insert(forged_chunk.end(), {'I', 'D', 'A', 'T', 0x78, 0x01});
  e = error_of([&] { decode_cifar10_image(forged_chunk.data(), forged_chunk.size(), "chunk.png", chw.data()); });
  EXPECT_THAT(e, HasSubstr("chunk.png could not be decoded: a PNG chunk at byte 33 declares 671088640 bytes but only 2 follow"));
  const std::vector<uint8_t> big(2 << 20, 0);
  EXPECT_THAT(error_of([&] { decode_cifar10_image(big.data(), big.size(), "big.png", chw.data()); }),
              HasSubstr("big.png is empty or too large (2097152 bytes"));

  // A BMP (which stb_image would decode) named .png: only PNG and JPEG reach the decoder.
  std::vector<uint8_t> bmp = {'B', 'M'};
  bmp.resize(64, 0);
  e = error_of([&] { decode_cifar10_image(bmp.data(), bmp.size(), "bitmap.png", chw.data()); });
  EXPECT_THAT(e, HasSubstr("bitmap.png could not be decoded: it is neither a PNG nor a JPEG"));

  // Regression (fuzz/corpus/image_decode/regress_dht_over_256_codes.jpg): a JPEG Huffman table of
  // 300 codes made stb_image 2.27 write past its 257-entry table; refused before stb sees it.
  std::vector<uint8_t> dht = {0xff, 0xd8, 0xff, 0xc4, 0x01, 0x3d, 0x00};
  for (int i = 0; i < 14; ++i) dht.push_back(0);
  dht.insert(dht.end(), {255, 45});
  dht.resize(dht.size() + 300, 1);
  dht.insert(dht.end(), {0xff, 0xd9});
  e = error_of([&] { decode_cifar10_image(dht.data(), dht.size(), "dht.jpg", chw.data()); });
  EXPECT_THAT(e, HasSubstr("dht.jpg could not be decoded: a JPEG Huffman table declares 300 codes"));

  // Regression (fuzz/corpus/image_decode/regress_jpeg_undefined_huffman_table.jpg): a baseline scan
  // whose AC table 0 no DHT defines made stb_image decode with uninitialised tables (and, depending
  // on old heap contents, abort in its own assert). SOI, SOF0 (one 8x8 component), a DHT of DC
  // table 0 only, then SOS selecting DC 0 / AC 0.
  std::vector<uint8_t> scan = {0xff, 0xd8, 0xff, 0xc0, 0x00, 0x0b, 0x08, 0x00, 0x08, 0x00, 0x08, 0x01, 0x01, 0x11, 0x00,
                               0xff, 0xc4, 0x00, 0x14, 0x00, 0x01};
  scan.resize(scan.size() + 15, 0);
  scan.insert(scan.end(), {0x00, 0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3f, 0x00, 0x00, 0xff, 0xd9});
  e = error_of([&] { decode_cifar10_image(scan.data(), scan.size(), "scan.jpg", chw.data()); });
  EXPECT_THAT(e, HasSubstr("scan.jpg could not be decoded: a JPEG scan uses a Huffman table (DC 0, AC 0) that no "
                           "earlier DHT segment defines"));

  // A PNG cut off after its header: the header says 32x32 RGB, the pixels are missing.
  const std::vector<uint8_t> cut(png.begin(), png.begin() + 40);
  e = error_of([&] { decode_cifar10_image(cut.data(), cut.size(), "cut.png", chw.data()); });
  EXPECT_THAT(e, HasSubstr("cut.png could not be decoded (stb_image: "));
}

TEST(ImageFolder, MissingOrEmptyFoldersAreErrors) {
  TempDir tmp;
  const fs::path root = tmp.path / "data";
  ImageFolderOptions o;
  o.use_cache = false;

  std::string e = error_of([&] { load_image_folder(root.string(), Split::Train, o); });
  EXPECT_THAT(e, HasSubstr(root.string()));
  EXPECT_THAT(e, HasSubstr("not a directory"));

  write_tree(root, Split::Train);
  e = error_of([&] { load_image_folder(root.string(), Split::Test, o); });
  EXPECT_THAT(e, HasSubstr("missing split"));
  EXPECT_THAT(e, HasSubstr((root / "test").string()));

  fs::create_directories(root / "test");
  e = error_of([&] { load_image_folder(root.string(), Split::Test, o); });
  EXPECT_THAT(e, HasSubstr("no class folders"));

  fs::create_directories(root / "train" / "dog");
  std::ofstream(root / "train" / "dog" / "labels.txt") << "no images here";
  e = error_of([&] { load_image_folder(root.string(), Split::Train, o); });
  EXPECT_THAT(e, HasSubstr((root / "train" / "dog").string()));
  EXPECT_THAT(e, HasSubstr("has no images"));
}

}  // namespace
}  // namespace demi::data
