// OpContext bookkeeping: saved tensors and the process-wide count of the bytes they hold.
#include "framework/autograd/op_context.h"

#include <atomic>

#include "framework/autograd/node.h"

namespace demi::autograd {
namespace {
std::atomic<int64_t> saved_current{0};
std::atomic<int64_t> saved_peak{0};

void add_saved(int64_t bytes) {
  const int64_t now = saved_current.fetch_add(bytes) + bytes;
  int64_t peak = saved_peak.load();
  while (now > peak && !saved_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

SavedTensorStats saved_tensor_stats() { return {saved_current.load(), saved_peak.load()}; }
void reset_saved_tensor_peak() { saved_peak.store(saved_current.load()); }

OpContext::OpContext(OpContext&& other) noexcept
    : op_name_(other.op_name_),
      needs_grad_(std::move(other.needs_grad_)),
      recording_(other.recording_),
      released_(other.released_),
      saved_(std::move(other.saved_)),
      saved_bytes_(other.saved_bytes_),
      attrs_(std::move(other.attrs_)) {
  other.saved_.clear();
  other.saved_bytes_ = 0;
  other.released_ = true;
}

void OpContext::save(const Tensor& t) {
  if (!recording_) return;
  // Detached: an op that saves its own output must not keep its own node alive through it.
  saved_.push_back(t.defined() ? t.detach() : t);
  if (t.defined()) {
    const auto bytes = static_cast<int64_t>(t.nbytes());
    saved_bytes_ += bytes;
    add_saved(bytes);
  }
}

const Tensor& OpContext::saved(size_t i) const {
  DEMI_CHECK(!released_, op_name_, ": its saved tensors were freed by an earlier backward(); run "
             "the forward pass again before calling backward() a second time");
  DEMI_INTERNAL_CHECK(i < saved_.size(), op_name_, " asked for saved tensor ", i, " of ", saved_.size());
  return saved_[i];
}

void OpContext::release() {
  if (released_) return;
  released_ = true;
  saved_.clear();
  saved_current.fetch_sub(saved_bytes_);
  saved_bytes_ = 0;
}

}  // namespace demi::autograd
