// demi::save / demi::load on top of the safetensors reader and writer. The "format": "pt" metadata
// is what PyTorch tooling (transformers, safetensors.torch) writes and expects.
#include "framework/serialize/save.h"

#include "framework/serialize/safetensors.h"

namespace demi {

void save(const nn::Module& module, const std::string& path) {
  save_safetensors(path, module.state_dict(), {{"format", "pt"}});
}

void save(const optim::Optimizer& optimizer, const std::string& path) {
  save_safetensors(path, optimizer.state_dict(), {{"format", "pt"}});
}

void load(nn::Module& module, const std::string& path) { module.load_state_dict(load_safetensors(path)); }

void load(optim::Optimizer& optimizer, const std::string& path) { optimizer.load_state_dict(load_safetensors(path)); }

}  // namespace demi
