// CIFAR-10 readers: the official binary batches and image-folder trees (decoded with stb_image,
// cached as one binary file per split outside the data directory). Including this header gives the
// whole data layer, DataLoader included.
#pragma once

#include <string>

#include "datasets/data_loader.h"
#include "datasets/dataset.h"

namespace demi::data {

// The ten CIFAR-10 class names in label order (airplane ... truck).
const std::vector<std::string>& cifar10_classes();

// Official binary format: dir/data_batch_1.bin .. data_batch_5.bin (train) or dir/test_batch.bin
// (test), each record one label byte and 3072 CHW pixel bytes. Class names from
// dir/batches.meta.txt when present, else cifar10_classes().
Dataset load_cifar10_binary(const std::string& dir, Split split);
// One batch file's bytes (`name` for messages), as load_cifar10_binary reads each file: a whole
// number of records with labels 0..9; classes are cifar10_classes(). Throws demi::Error otherwise.
Dataset parse_cifar10_binary(const uint8_t* data, size_t size, const std::string& name);

struct ImageFolderOptions {
  std::string cache_dir;  // empty: $XDG_CACHE_HOME/demi, else $HOME/.cache/demi
  bool use_cache = true;
  int threads = 0;        // decode threads, 0 = std::thread::hardware_concurrency()
};

// How a load_image_folder call was served, for logs and tests.
enum class CacheStatus {
  Off,      // use_cache was false (or no cache directory could be found: a warning says so)
  Hit,      // read from the cache file; nothing decoded
  Built,    // no cache file yet: decoded, then written (a warning says when writing failed)
  Stale,    // the tree changed since the cache was written: decoded, then rewritten
  Corrupt,  // the cache file failed its magic/size/checksum test: decoded, then rewritten
};
const char* cache_status_name(CacheStatus status);
struct ImageFolderInfo {
  CacheStatus cache = CacheStatus::Off;
  std::string cache_path;  // the cache file used or written (empty when Off)
};

// Image folder: root/train/<class>/*.png|*.jpg|*.jpeg (and root/test/...); classes are the
// sub-folders in sorted order, files within a class in sorted order. Every image must be 32x32 RGB.
// Other files and names starting with '.' are ignored. The decoded split is cached in
// options.cache_dir, keyed by the root path and every file's name, size and mtime.
Dataset load_image_folder(const std::string& root, Split split, const ImageFolderOptions& options = {},
                          ImageFolderInfo* info = nullptr);

// One image file's bytes (`name` for messages), as load_image_folder decodes each file: a PNG or
// JPEG of 32x32 RGB, written as 3072 CHW bytes to `out`. Throws demi::Error for anything else.
void decode_cifar10_image(const uint8_t* data, size_t size, const std::string& name, uint8_t* out);

// Detects the format in dir (binary batches, also under dir/cifar-10-batches-bin, or an image
// folder) and loads the split; the error names dir and what was looked for when neither is there.
Dataset load_cifar10(const std::string& dir, Split split, const ImageFolderOptions& options = {},
                     ImageFolderInfo* info = nullptr);

// Where CIFAR-10 lives when no --data-dir is given: $DEMI_CIFAR10 (an empty value counts as unset),
// else "" here; train_cifar then falls back to kDefaultCifar10Dir, where scripts/train downloads it,
// and the tests skip, saying how to set the variable. The one place demi reads DEMI_CIFAR10.
std::string cifar10_dir_from_environment();
inline constexpr const char* kDefaultCifar10Dir = "./data/cifar-10";

}  // namespace demi::data
