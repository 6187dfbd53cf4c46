// The caching allocator behind every Storage: exact size classes (4 per power of two) so the same
// training step finds the same blocks again; raw memory comes from the device's Kernels.
#include "framework/tensor/allocator.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backends/kernels.h"

#if defined(__SANITIZE_ADDRESS__)
#define DEMI_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DEMI_ASAN 1
#endif
#endif
#ifdef DEMI_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace demi {
namespace {

// Under AddressSanitizer (scripts/sanitize) the cache would hide the very bugs ASan is there for:
// a block parked in a free list stays addressable (a use after free goes unseen) and rounding up
// to the bucket leaves slack past the requested bytes (a small overflow goes unseen). So cached
// blocks and the slack are poisoned. Host memory only: a CUDA pointer has no shadow.
void poison(const Device& device, void* ptr, size_t bytes) {
#ifdef DEMI_ASAN
  if (device.is_cpu() && bytes) ASAN_POISON_MEMORY_REGION(ptr, bytes);
#endif
}
void unpoison(const Device& device, void* ptr, size_t bytes) {
#ifdef DEMI_ASAN
  if (device.is_cpu() && bytes) ASAN_UNPOISON_MEMORY_REGION(ptr, bytes);
#endif
}

class CachingAllocator {
 public:
  explicit CachingAllocator(const Device& device) : device_(device) {}
  ~CachingAllocator() = default;  // process exit: the OS reclaims the memory

  void* allocate(size_t bytes) {
    const size_t size = detail::allocation_bucket(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    const bool pooled = active_pool_ != 0 && std::this_thread::get_id() == pool_thread_;
    auto& free_list = pooled ? pools_.at(active_pool_)[size] : free_[size];
    if (!free_list.empty()) {
      ptr = free_list.back();
      free_list.pop_back();
      ++stats_.cache_hits;
    } else {
      ptr = backend::kernels_for(device_).raw_allocate(size);
      ++stats_.system_allocations;
      stats_.reserved_bytes += static_cast<int64_t>(size);
    }
    unpoison(device_, ptr, bytes);
    poison(device_, static_cast<char*>(ptr) + bytes, size - bytes);
    sizes_[ptr] = size;
    if (pooled) pool_of_[ptr] = active_pool_;
    stats_.allocated_bytes += static_cast<int64_t>(size);
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes) stats_.peak_allocated_bytes = stats_.allocated_bytes;
    return ptr;
  }

  void deallocate(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(ptr);
    DEMI_INTERNAL_CHECK(it != sizes_.end(), "deallocate of a pointer this allocator did not hand out");
    stats_.allocated_bytes -= static_cast<int64_t>(it->second);
    poison(device_, ptr, it->second);
    FreeLists* lists = &free_;
    auto owner = pool_of_.find(ptr);
    if (owner != pool_of_.end()) {
      auto pool = pools_.find(owner->second);
      if (pool != pools_.end()) lists = &pool->second;  // else released: the block joins the cache
      pool_of_.erase(owner);
    }
    (*lists)[it->second].push_back(ptr);
    sizes_.erase(it);
  }

  uint64_t create_pool() {
    std::lock_guard<std::mutex> lock(mutex_);
    pools_[++last_pool_];
    return last_pool_;
  }
  void begin_pool(uint64_t pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    DEMI_CHECK(pools_.count(pool), "memory pool ", pool, " of ", device_, " does not exist (released?)");
    DEMI_CHECK(active_pool_ == 0, "memory pool ", active_pool_, " of ", device_, " is already in use; a device "
               "records one CUDA graph at a time");
    active_pool_ = pool;
    pool_thread_ = std::this_thread::get_id();
  }
  void end_pool() {
    std::lock_guard<std::mutex> lock(mutex_);
    active_pool_ = 0;
  }
  void release_pool(uint64_t pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool);
    if (it == pools_.end()) return;
    if (active_pool_ == pool) active_pool_ = 0;
    for (auto& [size, list] : it->second) {
      auto& shared = free_[size];
      shared.insert(shared.end(), list.begin(), list.end());
    }
    pools_.erase(it);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& kernels = backend::kernels_for(device_);
    for (auto& [size, list] : free_) {
      for (void* ptr : list) {
        unpoison(device_, ptr, size);
        kernels.raw_free(ptr);
      }
      stats_.reserved_bytes -= static_cast<int64_t>(size * list.size());
      list.clear();
    }
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

 private:
  Device device_;
  std::mutex mutex_;
  using FreeLists = std::unordered_map<size_t, std::vector<void*>>;  // size class -> free blocks
  FreeLists free_;                                                    // the shared cache
  std::unordered_map<void*, size_t> sizes_;                           // live block -> its size class
  std::unordered_map<uint64_t, FreeLists> pools_;                     // private pools' free blocks
  std::unordered_map<void*, uint64_t> pool_of_;                       // live pool block -> its pool
  uint64_t last_pool_ = 0, active_pool_ = 0;                          // 0: none
  std::thread::id pool_thread_;                                       // the active pool's thread
  MemoryStats stats_;

 public:
  // Category accounting (requested bytes, not buckets): every storage is in exactly one category.
  void recategorize(size_t bytes, int from, int to) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (from >= 0) categories_[from].current -= static_cast<int64_t>(bytes);
    if (to >= 0) {
      MemoryReport::Bytes& b = categories_[to];
      b.current += static_cast<int64_t>(bytes);
      b.peak = std::max(b.peak, b.current);
    }
  }
  MemoryReport report() {
    std::lock_guard<std::mutex> lock(mutex_);
    MemoryReport r;
    for (int i = 0; i < kNumMemoryCategories; ++i) r.by_category[i] = categories_[i];
    r.allocator = stats_;
    return r;
  }
  void reset_category_peaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& b : categories_) b.peak = b.current;
  }

 private:
  MemoryReport::Bytes categories_[kNumMemoryCategories];
};

CachingAllocator& allocator_for(const Device& device) {
  static std::mutex mutex;
  // Never destroyed: tensors in static objects may be freed after main() returns.
  static auto* allocators = new std::map<std::pair<int, int>, std::unique_ptr<CachingAllocator>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*allocators)[{static_cast<int>(device.kind()), device.index()}];
  if (!slot) slot = std::make_unique<CachingAllocator>(device);
  return *slot;
}

}  // namespace

namespace detail {
size_t allocation_bucket(size_t bytes) {
  if (bytes <= 512) return 512;
  size_t power = 1;
  while (power * 2 <= bytes) power *= 2;  // largest power of two <= bytes
  const size_t step = power / 4;
  return (bytes + step - 1) / step * step;
}
void* allocate(const Device& device, size_t bytes) { return allocator_for(device).allocate(bytes); }
void deallocate(const Device& device, void* ptr) { allocator_for(device).deallocate(ptr); }
uint64_t create_pool(const Device& device) { return allocator_for(device).create_pool(); }
void begin_pool(const Device& device, uint64_t pool) { allocator_for(device).begin_pool(pool); }
void end_pool(const Device& device) { allocator_for(device).end_pool(); }
void release_pool(const Device& device, uint64_t pool) { allocator_for(device).release_pool(pool); }
}  // namespace detail

MemoryStats memory_stats(const Device& device) { return allocator_for(device).stats(); }
void empty_cache(const Device& device) { allocator_for(device).empty_cache(); }
void reset_peak_memory_stats(const Device& device) {
  allocator_for(device).reset_peak();
  allocator_for(device).reset_category_peaks();
}

namespace detail {
void recategorize(const Device& device, size_t bytes, MemoryCategory from, MemoryCategory to) {
  allocator_for(device).recategorize(bytes, static_cast<int>(from), static_cast<int>(to));
}
}  // namespace detail

const char* memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::Parameters: return "parameters";
    case MemoryCategory::Gradients: return "gradients";
    case MemoryCategory::OptimizerState: return "optimizer state";
    case MemoryCategory::MasterWeights: return "master weights";
    case MemoryCategory::SavedActivations: return "saved activations";
    case MemoryCategory::Other: return "other (outputs, temporaries)";
  }
  return "unknown";
}

MemoryReport memory_report(const Device& device) { return allocator_for(device).report(); }

std::string MemoryReport::str() const {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  out << std::left << std::setw(30) << "category" << std::right << std::setw(12) << "current MB" << std::setw(12)
      << "peak MB" << "\n";
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    out << std::left << std::setw(30) << memory_category_name(static_cast<MemoryCategory>(i)) << std::right
        << std::setw(12) << by_category[i].current / 1e6 << std::setw(12) << by_category[i].peak / 1e6 << "\n";
  }
  out << std::left << std::setw(30) << "allocator (reserved)" << std::right << std::setw(12)
      << allocator.reserved_bytes / 1e6 << std::setw(12) << "" << "\n";
  return out.str();
}

TrainingMemoryEstimate estimate_training_memory(int64_t n, DType param_dtype, int optimizer_state_tensors,
                                                bool fp32_masters) {
  TrainingMemoryEstimate e;
  const auto size = static_cast<int64_t>(dtype_size(param_dtype));
  e.parameters = n * size;
  e.gradients = n * size;
  e.optimizer_state = n * 4 * optimizer_state_tensors;
  if (fp32_masters && is_half(param_dtype)) {
    e.master_weights = n * 4;
    e.gradients += n * 4;  // the fp32 gradient the scaler unscales into
  }
  return e;
}

}  // namespace demi
