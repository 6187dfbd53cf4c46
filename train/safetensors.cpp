// safetensors writer and reader on nlohmann::json; the dtype names are safetensors' own.
#include "train/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/autograd/grad_mode.h"

namespace demi::train {
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
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DEMI_CHECK(out.good(), "cannot open '", tmp, "' for writing: ", std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    DEMI_CHECK(out.good(), "writing '", tmp, "' failed (disk full?): ", std::strerror(errno),
               "; the previous '", path, "' is untouched");
  }
  const int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  DEMI_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path, "': ",
             std::strerror(errno));
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  NoGradGuard no_grad;
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string body;
  std::map<std::string, Tensor> host;
  for (const auto& [name, t] : tensors) host.emplace(name, t.to(Device::cpu()));
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

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DEMI_CHECK(in.good(), "cannot open '", path, "': ", std::strerror(errno));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DEMI_CHECK(data.size() >= 8, path, ": too short for a safetensors file (", data.size(), " bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(data[static_cast<size_t>(i)]);
  DEMI_CHECK(n <= data.size() - 8, path, ": header length ", n, " exceeds the file size ", data.size(),
             "; the file is truncated or not safetensors");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data.substr(8, n));
  } catch (const std::exception& e) {
    DEMI_THROW(path, ": the safetensors header is not valid JSON (", e.what(), ")");
  }
  const size_t base = 8 + n;
  std::map<std::string, Tensor> out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      const DType dtype = parse_dtype(entry.at("dtype").get<std::string>(), path);
      const Shape shape = entry.at("shape").get<Shape>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      DEMI_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && base + offsets[1] <= data.size(), path,
                 ": tensor '", name, "' has data offsets outside the file");
      Tensor t = empty(shape, dtype);
      DEMI_CHECK(offsets[1] - offsets[0] == t.nbytes(), path, ": tensor '", name, "' holds ", offsets[1] - offsets[0],
                 " bytes but ", dtype, " ", shape, " needs ", t.nbytes());
      if (t.nbytes()) std::memcpy(t.data_ptr(), data.data() + base + offsets[0], t.nbytes());
      out.emplace(name, t);
    } catch (const nlohmann::json::exception& e) {
      DEMI_THROW(path, ": malformed header entry for '", name, "' (", e.what(), ")");
    }
  }
  return out;
}

}  // namespace demi::train
