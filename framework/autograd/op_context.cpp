// OpContext bookkeeping: saved tensors and the process-wide count of the bytes they hold.
#include "framework/autograd/op_context.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

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
      saved_versions_(std::move(other.saved_versions_)),
      counted_(std::move(other.counted_)),
      attrs_(std::move(other.attrs_)) {
  other.saved_.clear();
  other.counted_.clear();
  other.released_ = true;
}

void OpContext::save(const Tensor& t) {
  if (!recording_) return;
  // Detached: an op that saves its own output must not keep its own node alive through it.
  saved_.push_back(t.defined() ? t.detach() : t);
  saved_versions_.push_back(t.defined() ? t.impl()->storage->version() : 0);
  // Parameters (leaves that require grad) live anyway; what the graph adds is everything else.
  if (t.defined() && !(t.is_leaf() && t.requires_grad())) {
    hold(t.impl()->storage.get());
    counted_.push_back(t.impl()->storage);
  }
}

const Tensor& OpContext::saved(size_t i) const {
  DEMI_CHECK(!released_, op_name_, ": its saved tensors were freed by an earlier backward(); run "
             "the forward pass again before calling backward() a second time");
  DEMI_INTERNAL_CHECK(i < saved_.size(), op_name_, " asked for saved tensor ", i, " of ", saved_.size());
  const Tensor& t = saved_[i];
  DEMI_CHECK(!t.defined() || t.impl()->storage->version() == saved_versions_[i], op_name_, ": a tensor it saved "
             "for backward (shape ", t.shape(), ", ", t.dtype(), ") was modified in place after the forward pass "
             "(add_, copy_, fill_ ...), so its gradient would be wrong; use the out-of-place op, or make the change "
             "before the forward pass");
  return t;
}

void OpContext::release() {
  if (released_) return;
  released_ = true;
  saved_.clear();
  saved_versions_.clear();
  for (const auto& storage : counted_) drop(storage.get());
  counted_.clear();
}

}  // namespace demi::autograd
