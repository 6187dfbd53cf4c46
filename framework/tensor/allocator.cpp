// The caching allocator behind every Storage: exact size classes (4 per power of two) so the same
// training step finds the same blocks again; raw memory comes from the device's Kernels.
#include "framework/tensor/allocator.h"

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/kernels.h"

namespace demi {
namespace {

class CachingAllocator {
 public:
  explicit CachingAllocator(const Device& device) : device_(device) {}
  ~CachingAllocator() = default;  // process exit: the OS reclaims the memory

  void* allocate(size_t bytes) {
    const size_t size = detail::allocation_bucket(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    auto& free_list = free_[size];
    if (!free_list.empty()) {
      ptr = free_list.back();
      free_list.pop_back();
      ++stats_.cache_hits;
    } else {
      ptr = backend::kernels_for(device_).raw_allocate(size);
      ++stats_.system_allocations;
      stats_.reserved_bytes += static_cast<int64_t>(size);
    }
    sizes_[ptr] = size;
    stats_.allocated_bytes += static_cast<int64_t>(size);
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes) stats_.peak_allocated_bytes = stats_.allocated_bytes;
    return ptr;
  }

  void deallocate(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(ptr);
    DEMI_INTERNAL_CHECK(it != sizes_.end(), "deallocate of a pointer this allocator did not hand out");
    stats_.allocated_bytes -= static_cast<int64_t>(it->second);
    free_[it->second].push_back(ptr);
    sizes_.erase(it);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& kernels = backend::kernels_for(device_);
    for (auto& [size, list] : free_) {
      for (void* ptr : list) kernels.raw_free(ptr);
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
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  std::unordered_map<void*, size_t> sizes_;              // live block -> its size class
  MemoryStats stats_;
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
}  // namespace detail

MemoryStats memory_stats(const Device& device) { return allocator_for(device).stats(); }
void empty_cache(const Device& device) { allocator_for(device).empty_cache(); }
void reset_peak_memory_stats(const Device& device) { allocator_for(device).reset_peak(); }

}  // namespace demi
