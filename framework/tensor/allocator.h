// Per-device caching allocator: freed blocks go to size-bucketed free lists and are reused, so a
// steady-state training loop allocates nothing new from the system (fresh multi-megabyte mallocs
// each step cost page faults; see docs/BENCHMARKS.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/core/device.h"

namespace demi {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // held by live tensors (bucket-rounded)
  int64_t peak_allocated_bytes = 0;  // since the last reset_peak_memory_stats()
  int64_t reserved_bytes = 0;        // obtained from the system: allocated + cached free blocks
  int64_t system_allocations = 0;    // calls to the device's raw allocator so far
  int64_t cache_hits = 0;            // allocations served from a free list
};

// Statistics of `device`'s allocator.
MemoryStats memory_stats(const Device& device);
// Returns every cached free block of `device` to the system.
void empty_cache(const Device& device);
// Restarts peak tracking at the current allocation.
void reset_peak_memory_stats(const Device& device);

namespace detail {
// A block of at least `bytes`, from the cache when one of the same bucket is free.
void* allocate(const Device& device, size_t bytes);
// Hands a block from allocate() back to the cache of its device.
void deallocate(const Device& device, void* ptr);
// The size class a request of `bytes` is rounded to (4 classes per power of two).
size_t allocation_bucket(size_t bytes);
}  // namespace detail

}  // namespace demi
