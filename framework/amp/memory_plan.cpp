// plan_memory: per-parameter arithmetic for the state, and two traced forward passes for the saved
// activations (autograd's counter, so each saved storage is counted once, as memory_report() does;
// with checkpointed modules, also its prediction of the peak while backward reruns them).
#include "framework/amp/memory_plan.h"

#include <algorithm>
#include <iomanip>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "framework/amp/autocast.h"
#include "framework/autograd/checkpoint.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/tensor/factories.h"

namespace demi::amp {
namespace {

void check_options(const MemoryPlanOptions& o) {
  DEMI_CHECK(o.micro_batches >= 1, "plan_memory: micro_batches must be >= 1, got ", o.micro_batches);
  DEMI_CHECK(o.optimizer_state_tensors >= 0, "plan_memory: optimizer_state_tensors must be >= 0, got ",
             o.optimizer_state_tensors);
  DEMI_CHECK(o.autocast == DType::F32 || o.autocast == DType::F16 || o.autocast == DType::BF16,
             "plan_memory: autocast must be float32 (none), float16 or bfloat16, got ", o.autocast);
}

// Adds one trainable parameter of `numel` elements and `dtype` to the state categories.
void add_trainable(MemoryPlan& plan, int64_t numel, DType dtype, const MemoryPlanOptions& o) {
  const int64_t state_size = dtype == DType::F64 ? 8 : 4;  // optimizer state is fp32 (fp64 for fp64)
  plan.gradients += numel * static_cast<int64_t>(dtype_size(dtype));
  plan.optimizer_state += numel * state_size * o.optimizer_state_tensors;
  if (is_half(dtype) && o.masters == optim::MasterWeights::Fp32) {
    plan.master_weights += numel * 4;
    if (o.loss_scaling) plan.gradients += numel * 4;  // the fp32 gradient unscale_ writes beside the half one
  }
}

// Saved bytes of one forward pass of `model` on a batch of `batch` inputs shaped like `shape`: held
// at its end, and while backward reruns each checkpointed module (none without checkpointing).
struct Traced {
  int64_t forward = 0;
  std::vector<int64_t> recompute;
};
Traced traced_saved_bytes(nn::Module& model, int64_t batch, const MemoryPlanOptions& o, const Device& device) {
  Shape shape = o.input_shape;
  shape[0] = batch * o.micro_batches;
  const Tensor whole = zeros(shape, DType::F32, device);
  const Tensor x = o.micro_batches == 1 ? whole : whole.slice(0, batch);  // the first micro-batch
  const int64_t before = autograd::saved_tensor_stats().current_bytes;
  autograd::RecomputeTrace trace;
  std::optional<AutocastGuard> autocast;
  if (o.autocast != DType::F32) autocast.emplace(device.kind(), o.autocast);
  const Tensor y = model(x);
  const Tensor loss = o.loss ? o.loss(y) : Tensor();
  Traced traced{autograd::saved_tensor_stats().current_bytes - before, trace.peaks()};
  for (int64_t& bytes : traced.recompute) bytes -= before;
  return traced;
}  // y (and its graph) die on return

// Fills the recompute fields from the traces at batch 1 and 2: each checkpointed module's line
// (fixed + per_sample * batch) evaluated at `batch`, the largest kept.
void plan_recompute(MemoryPlan& plan, const Traced& one, const Traced& two, int64_t batch) {
  DEMI_INTERNAL_CHECK(one.recompute.size() == two.recompute.size(), "plan_memory: the traces at batch 1 and 2 ran ",
                      one.recompute.size(), " and ", two.recompute.size(), " checkpointed modules");
  for (size_t k = 0; k < one.recompute.size(); ++k) {
    const int64_t per_sample = two.recompute[k] - one.recompute[k];
    const int64_t fixed = one.recompute[k] - per_sample;
    if (k == 0 || fixed + per_sample * batch > plan.recompute_fixed + plan.recompute_per_sample * batch) {
      plan.recompute_fixed = fixed;
      plan.recompute_per_sample = per_sample;
    }
  }
}

}  // namespace

MemoryPlan plan_state_memory(int64_t num_params, DType param_dtype, const MemoryPlanOptions& options) {
  check_options(options);
  DEMI_CHECK(num_params >= 0 && is_floating(param_dtype), "plan_state_memory: needs a count >= 0 of floating "
             "parameters, got ", num_params, " of ", param_dtype);
  MemoryPlan plan;
  plan.parameters = num_params * static_cast<int64_t>(dtype_size(param_dtype));
  add_trainable(plan, num_params, param_dtype, options);
  if (options.lookahead) plan.optimizer_state += num_params * 4;
  return plan;
}

MemoryPlan plan_memory(nn::Module& model, const MemoryPlanOptions& options) {
  check_options(options);
  DEMI_CHECK(options.input_shape.size() >= 1 && options.input_shape[0] >= 1, "plan_memory: input_shape must be a "
             "batch [N, ...] with N >= 1, got ", options.input_shape);
  MemoryPlan plan;
  std::optional<Device> device;
  for (const auto& [name, p] : model.named_parameters()) {
    device = p.device();
    plan.parameters += static_cast<int64_t>(p.nbytes());
    if (p.requires_grad()) add_trainable(plan, p.numel(), p.dtype(), options);
    if (options.lookahead && is_floating(p.dtype())) plan.optimizer_state += p.numel() * 4;
  }
  for (const auto& [name, b] : model.named_buffers()) {
    plan.parameters += static_cast<int64_t>(b.nbytes());
    if (options.lookahead && is_floating(b.dtype())) plan.optimizer_state += b.numel() * 4;
  }
  DEMI_CHECK(device.has_value(), "plan_memory: the model has no parameters");

  // The traces move batch-norm statistics and may leave gradients: keep both, put them back.
  std::vector<std::pair<Tensor, Tensor>> buffers;
  for (const auto& [name, b] : model.named_buffers()) buffers.emplace_back(b, b.clone());
  const bool was_training = model.is_training();
  model.train();
  const Traced one = traced_saved_bytes(model, 1, options, *device);
  const Traced two = traced_saved_bytes(model, 2, options, *device);
  model.train(was_training);
  {
    NoGradGuard no_grad;
    for (auto& [live, saved] : buffers) live.copy_(saved);
  }
  const int64_t batch = options.input_shape[0];
  plan.saved_per_sample = two.forward - one.forward;
  plan.saved_fixed = one.forward - plan.saved_per_sample;
  plan_recompute(plan, one, two, batch);
  plan.saved_activations = std::max(plan.saved_fixed + plan.saved_per_sample * batch,
                                    plan.recompute_fixed + plan.recompute_per_sample * batch);
  return plan;
}

std::string MemoryPlan::str() const {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  auto row = [&](const char* name, int64_t bytes) {
    out << std::left << std::setw(30) << name << std::right << std::setw(12) << static_cast<double>(bytes) / 1e6 << "\n";
  };
  out << std::left << std::setw(30) << "category" << std::right << std::setw(12) << "planned MB" << "\n";
  row("parameters (and buffers)", parameters);
  row("gradients", gradients);
  row("optimizer state", optimizer_state);
  row("master weights", master_weights);
  row("saved activations", saved_activations);
  row("total", total());
  return out.str();
}

}  // namespace demi::amp
