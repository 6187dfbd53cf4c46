// Autocast state (thread-local, per device kind), the cast cache, and the policy table built
// from the op table.
#include "framework/amp/autocast.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "framework/amp/autocast_apply.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/internal.h"
#include "framework/ops/op.h"

namespace demi::amp {
namespace {

struct State {
  bool enabled[2] = {false, false};
  DType dtype[2] = {DType::BF16, DType::F16};  // CPU, CUDA defaults as PyTorch
  int depth = 0;                               // nesting of guards (enabled or not)
  int suspended = 0;                           // inside an op's forward or a backward pass
  // Source parameter -> its cast. The source is kept alive so its address cannot be reused.
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Tensor>> cache;
};
thread_local State state;

int slot(Device::Kind kind) { return kind == Device::Kind::CPU ? 0 : 1; }

}  // namespace

AutocastGuard::AutocastGuard(Device::Kind kind, DType dtype, bool enabled)
    : kind_(kind), previous_enabled_(state.enabled[slot(kind)]), previous_dtype_(state.dtype[slot(kind)]) {
  DEMI_CHECK(!enabled || dtype == DType::F16 || dtype == DType::BF16, "AutocastGuard: dtype must be "
             "float16 or bfloat16, got ", dtype);
  state.enabled[slot(kind)] = enabled;
  if (enabled) state.dtype[slot(kind)] = dtype;
  ++state.depth;
}

AutocastGuard::~AutocastGuard() {
  state.enabled[slot(kind_)] = previous_enabled_;
  state.dtype[slot(kind_)] = previous_dtype_;
  if (--state.depth == 0) state.cache.clear();
}

bool is_autocast_enabled(Device::Kind kind) { return state.enabled[slot(kind)]; }
DType autocast_dtype(Device::Kind kind) { return state.dtype[slot(kind)]; }
size_t cast_cache_size() { return state.cache.size(); }

Category autocast_category(const std::string& op) {
  for (const ops::OpInfo& info : ops::all_ops()) {
    if (op == info.name) return info.category;
  }
  DEMI_THROW("autocast_category: no op named '", op, "'; policy_table() lists them");
}

std::string policy_table() {
  auto effect = [](Category c, DType lower) -> std::string {
    switch (c) {
      case Category::LowerPrecision: return dtype_name(lower);
      case Category::Fp32: return "float32";
      case Category::Promote: return "widest input";
      case Category::Unchanged: return "input dtype";
    }
    return "";
  };
  auto pad = [](std::string s, size_t width) { return s + std::string(width > s.size() ? width - s.size() : 1, ' '); };
  std::ostringstream out;
  out << pad("op", 16) << pad("category", 17) << pad("cpu autocast", 16) << "cuda autocast\n";
  for (const ops::OpInfo& info : ops::all_ops()) {
    out << pad(info.name, 16) << pad(category_name(info.category), 17)
        << pad(effect(info.category, state.dtype[0]), 16) << effect(info.category, state.dtype[1]) << "\n";
  }
  return out.str();
}

namespace detail {

bool any_autocast_enabled() { return state.suspended == 0 && (state.enabled[0] || state.enabled[1]); }

SuspendGuard::SuspendGuard() { ++state.suspended; }
SuspendGuard::~SuspendGuard() { --state.suspended; }
ResumeGuard::ResumeGuard() : previous_(state.suspended) { state.suspended = 0; }
ResumeGuard::~ResumeGuard() { state.suspended = previous_; }
bool is_suspended() { return state.suspended > 0; }

bool autocast_target(Category category, const std::vector<const Tensor*>& inputs, DType* target) {
  if (category == Category::Unchanged) return false;
  // Promote: the result type over the eligible inputs, where 0-d tensors count only when every
  // eligible input is 0-d (PyTorch's rule for scalars).
  bool found = false;
  DType widest = DType::F16;
  int64_t widest_rank = 0;
  for (const Tensor* t : inputs) {
    if (!t->defined() || !is_floating(t->dtype()) || t->dtype() == DType::F64) continue;
    const Device::Kind kind = t->device().kind();
    if (!state.enabled[slot(kind)]) continue;
    switch (category) {
      case Category::LowerPrecision: *target = state.dtype[slot(kind)]; return true;
      case Category::Fp32: *target = DType::F32; return true;
      case Category::Promote:
        widest = found ? result_type(widest, widest_rank, t->dtype(), t->dim()) : t->dtype();
        widest_rank = std::max(widest_rank, t->dim());
        found = true;
        break;
      case Category::Unchanged: return false;
    }
  }
  if (found) *target = widest;
  return found;
}

Tensor autocast_input(const Tensor& x, DType dtype) {
  if (!x.defined() || !is_floating(x.dtype()) || x.dtype() == DType::F64 || x.dtype() == dtype ||
      !state.enabled[slot(x.device().kind())]) {
    return x;
  }
  // Parameters (fp32 leaves that require grad) are cast once per region: a weight used by several
  // ops, or by every micro-batch of a step, costs one cast and one stored copy.
  const bool cacheable = is_half(dtype) && x.dtype() == DType::F32 && x.is_leaf() && x.requires_grad() &&
                         is_grad_enabled();
  if (!cacheable) return x.to(dtype);
  auto it = state.cache.find(x.impl().get());
  if (it != state.cache.end() && it->second.second.dtype() == dtype) return it->second.second;
  Tensor cast = x.to(dtype);
  state.cache[x.impl().get()] = {x, cast};
  return cast;
}

}  // namespace detail
}  // namespace demi::amp
