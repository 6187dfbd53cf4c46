// optim::Optimizer's shared bookkeeping: parameter slots, masters and unscale targets.
#include "framework/optim/optimizer.h"

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/factories.h"

namespace demi::optim {

size_t Optimizer::add_params(const std::vector<Tensor>& params, MasterWeights policy, const char* optimizer) {
  std::vector<Slot> slots;
  for (const Tensor& p : params) {
    DEMI_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), optimizer, ": parameters must be floating "
               "leaf tensors (model parameters), got ", p.defined() ? dtype_name(p.dtype()) : "an undefined tensor");
    for (const auto& group : slots_) {
      for (const Slot& s : group) {
        DEMI_CHECK(!s.param.is_same(p), optimizer, ": a parameter appears in more than one param group");
      }
    }
    Slot slot{p, Tensor(), Tensor()};
    if (is_half(p.dtype()) && policy == MasterWeights::Fp32) {
      NoGradGuard no_grad;
      slot.master = p.detach().to(DType::F32);
      slot.master.set_memory_category(MemoryCategory::MasterWeights);
    }
    slots.push_back(slot);
  }
  slots_.push_back(std::move(slots));
  return slots_.size() - 1;
}

double Optimizer::momentum(size_t) const {
  DEMI_THROW("this optimizer has no momentum (nor AdamW's beta1) for a schedule to cycle");
}
void Optimizer::set_momentum(size_t, double) {
  DEMI_THROW("this optimizer has no momentum (nor AdamW's beta1) for a schedule to cycle");
}

void Optimizer::step_unless(const Tensor& found_inf) {
  if (found_inf.item<float>() == 0.0f) step();
}

void Optimizer::check_found_inf(const Tensor& found_inf, const Tensor& param) {
  if (!found_inf.defined()) return;
  DEMI_CHECK(found_inf.numel() == 1 && found_inf.dtype() == DType::F32, "step_unless: found_inf must be a "
             "one-element float32 tensor (GradScaler's), got ", found_inf.dtype(), " ", found_inf.shape());
  DEMI_CHECK(found_inf.device() == param.device(), "step_unless: found_inf is on ", found_inf.device(),
             " but a parameter is on ", param.device(), "; the flag must live where the parameters do");
}

void Optimizer::zero_grad() {
  for (const auto& group : slots_) {
    for (const Slot& s : group) s.param.set_grad(Tensor());
  }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& group : slots_) {
    for (const Slot& s : group) out.push_back(s.param);
  }
  return out;
}

Tensor Optimizer::master_of(const Tensor& param) const {
  for (const auto& group : slots_) {
    for (const Slot& s : group) {
      if (s.param.is_same(param)) return s.master;
    }
  }
  return Tensor();
}

std::vector<Optimizer::GradientTarget> Optimizer::unscale_targets() {
  std::vector<GradientTarget> out;
  for (auto& group : slots_) {
    for (Slot& s : group) {
      const Tensor g = s.param.grad();
      if (!g.defined()) continue;
      if (s.master.defined()) {
        if (!s.master_grad.defined()) {
          s.master_grad = empty(s.master.shape(), DType::F32, s.master.device());
          s.master_grad.set_memory_category(MemoryCategory::Gradients);
        }
        out.push_back({s.param, g, s.master_grad});
      } else {
        out.push_back({s.param, g, g});
      }
    }
  }
  return out;
}

void Optimizer::adopt_unscaled(const std::vector<GradientTarget>& targets) {
  for (const GradientTarget& t : targets) {
    if (!t.unscaled.is_same(t.grad)) t.param.set_grad(t.unscaled);
  }
}

std::string Optimizer::state_key(size_t group, size_t index) {
  return std::to_string(group) + "." + std::to_string(index) + ".";
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  for (size_t g = 0; g < slots_.size(); ++g) {
    for (size_t i = 0; i < slots_[g].size(); ++i) {
      const std::string key = state_key(g, i);
      for (const auto& [name, t] : slot_state(g, i)) out.emplace(key + name, t);
      const Slot& slot = slots_[g][i];
      if (slot.master.defined()) out.emplace(key + "master", slot.master);
      if (slot.rounding_steps > 0) {
        out.emplace(key + "rounding_step", full({}, static_cast<double>(slot.rounding_steps), DType::I64));
      }
    }
  }
  return out;
}

Tensor Optimizer::take_state(std::map<std::string, Tensor>& named, const std::string& name, const Slot& slot,
                             DType dtype) const {
  auto it = named.find(name);
  if (it == named.end()) return Tensor();
  const Tensor saved = it->second;
  named.erase(it);
  DEMI_CHECK(saved.numel() == slot.param.numel(), "load_state_dict: '", name, "' has shape ", saved.shape(),
             " but its parameter has shape ", slot.param.shape(), "; was the state saved from a different model?");
  NoGradGuard no_grad;
  Tensor t = saved.reshape(slot.param.shape()).to(dtype).to(slot.param.device()).clone();
  t.set_memory_category(MemoryCategory::OptimizerState);
  return t;
}

void Optimizer::load_state_dict(const StateDict& state) {
  // The keys by parameter position: "<group>.<index>.<name>".
  std::vector<std::vector<std::map<std::string, Tensor>>> named(slots_.size());
  for (size_t g = 0; g < slots_.size(); ++g) named[g].resize(slots_[g].size());
  for (const auto& [key, t] : state) {
    const size_t dot1 = key.find('.'), dot2 = dot1 == std::string::npos ? dot1 : key.find('.', dot1 + 1);
    size_t g = slots_.size(), i = 0;
    if (dot2 != std::string::npos && dot1 > 0 && dot2 > dot1 + 1 &&
        key.find_first_not_of("0123456789") == dot1 &&
        key.find_first_not_of("0123456789", dot1 + 1) == dot2) {
      g = std::stoul(key.substr(0, dot1));
      i = std::stoul(key.substr(dot1 + 1, dot2 - dot1 - 1));
    }
    DEMI_CHECK(g < slots_.size() && i < slots_[g].size(), "load_state_dict: key '", key, "' names no parameter of "
               "this optimizer (", slots_.size(), " groups); was the state saved from a different model?");
    named[g][i].emplace(key.substr(dot2 + 1), t);
  }
  for (size_t g = 0; g < slots_.size(); ++g) {
    for (size_t i = 0; i < slots_[g].size(); ++i) {
      Slot& slot = slots_[g][i];
      std::map<std::string, Tensor>& own = named[g][i];
      if (slot.master.defined()) {
        Tensor master = take_state(own, "master", slot, DType::F32);
        if (master.defined()) {
          master.set_memory_category(MemoryCategory::MasterWeights);
          slot.master = master;
        }
      }
      auto step = own.find("rounding_step");
      if (step != own.end()) {
        slot.rounding_steps = step->second.item<int64_t>();
        own.erase(step);
      }
      load_slot_state(g, i, own);
      DEMI_CHECK(own.empty(), "load_state_dict: '", state_key(g, i), own.begin()->first, "' is not state this "
                 "optimizer keeps for that parameter", own.begin()->first == "master" ? " (it has no fp32 master: "
                 "were the parameters half when the state was saved, or master_weights different?)" : "",
                 "; was the state saved from a different optimizer or model?");
    }
  }
}

void Optimizer::set_capturable(bool capturable) {
  DEMI_CHECK(!capturable || supports_capturable(), "set_capturable: this optimizer computes its step on the host, so a "
             "captured CUDA graph would replay stale values; use SGD or AdamW");
  capturable_ = capturable;
  if (!capturable) device_lr_.clear();
}

void Optimizer::sync_device_lr() {
  for (size_t g = 0; g < slots_.size(); ++g) {
    if (!slots_[g].empty()) device_lr(g, slots_[g].front().param);
  }
}

Tensor Optimizer::device_lr(size_t group, const Tensor& param) {
  if (!capturable_) return Tensor();
  if (device_lr_.size() < slots_.size()) device_lr_.resize(slots_.size());
  DeviceLr& d = device_lr_[group];
  const double rate = lr(group);
  const bool fresh = !d.value.defined() || d.value.device() != param.device();
  if (!fresh && d.written == rate) return d.value;
  DEMI_CHECK(!kernels(param).capturing(), "optimizer: the learning rate of group ", group, " was set to ", rate,
             " during a CUDA graph capture, which would freeze it into the graph; set it before capturing "
             "(sync_device_lr)");
  NoGradGuard no_grad;
  if (fresh) {
    d.value = full({}, rate, DType::F64, param.device());
    d.value.set_memory_category(MemoryCategory::OptimizerState);
  } else {
    kernels(d.value).fill(d.value.ref(), rate);
  }
  d.written = rate;
  return d.value;
}

backend::WriteRounding Optimizer::write_rounding(size_t g, size_t i, Rounding mode, uint64_t seed) {
  Slot& slot = slots_[g][i];
  backend::WriteRounding r;
  if (mode != Rounding::Stochastic || !is_half(slot.param.dtype())) return r;
  DEMI_CHECK(!kernels(slot.param).capturing(), "optimizer: stochastic rounding draws a new stream position each step "
             "on the host, so a captured CUDA graph would replay the same random bits; use Rounding::Nearest with "
             "CUDA graphs");
  r.mode = mode;
  // One stream per parameter: the seed mixed with its position (splitmix64's constants), the
  // offset its elements times the steps taken, so no two draws of a run share a counter.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (1 + (static_cast<uint64_t>(g) << 32) + i);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  r.seed = z ^ (z >> 31);
  r.offset = static_cast<uint64_t>(slot.rounding_steps) * static_cast<uint64_t>(slot.param.numel());
  ++slot.rounding_steps;
  return r;
}

Tensor Optimizer::step_gradient(const Slot& slot) const {
  const Tensor g = slot.param.grad();
  if (!g.defined() || g.is_same(slot.master_grad)) return g;
  DEMI_CHECK(g.dtype() == slot.param.dtype(), "optimizer: the gradient is ", g.dtype(), " but its parameter is ",
             slot.param.dtype(), "; gradients must have their parameter's dtype");
  return g;
}

}  // namespace demi::optim
