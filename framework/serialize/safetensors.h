// safetensors files (the format PyTorch users load with safetensors.torch.load_file): an 8-byte
// little-endian header length, a JSON header of {name: {dtype, shape, data_offsets}}, then the
// raw little-endian tensor bytes. Written durably and atomically; read with every field validated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "framework/tensor/state_dict.h"
#include "framework/tensor/tensor.h"

namespace demi {

// Writes tensors (any device; copied to the host) to `path` with write_file_atomically.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Reads every tensor of `path` onto the CPU; throws demi::Error naming the file and the problem.
StateDict load_safetensors(const std::string& path);
// The bytes of a safetensors file (`name` for messages), as load_safetensors reads them: every
// length, offset, dtype and shape is checked against `size` before anything is allocated.
StateDict parse_safetensors(const uint8_t* data, size_t size, const std::string& name);

// Writes `text` to `path` durably and atomically: into `path`.tmp in the same directory, fsync,
// rename over `path`, fsync of the directory. On any failure (disk full, file too large, I/O
// error) throws demi::Error naming the path and the reason, removes the temporary file and leaves
// the previous `path` untouched.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace demi
