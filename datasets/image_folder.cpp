// The image-folder reader: lists root/<split>/<class>/*, decodes on a thread pool with stb_image and
// caches the decoded split as one checksummed binary file in the user's cache directory.
#include "datasets/cifar10.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include <stb_image.h>

namespace demi::data {

namespace fs = std::filesystem;

namespace {

constexpr size_t kImageBytes = 3 * 32 * 32;

// Cache file (native byte order; a local cache, never shipped):
//   header: "DEMIIMGF" | u32 version | u32 split | u64 tree key | u64 N | u32 C | C x (u32 len, name)
//   body:   i64 labels[N] | u8 images[N * 3072]
//   u64 checksum of header and body
// The tree key hashes the root path and every image's relative name, size and mtime, so any edit
// to the tree rebuilds the cache. One file per (root, split): a rebuild overwrites, nothing piles up.
constexpr char kMagic[8] = {'D', 'E', 'M', 'I', 'I', 'M', 'G', 'F'};
constexpr uint32_t kVersion = 1;

struct Entry {
  fs::path path;
  int64_t label;
};

struct Tree {
  std::vector<std::string> classes;
  std::vector<Entry> files;  // by class, then by name
  uint64_t key = 0;
};

// 64-bit hash, a word at a time (~3 GB/s: the 150 MB train cache checks in ~50 ms). Detects
// corruption and truncation, not tampering.
uint64_t hash_bytes(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  auto mix = [&h](uint64_t w) {
    h ^= w * 0xff51afd7ed558ccdull;
    h = ((h << 29) | (h >> 35)) * 0xc4ceb9fe1a85ec53ull;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    mix(w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  mix(tail ^ (static_cast<uint64_t>(n) << 56));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

bool is_image_name(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == "png" || ext == "jpg" || ext == "jpeg";
}

template <typename T>
void append_pod(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

Tree list_tree(const fs::path& root, Split split) {
  const fs::path split_dir = root / split_name(split);
  DEMI_CHECK(fs::is_directory(split_dir), "load_image_folder: missing split: ", split_dir.string(),
             " is not a directory; expected ", split_dir.string(), "/<class>/*.png|jpg");
  Tree tree;
  for (const fs::directory_entry& e : fs::directory_iterator(split_dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name[0] != '.') tree.classes.push_back(name);
  }
  DEMI_CHECK(!tree.classes.empty(), "load_image_folder: ", split_dir.string(),
             " has no class folders; expected ", split_dir.string(), "/<class>/*.png|jpg");
  std::sort(tree.classes.begin(), tree.classes.end());

  std::string key_input = fs::weakly_canonical(root).string();
  key_input.push_back('\0');
  key_input += split_name(split);
  for (size_t c = 0; c < tree.classes.size(); ++c) {
    const fs::path class_dir = split_dir / tree.classes[c];
    std::vector<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(class_dir)) {
      const std::string name = e.path().filename().string();
      if (is_image_name(name) && e.is_regular_file()) names.push_back(name);
    }
    DEMI_CHECK(!names.empty(), "load_image_folder: class folder ", class_dir.string(),
               " has no images (*.png, *.jpg, *.jpeg); add its images or remove the folder");
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const fs::path path = class_dir / name;
      key_input.push_back('\0');
      key_input += tree.classes[c] + '/' + name;
      append_pod(key_input, static_cast<uint64_t>(fs::file_size(path)));
      append_pod(key_input, static_cast<int64_t>(fs::last_write_time(path).time_since_epoch().count()));
      tree.files.push_back({path, static_cast<int64_t>(c)});
    }
  }
  tree.key = hash_bytes(key_input.data(), key_input.size(), 0x1d8e4e27c47d124full);
  return tree;
}

// Reads one file and decodes it into 3072 CHW bytes at `out`.
void decode_file(const fs::path& path, uint8_t* out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  DEMI_CHECK(in, "load_image_folder: cannot open ", path.string(), "; check that it is readable");
  const std::streamoff size = in.tellg();
  DEMI_CHECK(size >= 0, "load_image_folder: cannot get the size of ", path.string(), "; check that it is a regular file");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  DEMI_CHECK(in, "load_image_folder: cannot read ", path.string(), "; check the disk");
  decode_cifar10_image(bytes.data(), bytes.size(), path.string(), out);
}

Dataset decode_tree(const Tree& tree, int threads) {
  const int64_t n = static_cast<int64_t>(tree.files.size());
  Dataset out;
  out.classes = tree.classes;
  out.images = empty({n, 3, 32, 32}, DType::U8);
  out.labels = empty({n}, DType::I64);
  uint8_t* images = out.images.data<uint8_t>();
  int64_t* labels = out.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) labels[i] = tree.files[static_cast<size_t>(i)].label;

  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto work = [&] {
    while (!failed) {
      const int64_t i = next++;
      if (i >= n) break;
      try {
        decode_file(tree.files[static_cast<size_t>(i)].path, images + static_cast<size_t>(i) * kImageBytes);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return out;
}

fs::path default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "demi";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "demi";
  return {};
}

// <leaf of root>-<hash of the canonical root>-<split>.bin: readable, and distinct per tree.
fs::path cache_file(const fs::path& dir, const fs::path& root, Split split) {
  const std::string canonical = fs::weakly_canonical(root).string();
  std::string leaf = fs::weakly_canonical(root).filename().string();
  for (char& ch : leaf)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(hash_bytes(canonical.data(), canonical.size(), 0x2545f4914f6cdd1dull)));
  return dir / (leaf + "-" + hex + "-" + split_name(split) + ".bin");
}

std::string header_bytes(const Tree& tree, Split split) {
  std::string h(kMagic, sizeof kMagic);
  append_pod(h, kVersion);
  append_pod(h, static_cast<uint32_t>(split));
  append_pod(h, tree.key);
  append_pod(h, static_cast<uint64_t>(tree.files.size()));
  append_pod(h, static_cast<uint32_t>(tree.classes.size()));
  for (const std::string& name : tree.classes) {
    append_pod(h, static_cast<uint32_t>(name.size()));
    h += name;
  }
  return h;
}

uint64_t checksum(const std::string& header, const Dataset& d) {
  uint64_t h = hash_bytes(header.data(), header.size(), 0x51ed270b27e1f6a3ull);
  h = hash_bytes(d.labels.data_ptr(), d.labels.nbytes(), h);
  return hash_bytes(d.images.data_ptr(), d.images.nbytes(), h);
}

enum class ReadResult { Hit, Missing, Stale, Corrupt };

// Reads the cache when its header matches `tree` exactly and its size and checksum hold.
ReadResult read_cache(const fs::path& file, const Tree& tree, Split split, Dataset& out) {
  std::error_code ec;
  const uintmax_t file_size = fs::file_size(file, ec);
  if (ec) return ReadResult::Missing;
  std::ifstream in(file, std::ios::binary);
  if (!in) return ReadResult::Missing;
  const std::string expected = header_bytes(tree, split);
  const uint64_t n = tree.files.size();
  std::string header(expected.size(), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header.size()))) return ReadResult::Corrupt;
  if (header.compare(0, sizeof kMagic + sizeof kVersion, expected, 0, sizeof kMagic + sizeof kVersion) != 0)
    return ReadResult::Corrupt;
  if (header != expected) return ReadResult::Stale;
  if (file_size != expected.size() + n * (8 + kImageBytes) + 8) return ReadResult::Corrupt;
  Dataset d;
  d.classes = tree.classes;
  d.labels = empty({static_cast<int64_t>(n)}, DType::I64);
  d.images = empty({static_cast<int64_t>(n), 3, 32, 32}, DType::U8);
  uint64_t stored = 0;
  in.read(static_cast<char*>(d.labels.data_ptr()), static_cast<std::streamsize>(d.labels.nbytes()));
  in.read(static_cast<char*>(d.images.data_ptr()), static_cast<std::streamsize>(d.images.nbytes()));
  in.read(reinterpret_cast<char*>(&stored), sizeof stored);
  if (!in || stored != checksum(header, d)) return ReadResult::Corrupt;
  const int64_t* labels = d.labels.data<int64_t>();
  for (uint64_t i = 0; i < n; ++i)
    if (labels[i] != tree.files[i].label) return ReadResult::Corrupt;
  out = std::move(d);
  return ReadResult::Hit;
}

// Writes to a unique temporary name and renames it into place, so that a crash or a concurrent
// writer never leaves a half-written file under the final name.
void write_cache(const fs::path& file, const Tree& tree, Split split, const Dataset& d) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) {
    warn("load_image_folder: cannot create the cache directory " + file.parent_path().string() + " (" +
         ec.message() + "); the split will be decoded again next time. Set ImageFolderOptions::cache_dir");
    return;
  }
  std::random_device device;
  const fs::path tmp = file.string() + ".tmp" + std::to_string(device());
  const std::string header = header_bytes(tree, split);
  const uint64_t sum = checksum(header, d);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(static_cast<const char*>(d.labels.data_ptr()), static_cast<std::streamsize>(d.labels.nbytes()));
    out.write(static_cast<const char*>(d.images.data_ptr()), static_cast<std::streamsize>(d.images.nbytes()));
    out.write(reinterpret_cast<const char*>(&sum), sizeof sum);
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      warn("load_image_folder: cannot write the cache file " + tmp.string() +
           "; the split will be decoded again next time. Check the disk or set ImageFolderOptions::cache_dir");
      return;
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    warn("load_image_folder: cannot rename the cache file into " + file.string() + " (" + ec.message() + ")");
  }
}

// Debian 12's stb_image (2.27) writes past its Huffman tables when a JPEG's DHT segment declares
// more than 256 codes (found by fuzz/image_decode_fuzz.cpp). stb finds a marker as the byte after
// a run of 0xff, so every DHT it could read starts at a byte pair ff c4: check each such pair's
// tables the way stb walks them, before stb does.
void check_jpeg_huffman_tables(const uint8_t* data, size_t size, const std::string& name) {
  for (size_t i = 0; i + 1 < size; ++i) {
    if (data[i] != 0xff || data[i + 1] != 0xc4) continue;
    size_t p = i + 2;
    if (p + 2 > size) break;
    int64_t left = ((data[p] << 8) | data[p + 1]) - 2;  // segment length, less its own two bytes
    p += 2;
    while (left > 0 && p < size) {
      int64_t codes = 0;  // stb reads bytes past the end as 0: a cut-off table counts what is there
      for (size_t k = p + 1; k <= p + 16 && k < size; ++k) codes += data[k];
      DEMI_CHECK(codes <= 256, "load_image_folder: ", name, " could not be decoded: a JPEG Huffman table declares ",
                 codes, " codes, at most 256 are valid; the file is corrupt");
      p += 17 + static_cast<size_t>(codes);
      left -= 17 + codes;
    }
  }
}

// stb_image 2.27 decodes a scan with whatever its (uninitialised, malloc'd) Huffman table slots
// hold when the scan names a table the file never defined: the result depends on old heap
// contents and can trip stb's own assert, which aborts (found by fuzz/image_decode_fuzz.cpp).
// Walk the markers as stb does (resyncing on stray bytes, skipping entropy-coded data) and
// require every table a scan uses to be defined by an earlier DHT segment.
void check_jpeg_scans_use_defined_tables(const uint8_t* data, size_t size, const std::string& name) {
  unsigned defined = 0;  // bit class * 4 + id, for class 0 (DC) / 1 (AC) and id 0..3
  bool progressive = false;
  size_t p = 2;  // after SOI
  while (p + 1 < size) {
    if (data[p] != 0xff) {  // stb skips bytes until the next marker
      ++p;
      continue;
    }
    while (p < size && data[p] == 0xff) ++p;  // fill bytes
    if (p >= size) break;
    const uint8_t marker = data[p++];
    if (marker == 0xd9) break;                                                  // EOI
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xd0 && marker <= 0xd8)) continue;  // no length
    if (p + 2 > size) break;
    const size_t length = (size_t{data[p]} << 8) | data[p + 1];
    if (length < 2) break;  // stb refuses the file
    const size_t end = std::min(size, p + length);
    if (marker == 0xc2) progressive = true;
    if (marker == 0xc4) {
      for (size_t q = p + 2; q + 17 <= end;) {
        const unsigned table_class = data[q] >> 4, id = data[q] & 15;
        size_t codes = 0;
        for (size_t k = q + 1; k <= q + 16; ++k) codes += data[k];
        if (table_class <= 1 && id <= 3) defined |= 1u << (table_class * 4 + id);
        q += 17 + codes;
      }
    }
    if (marker == 0xda && p + 3 <= size) {
      const size_t components = data[p + 2];
      const size_t ss_at = p + 3 + 2 * components;
      const bool dc_scan = ss_at < size && data[ss_at] == 0;
      for (size_t k = 0; k < components && p + 4 + 2 * k < size; ++k) {
        const unsigned selectors = data[p + 4 + 2 * k], dc = selectors >> 4, ac = selectors & 15;
        const bool needs_dc = !progressive || dc_scan, needs_ac = !progressive || !dc_scan;
        DEMI_CHECK(!(needs_dc && dc <= 3 && !(defined & (1u << dc))) &&
                       !(needs_ac && ac <= 3 && !(defined & (1u << (4 + ac)))),
                   "load_image_folder: ", name, " could not be decoded: a JPEG scan uses a Huffman table (DC ", dc,
                   ", AC ", ac, ") that no earlier DHT segment defines; the file is corrupt");
      }
      // Entropy-coded data runs to the next marker that is not a stuffed 0xff00 or a restart.
      size_t q = end;
      while (q + 1 < size && !(data[q] == 0xff && data[q + 1] != 0x00 && (data[q + 1] < 0xd0 || data[q + 1] > 0xd7))) ++q;
      p = q;
      continue;
    }
    p = end;
  }
}

// stb_image 2.27 grows its buffer to a PNG chunk's declared length before reading the chunk: a
// 500-byte file declaring a 600 MB IDAT allocates 600 MB (found by fuzz/image_decode_fuzz.cpp).
// Walk the chunks as stb does (length, type, data, CRC) and require each one to fit in the file.
void check_png_chunks(const uint8_t* data, size_t size, const std::string& name) {
  for (size_t p = 8; p + 8 <= size;) {
    const uint64_t length = (uint64_t{data[p]} << 24) | (data[p + 1] << 16) | (data[p + 2] << 8) | data[p + 3];
    DEMI_CHECK(length <= size - p - 8, "load_image_folder: ", name, " could not be decoded: a PNG chunk at byte ", p,
               " declares ", length, " bytes but only ", size - p - 8, " follow; the file is truncated or corrupt");
    if (std::memcmp(data + p + 4, "IEND", 4) == 0) return;
    p += 12 + length;
  }
}

}  // namespace

void decode_cifar10_image(const uint8_t* data, size_t size, const std::string& name, uint8_t* out) {
  // 1 MiB is hundreds of times what a 32x32 image needs, and bounds what a compressed stream
  // (deflate inflates at most ~1000:1) can make stb_image allocate.
  constexpr size_t kMaxBytes = size_t{1} << 20;
  DEMI_CHECK(size > 0 && size <= kMaxBytes, "load_image_folder: ", name, " is empty or too large (", size,
             " bytes; a 32x32 image takes a few KB, the limit is 1 MiB); replace it with a 32x32 RGB png or jpg");
  // Only PNG and JPEG reach stb_image: its other decoders (TGA has no signature at all, PSD, HDR,
  // PIC, PNM, GIF, BMP) would otherwise parse any file that happens to be named *.png.
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  static constexpr uint8_t kJpeg[3] = {0xff, 0xd8, 0xff};
  const bool png = size >= sizeof kPng && std::memcmp(data, kPng, sizeof kPng) == 0;
  const bool jpeg = size >= sizeof kJpeg && std::memcmp(data, kJpeg, sizeof kJpeg) == 0;
  DEMI_CHECK(png || jpeg, "load_image_folder: ", name,
             " could not be decoded: it is neither a PNG nor a JPEG file; replace it with a 32x32 RGB png or jpg");
  if (png) check_png_chunks(data, size, name);
  if (jpeg) {
    check_jpeg_huffman_tables(data, size, name);
    check_jpeg_scans_use_defined_tables(data, size, name);
  }
  const int len = static_cast<int>(size);  // <= 1 MiB: fits
  int w = 0, h = 0, channels = 0;
  // The header first: a forged 10000x10000 header is refused here, before stb_image allocates 300 MB.
  DEMI_CHECK(stbi_info_from_memory(data, len, &w, &h, &channels), "load_image_folder: ", name,
             " could not be decoded (stb_image: ", stbi_failure_reason(), "); replace it with a 32x32 RGB png or jpg");
  auto check_size = [&] {
    DEMI_CHECK(w == 32 && h == 32 && channels == 3, "load_image_folder: ", name, " is ", w, "x", h, " with ", channels,
               " channel(s); expected 32x32 RGB (3 channels): convert or resize it");
  };
  check_size();
  uint8_t* pixels = stbi_load_from_memory(data, len, &w, &h, &channels, 0);
  DEMI_CHECK(pixels, "load_image_folder: ", name, " could not be decoded (stb_image: ", stbi_failure_reason(),
             "); replace it with a 32x32 RGB png or jpg");
  std::unique_ptr<uint8_t, void (*)(void*)> owned(pixels, stbi_image_free);
  check_size();  // the decoder's own answer, in case it differs from the header's
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 32 * 32; ++i) out[c * 1024 + i] = pixels[i * 3 + c];  // HWC -> CHW
}

const char* cache_status_name(CacheStatus status) {
  switch (status) {
    case CacheStatus::Off: return "off";
    case CacheStatus::Hit: return "hit";
    case CacheStatus::Built: return "built";
    case CacheStatus::Stale: return "stale";
    case CacheStatus::Corrupt: return "corrupt";
  }
  return "unknown";
}

Dataset load_image_folder(const std::string& root, Split split, const ImageFolderOptions& options, ImageFolderInfo* info) {
  DEMI_CHECK(fs::is_directory(root), "load_image_folder: ", root, " is not a directory; expected ", root, "/",
             split_name(split), "/<class>/*.png|jpg");
  ImageFolderInfo local;
  ImageFolderInfo& result = info ? *info : local;
  result = ImageFolderInfo{};
  const Tree tree = list_tree(root, split);

  fs::path dir;
  if (options.use_cache) {
    dir = options.cache_dir.empty() ? default_cache_dir() : fs::path(options.cache_dir);
    if (dir.empty())
      warn("load_image_folder: neither XDG_CACHE_HOME nor HOME is set, so decoded images are not cached; set "
           "ImageFolderOptions::cache_dir");
  }
  if (dir.empty()) return decode_tree(tree, options.threads);

  const fs::path file = cache_file(dir, root, split);
  result.cache_path = file.string();
  Dataset d;
  const ReadResult read = read_cache(file, tree, split, d);
  if (read == ReadResult::Hit) {
    result.cache = CacheStatus::Hit;
    return d;
  }
  if (read == ReadResult::Corrupt)
    warn("load_image_folder: cache file " + file.string() + " is corrupt or truncated; decoding again and rewriting it");
  result.cache = read == ReadResult::Missing ? CacheStatus::Built
                 : read == ReadResult::Stale ? CacheStatus::Stale
                                             : CacheStatus::Corrupt;
  d = decode_tree(tree, options.threads);
  write_cache(file, tree, split, d);
  return d;
}

}  // namespace demi::data
