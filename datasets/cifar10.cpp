// The CIFAR-10 binary-batch reader and load_cifar10's format detection.
#include "datasets/cifar10.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace demi::data {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kImageBytes = 3 * 32 * 32;
constexpr int64_t kRecordBytes = 1 + kImageBytes;

std::vector<std::string> binary_files(Split split) {
  if (split == Split::Test) return {"test_batch.bin"};
  std::vector<std::string> files;
  for (int i = 1; i <= 5; ++i) files.push_back("data_batch_" + std::to_string(i) + ".bin");
  return files;
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  DEMI_CHECK(in, "load_cifar10_binary: cannot open ", path.string(), "; check that it is readable");
  const std::streamoff size = in.tellg();
  DEMI_CHECK(size >= 0, "load_cifar10_binary: cannot get the size of ", path.string(), "; check that it is a regular file");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  DEMI_CHECK(in, "load_cifar10_binary: cannot read ", path.string(), "; check the disk");
  return bytes;
}

// Class names from batches.meta.txt (one a line, blank lines ignored), else the standard ten.
std::vector<std::string> binary_classes(const fs::path& dir) {
  const fs::path meta = dir / "batches.meta.txt";
  if (!fs::exists(meta)) return cifar10_classes();
  std::ifstream in(meta);
  std::vector<std::string> classes;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (!line.empty()) classes.push_back(line);
  }
  DEMI_CHECK(classes.size() == 10, "load_cifar10_binary: ", meta.string(), " names ", classes.size(),
             " classes; CIFAR-10 has 10, one a line: fix or delete the file");
  return classes;
}

// The number of records in a file of `size` bytes; an error unless it is a whole, non-zero number.
int64_t count_records(size_t size, const std::string& name) {
  const int64_t bytes = static_cast<int64_t>(size);
  DEMI_CHECK(bytes > 0, "load_cifar10_binary: ", name, " is empty; expected records of ", kRecordBytes,
             " bytes (1 label + 3072 pixels)");
  DEMI_CHECK(bytes % kRecordBytes == 0, "load_cifar10_binary: ", name, " is truncated: record ", bytes / kRecordBytes,
             " has ", bytes % kRecordBytes, " bytes, expected ", kRecordBytes,
             " (1 label + 3072 pixels); re-download or re-extract the file");
  return bytes / kRecordBytes;
}

// Checks the label of each of the n records at `data` and copies labels and CHW pixels out.
void copy_records(const uint8_t* data, int64_t n, const std::string& name, int64_t* labels, uint8_t* images) {
  const size_t classes = cifar10_classes().size();
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* record = data + r * kRecordBytes;
    DEMI_CHECK(record[0] < classes, "load_cifar10_binary: ", name, " record ", r, " has label ",
               static_cast<int>(record[0]), ", outside [0, ", classes,
               "); the file is corrupt or not CIFAR-10 (CIFAR-100 has two label bytes)");
    labels[r] = record[0];
    std::memcpy(images + r * kImageBytes, record + 1, kImageBytes);
  }
}

bool has_binary(const fs::path& dir, Split split) { return fs::is_regular_file(dir / binary_files(split).front()); }

}  // namespace

const std::vector<std::string>& cifar10_classes() {
  static const std::vector<std::string> classes = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                   "dog",      "frog",       "horse", "ship", "truck"};
  return classes;
}

Dataset parse_cifar10_binary(const uint8_t* data, size_t size, const std::string& name) {
  const int64_t n = count_records(size, name);
  Dataset out;
  out.classes = cifar10_classes();
  out.images = empty({n, 3, 32, 32}, DType::U8);
  out.labels = empty({n}, DType::I64);
  copy_records(data, n, name, out.labels.data<int64_t>(), out.images.data<uint8_t>());
  return out;
}

Dataset load_cifar10_binary(const std::string& dir, Split split) {
  const fs::path root(dir);
  DEMI_CHECK(fs::is_directory(root), "load_cifar10_binary: ", dir, " is not a directory");
  std::vector<std::vector<uint8_t>> contents;
  std::vector<int64_t> records;
  int64_t n = 0;
  const std::vector<std::string> names = binary_files(split);
  for (const std::string& name : names) {
    const fs::path path = root / name;
    DEMI_CHECK(fs::is_regular_file(path), "load_cifar10_binary: ", path.string(), " is missing; the ",
               split_name(split), " split needs ", split == Split::Train ? "data_batch_1.bin .. data_batch_5.bin" : "test_batch.bin");
    contents.push_back(read_file(path));
    records.push_back(count_records(contents.back().size(), path.string()));
    n += records.back();
  }
  // One allocation for the split, each file parsed straight into its slice (as
  // parse_cifar10_binary does for one file).
  Dataset out;
  out.classes = binary_classes(root);
  out.images = empty({n, 3, 32, 32}, DType::U8);
  out.labels = empty({n}, DType::I64);
  int64_t k = 0;
  for (size_t f = 0; f < contents.size(); ++f) {
    copy_records(contents[f].data(), records[f], (root / names[f]).string(), out.labels.data<int64_t>() + k,
                 out.images.data<uint8_t>() + k * kImageBytes);
    k += records[f];
  }
  return out;
}

Dataset load_cifar10(const std::string& dir, Split split, const ImageFolderOptions& options, ImageFolderInfo* info) {
  const fs::path root(dir);
  DEMI_CHECK(fs::is_directory(root), "load_cifar10: ", dir,
             " is not a directory; point it at the CIFAR-10 data (binary batches or an image folder)");
  if (info) *info = ImageFolderInfo{};
  if (has_binary(root, split)) return load_cifar10_binary(dir, split);
  if (has_binary(root / "cifar-10-batches-bin", split)) return load_cifar10_binary((root / "cifar-10-batches-bin").string(), split);
  if (fs::is_directory(root / split_name(split))) return load_image_folder(dir, split, options, info);
  DEMI_THROW("load_cifar10: missing split '", split_name(split), "' in ", dir, ": looked for the binary batch ",
             (root / binary_files(split).front()).string(), " (also under cifar-10-batches-bin/) and the image folder ",
             (root / split_name(split)).string(), "/<class>/*.png|jpg; neither is there");
}

std::string cifar10_dir_from_environment() {
  const char* dir = std::getenv("DEMI_CIFAR10");
  return dir != nullptr ? dir : "";
}

}  // namespace demi::data
