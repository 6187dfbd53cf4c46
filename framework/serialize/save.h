// demi::save / demi::load: a module's or an optimizer's state_dict to and from a safetensors file,
// which Python reads with safetensors.torch.load_file (same names, dtypes, shapes and values).
#pragma once

#include <string>

#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"

namespace demi {

// Writes module.state_dict() (parameters and buffers, in registration order) to `path`, atomically.
void save(const nn::Module& module, const std::string& path);
// Writes optimizer.state_dict() ("<group>.<index>.<name>": moments, momentum, fp32 masters).
void save(const optim::Optimizer& optimizer, const std::string& path);
// Reads `path` into module.load_state_dict: every key must match in name and shape; values take
// the module's dtypes and device.
void load(nn::Module& module, const std::string& path);
// Reads `path` into optimizer.load_state_dict (an optimizer over the same parameters).
void load(optim::Optimizer& optimizer, const std::string& path);

}  // namespace demi
