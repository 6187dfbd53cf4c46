// Checkpoint frames: the first run under a frame that turns saved tensors into placeholders, and
// the rerun in backward that captures them again, with the first run's grad mode, autocast state
// and random streams.
#include "framework/autograd/checkpoint.h"

#include "framework/amp/autocast.h"
#include "framework/amp/autocast_apply.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/autograd/op_context.h"

namespace demi::autograd {
namespace {

thread_local std::vector<detail::CheckpointFrame*> t_frames;  // innermost last
thread_local int t_recomputing = 0;
thread_local RecomputeTrace* t_trace = nullptr;

// Makes `frame` the innermost one for its scope.
class ActiveFrame {
 public:
  explicit ActiveFrame(detail::CheckpointFrame* frame) { t_frames.push_back(frame); }
  ~ActiveFrame() { t_frames.pop_back(); }
  ActiveFrame(const ActiveFrame&) = delete;
  ActiveFrame& operator=(const ActiveFrame&) = delete;
};

// Sets the default generators to the first run's states, and back to where they were on exit: the
// rerun draws the first run's numbers and leaves the streams as if it had not run.
class RestoreGenerators {
 public:
  explicit RestoreGenerators(const std::vector<std::pair<Device, GeneratorState>>& states) {
    for (const auto& [device, state] : states) {
      Generator& gen = default_generator(device);
      now_.emplace_back(&gen, gen.state());
      gen.set_state(state);
    }
  }
  ~RestoreGenerators() {
    for (const auto& [gen, state] : now_) gen->set_state(state);
  }
  RestoreGenerators(const RestoreGenerators&) = delete;
  RestoreGenerators& operator=(const RestoreGenerators&) = delete;

 private:
  std::vector<std::pair<Generator*, GeneratorState>> now_;
};

struct Recomputing {
  Recomputing() { ++t_recomputing; }
  ~Recomputing() { --t_recomputing; }
  Recomputing(const Recomputing&) = delete;
  Recomputing& operator=(const Recomputing&) = delete;
};

}  // namespace

bool is_recomputing() { return t_recomputing > 0; }

RecomputeTrace::RecomputeTrace() : previous_(t_trace) { t_trace = this; }
RecomputeTrace::~RecomputeTrace() { t_trace = previous_; }

namespace detail {

CheckpointFrame* active_checkpoint_frame() { return t_frames.empty() ? nullptr : t_frames.back(); }

CheckpointFrame::CheckpointFrame(CheckpointFn fn, const std::vector<Tensor>& inputs) : fn_(std::move(fn)) {
  const bool suspended = amp::detail::is_suspended();
  autocast_cpu_ = {amp::is_autocast_enabled(Device::Kind::CPU) && !suspended, amp::autocast_dtype(Device::Kind::CPU)};
  autocast_cuda_ = {amp::is_autocast_enabled(Device::Kind::CUDA) && !suspended,
                    amp::autocast_dtype(Device::Kind::CUDA)};
  // The CPU's generator always (PyTorch's too), and that of each CUDA device an input lives on.
  rng_.emplace_back(Device::cpu(), default_generator().state());
  for (const Tensor& t : inputs) {
    const bool counted = counts_as_saved(t);
    inputs_.push_back({t.defined() ? t.detach() : t, t.defined() && t.requires_grad(), counted,
                       t.defined() ? t.impl()->storage->version() : 0});
    if (counted) input_counts_.push_back(count_saved(t));
    if (!t.defined() || t.device().is_cpu()) continue;
    bool seen = false;
    for (const auto& [device, state] : rng_) seen = seen || device == t.device();
    if (!seen) rng_.emplace_back(t.device(), default_generator(t.device()).state());
  }
}

CheckpointFrame::~CheckpointFrame() {
  release_inputs();
  release_captured();
}

void CheckpointFrame::release_inputs() {
  for (const auto& storage : input_counts_) uncount_saved(storage);
  input_counts_.clear();
  inputs_.clear();
}

void CheckpointFrame::release_captured() {
  for (const Captured& c : captured_) uncount_saved(c.count);
  captured_.clear();
}

const CheckpointFrame::Input* CheckpointFrame::input_sharing_storage(const Tensor& t) const {
  for (const Input& in : inputs_) {
    if (in.tensor.defined() && in.tensor.impl()->storage == t.impl()->storage) return &in;
  }
  return nullptr;
}

std::vector<Tensor> CheckpointFrame::run(const std::vector<Tensor>& inputs) {
  const int64_t held_before = saved_tensor_stats().current_bytes;  // this frame's inputs included
  std::vector<Tensor> outputs;
  {
    ActiveFrame active(this);
    outputs = fn_(inputs);
  }
  state_ = State::Pending;
  if (t_trace && !is_recomputing()) t_trace->peaks_.push_back(held_before + deferred_bytes_);
  return outputs;
}

size_t CheckpointFrame::defer(const Tensor& t) {
  Placeholder p;
  p.defined = t.defined();
  if (t.defined()) {
    p.shape = t.shape();
    p.dtype = t.dtype();
    const std::shared_ptr<Storage>& storage = t.impl()->storage;
    if (counts_as_saved(t) && !input_sharing_storage(t)) {  // the frame holds its inputs already
      std::weak_ptr<Storage>& seen = deferred_storages_[storage.get()];
      if (seen.lock() != storage) {
        seen = storage;
        deferred_bytes_ += static_cast<int64_t>(storage->nbytes());
      }
    }
  }
  placeholders_.push_back(std::move(p));
  return placeholders_.size() - 1;
}

void CheckpointFrame::capture(const Tensor& t) {
  if (!t.defined()) {
    captured_.emplace_back();
    return;
  }
  // The rerun's inputs are leaves of its own; they count as the first run's inputs did.
  const Input* input = input_sharing_storage(t);
  const bool counted = input ? input->counted : counts_as_saved(t);
  captured_.push_back({t.detach(), counted, counted ? count_saved(t) : nullptr});
}

CheckpointFrame::Resolved CheckpointFrame::take(size_t i) {
  DEMI_CHECK(state_ != State::Forward, "checkpoint: backward() needs a tensor saved inside a checkpointed function "
             "that has not returned yet; call backward() after checkpoint(fn, ...) returns");
  DEMI_CHECK(state_ != State::Recomputing, "checkpoint: backward() ran inside the rerun of a checkpointed function; "
             "the function must not call backward() itself");
  if (state_ == State::Pending) recompute();
  DEMI_INTERNAL_CHECK(i < captured_.size() && i < placeholders_.size(), "checkpoint placeholder ", i, " of ",
                      placeholders_.size());
  const Placeholder& p = placeholders_[i];
  Captured& c = captured_[i];
  DEMI_CHECK(p.defined == c.tensor.defined() && (!p.defined || (p.shape == c.tensor.shape() && p.dtype == c.tensor.dtype())),
             "checkpoint: rerunning the checkpointed function saved ", c.tensor.defined() ? c.tensor.shape() : Shape{},
             " ", c.tensor.defined() ? dtype_name(c.tensor.dtype()) : "(undefined)", " where its first run saved ",
             p.shape, " ", p.defined ? dtype_name(p.dtype) : "(undefined)", " (saved tensor ", i, "); the function "
             "must do the same work on every call: no branching on state that changes between forward and backward");
  Resolved resolved{std::move(c.tensor), c.counted};
  uncount_saved(c.count);
  c = Captured{};
  return resolved;
}

void CheckpointFrame::recompute() {
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const Tensor& t = inputs_[k].tensor;
    DEMI_CHECK(!t.defined() || t.impl()->storage->version() == inputs_[k].version, "checkpoint: input ", k,
               " of the checkpointed function (shape ", t.shape(), ", ", t.dtype(), ") was modified in place after "
               "the forward pass, so rerunning the function in backward would give wrong gradients; use the "
               "out-of-place op, or make the change before the forward pass");
  }
  state_ = State::Recomputing;
  try {
    rerun();
  } catch (...) {
    state_ = State::Pending;
    release_captured();
    throw;
  }
  state_ = State::Recomputed;
  DEMI_CHECK(captured_.size() == placeholders_.size(), "checkpoint: rerunning the checkpointed function saved ",
             captured_.size(), " tensors for backward where its first run saved ", placeholders_.size(), "; the "
             "function must do the same work on every call: no branching on state that changes between forward "
             "and backward");
  release_inputs();  // what the gradients need is captured now
  fn_ = nullptr;
}

// fn again, recorded as in the first run (its own graph dies on return), capturing what it saves.
void CheckpointFrame::rerun() {
  std::vector<Tensor> inputs;
  for (const Input& in : inputs_) {
    Tensor t = in.tensor.defined() ? in.tensor.detach() : in.tensor;
    if (in.requires_grad) t.requires_grad_(true);
    inputs.push_back(t);
  }
  ActiveFrame active(this);
  Recomputing recomputing;
  AutoGradMode grad_mode(true);               // backward runs with grad off
  amp::detail::ResumeGuard resume_autocast;  // and autocast suspended
  amp::AutocastGuard cpu(Device::Kind::CPU, autocast_cpu_.dtype, autocast_cpu_.enabled);
  amp::AutocastGuard cuda(Device::Kind::CUDA, autocast_cuda_.dtype, autocast_cuda_.enabled);
  RestoreGenerators generators(rng_);
  fn_(inputs);
}

std::vector<Tensor> run_checkpointed(CheckpointFn fn, const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return fn(inputs);  // nothing is saved: nothing to recompute
  auto frame = std::make_shared<CheckpointFrame>(std::move(fn), inputs);
  return frame->run(inputs);  // the placeholders keep the frame alive as long as the graph needs it
}

}  // namespace detail
}  // namespace demi::autograd
