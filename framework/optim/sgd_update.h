// torch.optim.SGD's update of one parameter and the momentum buffers it keeps: what optim::SGD and
// the SGD groups of optim::Muon share. Shared by composition: neither optimizer is the other, so
// neither can reach the other's groups through a base-class reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/optim/optimizer.h"

namespace demi::optim {

// The options of an SGD group (SGD::Options).
struct SgdOptions {
  double lr = 1e-3;  // torch.optim.SGD's default
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  MasterWeights master_weights = MasterWeights::Fp32;
  Rounding rounding = Rounding::Nearest;  // how steps write half params
  uint64_t rounding_seed = 0;             // the stochastic-rounding streams' seed
};

// Throws, naming the option, unless `o` is an SGD group torch.optim.SGD would accept.
void check_sgd_options(const SgdOptions& o);

// One momentum buffer per parameter, by (group, index): fp32, fp64 for fp64 parameters. Saved in
// state dicts as "<group>.<index>.momentum_buffer" by SGD and Muon alike.
class MomentumBuffers {
 public:
  // Room for a new group of n parameters (no buffers yet).
  void add_group(size_t n) { buffers_.emplace_back(n); }
  // The buffer of parameter (g, i), created zeroed on first use; `created` says whether this call
  // made it.
  Tensor& at(size_t g, size_t i, const Tensor& param, bool* created = nullptr);
  // {"momentum_buffer", buffer} once (g, i) has one, else nothing.
  std::vector<std::pair<std::string, Tensor>> state(size_t g, size_t i) const;
  // Sets (g, i)'s buffer from a checkpoint (an undefined tensor leaves it to be created on use).
  void restore(size_t g, size_t i, const Tensor& buffer);
  // The dtype a buffer for `param` has.
  static DType dtype_for(const Tensor& param) { return param.dtype() == DType::F64 ? DType::F64 : DType::F32; }

 private:
  std::vector<std::vector<Tensor>> buffers_;
};

// torch.optim.SGD's step of parameter (g, i) with gradient `grad`: weight decay, momentum with
// dampening, Nesterov, in one fused kernel call that steps `master` (when defined) and writes
// `param` through `rounding`; nothing changes when found_inf (optional, GradScaler's) is nonzero.
// lr_tensor (optional, Optimizer::device_lr's) is the rate the kernel reads in place of o.lr.
void sgd_update(const SgdOptions& o, const Tensor& param, const Tensor& master, const Tensor& grad,
                MomentumBuffers& momentum, size_t g, size_t i, const backend::WriteRounding& rounding,
                const Tensor& found_inf = Tensor(), const Tensor& lr_tensor = Tensor());

}  // namespace demi::optim
