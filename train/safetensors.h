// safetensors files (the format PyTorch users load with safetensors.torch.load_file): an 8-byte
// little-endian header length, a JSON header of {name: {dtype, shape, data_offsets}}, then the
// raw little-endian tensor bytes. Written atomically; read with every field validated.
#pragma once

#include <map>
#include <string>

#include "framework/tensor/tensor.h"

namespace demi::train {

// Writes tensors (any device; copied to the host) to `path` through a temporary file, fsync and
// rename, so a crash never leaves a partial file under the final name.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Reads every tensor of `path` onto the CPU; throws demi::Error naming the file and the problem.
std::map<std::string, Tensor> load_safetensors(const std::string& path);

// Writes `text` to `path` atomically (temporary file, fsync, rename).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace demi::train
