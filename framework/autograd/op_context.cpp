// OpContext bookkeeping: saved tensors (or checkpoint placeholders) and the process-wide count of the
// bytes they hold.
#include "framework/autograd/op_context.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "framework/autograd/checkpoint_frame.h"
#include "framework/autograd/node.h"

namespace demi::autograd {
namespace {

// Each storage is counted once however many ops save it (relu's output is also the next conv's
// input), so the total is the memory the graphs really hold.
struct SavedStorages {
  std::mutex mutex;
  std::unordered_map<const Storage*, int> holders;
  SavedTensorStats stats;
};
SavedStorages& saved_storages() {
  static auto* s = new SavedStorages();  // never destroyed: graphs may die after main()
  return *s;
}

void hold(Storage* storage) {
  SavedStorages& s = saved_storages();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.holders[storage]++ == 0) {
    if (storage->category() == MemoryCategory::Other) storage->set_category(MemoryCategory::SavedActivations);
    s.stats.current_bytes += static_cast<int64_t>(storage->nbytes());
    s.stats.peak_bytes = std::max(s.stats.peak_bytes, s.stats.current_bytes);
  }
}

void drop(Storage* storage) {
  SavedStorages& s = saved_storages();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.holders.find(storage);
  if (--it->second == 0) {
    if (storage->category() == MemoryCategory::SavedActivations) storage->set_category(MemoryCategory::Other);
    s.stats.current_bytes -= static_cast<int64_t>(storage->nbytes());
    s.holders.erase(it);
  }
}

}  // namespace

namespace detail {

bool counts_as_saved(const Tensor& t) {
  // Parameters (leaves that require grad) live anyway; what the graph adds is everything else.
  return t.defined() && !(t.is_leaf() && t.requires_grad());
}

std::shared_ptr<Storage> count_saved(const Tensor& t) {
  if (!t.defined()) return nullptr;
  hold(t.impl()->storage.get());
  return t.impl()->storage;
}

void uncount_saved(const std::shared_ptr<Storage>& storage) {
  if (storage) drop(storage.get());
}

}  // namespace detail

SavedTensorStats saved_tensor_stats() {
  SavedStorages& s = saved_storages();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}
void reset_saved_tensor_peak() {
  SavedStorages& s = saved_storages();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stats.peak_bytes = s.stats.current_bytes;
}

OpContext::OpContext(OpContext&& other) noexcept
    : op_name_(other.op_name_),
      needs_grad_(std::move(other.needs_grad_)),
      recording_(other.recording_),
      released_(other.released_),
      saved_(std::move(other.saved_)),
      counted_(std::move(other.counted_)),
      attrs_(std::move(other.attrs_)) {
  other.saved_.clear();
  other.counted_.clear();
  other.released_ = true;
}

void OpContext::keep(Slot& slot, const Tensor& t, bool counted) {
  // Detached: an op that saves its own output must not keep its own node alive through it.
  slot.tensor = t.defined() ? t.detach() : t;
  slot.version = t.defined() ? t.impl()->storage->version() : 0;
  if (counted) counted_.push_back(detail::count_saved(t));
}

void OpContext::save(const Tensor& t) {
  if (!recording_) return;
  if (detail::CheckpointFrame* frame = detail::active_checkpoint_frame()) {
    if (frame->recomputing()) {  // the rerun's graph is discarded: the frame keeps the tensor for the first run's
      frame->capture(t);
      return;
    }
    Slot slot;
    slot.index = frame->defer(t);
    if (t.defined()) slot.frame = frame->shared_from_this();
    saved_.push_back(std::move(slot));
    return;
  }
  saved_.emplace_back();
  keep(saved_.back(), t, detail::counts_as_saved(t));
}

const Tensor& OpContext::saved(size_t i) {
  DEMI_CHECK(!released_, op_name_, ": its saved tensors were freed by an earlier backward(); run "
             "the forward pass again before calling backward() a second time");
  DEMI_INTERNAL_CHECK(i < saved_.size(), op_name_, " asked for saved tensor ", i, " of ", saved_.size());
  Slot& slot = saved_[i];
  if (slot.frame) {
    const std::shared_ptr<detail::CheckpointFrame> frame = std::move(slot.frame);
    slot.frame = nullptr;
    const detail::CheckpointFrame::Resolved resolved = frame->take(slot.index);
    keep(slot, resolved.tensor, resolved.counted);
  }
  const Tensor& t = slot.tensor;
  DEMI_CHECK(!t.defined() || t.impl()->storage->version() == slot.version, op_name_, ": a tensor it saved "
             "for backward (shape ", t.shape(), ", ", t.dtype(), ") was modified in place after the forward pass "
             "(add_, copy_, fill_ ...), so its gradient would be wrong; use the out-of-place op, or make the change "
             "before the forward pass");
  return t;
}

void OpContext::release() {
  if (released_) return;
  released_ = true;
  saved_.clear();
  for (const auto& storage : counted_) drop(storage.get());
  counted_.clear();
}

}  // namespace demi::autograd
