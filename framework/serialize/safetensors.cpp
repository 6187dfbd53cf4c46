// safetensors writer and reader on nlohmann::json; the dtype names are safetensors' own.
#include "framework/serialize/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "framework/autograd/grad_mode.h"

namespace demi {
namespace {

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

DType parse_dtype(const std::string& s, const std::string& path) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8}) {
    if (s == safetensors_dtype(d)) return d;
  }
  DEMI_THROW(path, ": unsupported safetensors dtype '", s, "'; demi reads F32, F16, BF16, F64, I64 and U8");
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  // A fixed temporary name: a crash leaves at most one stale path.tmp, overwritten by the next write.
  const std::string tmp = path + ".tmp";
  const auto fail = [&](const char* what, int error) {
    ::unlink(tmp.c_str());
    DEMI_THROW("cannot write '", path, "': ", what, " '", tmp, "' failed: ", std::strerror(error),
               "; the previous '", path, "' is untouched (check the free space, the file-size limit `ulimit -f` and the "
               "disk, then retry)");
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int error = errno;
    DEMI_THROW("cannot write '", path, "': cannot create '", tmp, "': ", std::strerror(error),
               "; check that the directory exists and is writable");
  }
  // write() may write less than asked (a file-size limit reached mid-buffer, a signal): loop
  // until everything is written or it reports why not.
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      ::close(fd);
      fail("writing", error);
    }
    written += static_cast<size_t>(n);
  }
  // fsync, then close: either may be the first to report a full disk or an I/O error (delayed
  // allocation, NFS), and a file whose data is not on disk must not replace a good one.
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    fail("fsync of", error);
  }
  if (::close(fd) != 0) fail("closing", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming into place", errno);
  // The rename is durable only once the directory entry is: fsync the directory. Filesystems
  // that cannot fsync a directory say EINVAL; anything else is an I/O error worth reporting.
  const std::string dir = std::filesystem::path(path).has_parent_path()
                              ? std::filesystem::path(path).parent_path().string()
                              : std::string(".");
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    const int rc = ::fsync(dir_fd);
    const int error = errno;
    ::close(dir_fd);
    DEMI_CHECK(rc == 0 || error == EINVAL, "wrote '", path, "' but the fsync of its directory '", dir,
               "' failed: ", std::strerror(error), "; the file may not survive a power loss");
  }
}

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  NoGradGuard no_grad;
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string body;
  StateDict host;
  for (const auto& [name, t] : tensors) host.emplace(name, t.to(Device::cpu()).contiguous());  // NCHW bytes
  for (const auto& [name, t] : host) {
    const size_t begin = body.size();
    body.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
    header[name] = {{"dtype", safetensors_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {begin, body.size()}}};
  }
  std::string head = header.dump();
  head.append((8 - head.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes
  std::string file(8, '\0');
  uint64_t n = head.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  write_file_atomically(path, file + head + body);
}

StateDict load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DEMI_CHECK(in.good(), "cannot open '", path, "': ", std::strerror(errno));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DEMI_CHECK(!in.bad(), "cannot read '", path, "': ", std::strerror(errno));
  return parse_safetensors(reinterpret_cast<const uint8_t*>(data.data()), data.size(), path);
}

StateDict parse_safetensors(const uint8_t* data, size_t size, const std::string& name) {
  DEMI_CHECK(size >= 8, name, ": too short for a safetensors file (", size, " bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  DEMI_CHECK(n <= size - 8, name, ": header length ", n, " exceeds the file size ", size,
             "; the file is truncated or not safetensors");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data + 8, data + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    DEMI_THROW(name, ": the safetensors header is not valid JSON (", e.what(), ")");
  }
  DEMI_CHECK(header.is_object(), name, ": the safetensors header is a JSON ", header.type_name(),
             ", expected an object {name: {dtype, shape, data_offsets}}");
  const uint64_t body = size - 8 - n;  // bytes after the header: every tensor lies inside them
  struct Entry {
    std::string key;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [key, entry] : header.items()) {
    if (key == "__metadata__") {
      DEMI_CHECK(entry.is_object(), name, ": __metadata__ is a JSON ", entry.type_name(), ", expected an object");
      continue;
    }
    const std::string tensor = name + ": tensor '" + key + "'";
    DEMI_CHECK(entry.is_object(), tensor, " is a JSON ", entry.type_name(), ", expected {dtype, shape, data_offsets}");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      DEMI_CHECK(entry.contains(field), tensor, " has no \"", field, "\"");
    const nlohmann::json& dtype_json = entry.at("dtype");
    DEMI_CHECK(dtype_json.is_string(), tensor, ": dtype is a JSON ", dtype_json.type_name(), ", expected a string");
    const std::string dtype_text = dtype_json.get<std::string>();
    const DType dtype = parse_dtype(dtype_text, name);
    // Non-negative integers whose product (zeros counted as ones, as strides see them) stays far
    // inside int64: a forged shape must neither overflow nor reach the allocator.
    const nlohmann::json& shape_json = entry.at("shape");
    DEMI_CHECK(shape_json.is_array(), tensor, ": shape is a JSON ", shape_json.type_name(), ", expected an array");
    constexpr uint64_t kMaxElements = uint64_t{1} << 56;
    Shape shape;
    uint64_t numel = 1, extents = 1;
    for (const nlohmann::json& d : shape_json) {
      DEMI_CHECK(d.is_number_unsigned(), tensor, ": shape ", shape_json.dump(),
                 " has an entry that is not a non-negative integer");
      const uint64_t extent = d.get<uint64_t>();
      DEMI_CHECK(std::max<uint64_t>(extent, 1) <= kMaxElements / extents, tensor, ": shape ", shape_json.dump(),
                 " has more than 2^56 elements; the file is corrupt");
      extents *= std::max<uint64_t>(extent, 1);
      numel *= extent;
      shape.push_back(static_cast<int64_t>(extent));
    }
    const uint64_t nbytes = numel * dtype_size(dtype);
    const nlohmann::json& offsets = entry.at("data_offsets");
    DEMI_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               tensor, ": data_offsets ", offsets.dump(), " is not [begin, end] of two non-negative integers");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    DEMI_CHECK(begin <= end && end <= body, tensor, " has data offsets outside the file ([", begin, ", ", end,
               "] in ", body, " data bytes); the file is truncated or corrupt");
    DEMI_CHECK(end - begin == nbytes, tensor, " holds ", end - begin, " bytes but ", dtype_text, " ", shape, " needs ",
               nbytes, "; the file is corrupt");
    entries.push_back({key, dtype, std::move(shape), begin, end});
  }
  // No two tensors share bytes (the format forbids it): otherwise a small file naming one large
  // range many times would make us allocate many times its size. Empty tensors own no bytes.
  std::vector<const Entry*> ranges;
  for (const Entry& e : entries)
    if (e.end > e.begin) ranges.push_back(&e);
  std::sort(ranges.begin(), ranges.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Entry& a = *ranges[i - 1];
    const Entry& b = *ranges[i];
    DEMI_CHECK(b.begin >= a.end, name, ": tensors '", a.key, "' and '", b.key, "' overlap (data offsets [", a.begin,
               ", ", a.end, "] and [", b.begin, ", ", b.end, "]); the file is corrupt");
  }
  // In the order the tensors lie in the file, which is the order they were saved in (a module's
  // registration order); the JSON object itself comes back sorted by name.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  const uint8_t* base = data + 8 + n;
  StateDict out;
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.data_ptr(), base + e.begin, e.end - e.begin);
    out.emplace(e.key, t);
  }
  return out;
}

}  // namespace demi
