// Per-device caching allocator: freed blocks go to size-bucketed free lists and are reused, so a
// steady-state training loop allocates nothing new from the system (fresh multi-megabyte mallocs
// each step cost page faults; see docs/BENCHMARKS.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include <string>

#include "framework/core/device.h"
#include "framework/core/dtype.h"

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

// What a block of memory holds, for memory_report(). New storage is Other (temporaries,
// outputs) until something claims it: modules (Parameters), backward (Gradients), optimizers
// (OptimizerState, MasterWeights), autograd's saved tensors (SavedActivations).
enum class MemoryCategory { Parameters, Gradients, OptimizerState, MasterWeights, SavedActivations, Other };
constexpr int kNumMemoryCategories = 6;
const char* memory_category_name(MemoryCategory c);

struct MemoryReport {
  struct Bytes {
    int64_t current = 0;
    int64_t peak = 0;
  };
  Bytes by_category[kNumMemoryCategories];
  MemoryStats allocator;  // the caching allocator's totals (bucket-rounded, cache included)
  const Bytes& operator[](MemoryCategory c) const { return by_category[static_cast<int>(c)]; }
  // A table: one row per category, current and peak in MB.
  std::string str() const;
};
// Bytes by category on `device`, current and peak (peaks since the last reset_peak_memory_stats).
MemoryReport memory_report(const Device& device = Device::cpu());

// What training a model of num_params parameters costs by category, before activations:
// parameters and gradients in param_dtype, optimizer_state_tensors fp32 tensors per parameter
// (SGD with momentum 1, AdamW 2), and an fp32 master (plus its fp32 gradient) for half params.
struct TrainingMemoryEstimate {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, master_weights = 0;
};
TrainingMemoryEstimate estimate_training_memory(int64_t num_params, DType param_dtype, int optimizer_state_tensors,
                                                bool fp32_masters);

namespace detail {
// "Not counted": the from of a new storage, the to of a freed one.
constexpr auto kNoCategory = static_cast<MemoryCategory>(-1);
// Moves `bytes` of `device` from one category to another (a storage changing hands).
void recategorize(const Device& device, size_t bytes, MemoryCategory from, MemoryCategory to);
// A block of at least `bytes`, from the cache when one of the same bucket is free.
void* allocate(const Device& device, size_t bytes);
// Hands a block from allocate() back to the cache of its device.
void deallocate(const Device& device, void* ptr);
// The size class a request of `bytes` is rounded to (4 classes per power of two).
size_t allocation_bucket(size_t bytes);

// Private pools, for CUDA graphs (framework/cuda/graph.h): while a pool is in use on a device, the
// allocations of the thread that began using it come from the pool's own blocks (new ones from
// the system on a miss), and a pool block freed at any time returns to its pool, never to the
// shared cache, so that memory a recorded graph reads or writes is handed to no other tensor.
// release_pool gives the pool's free blocks to the shared cache; the ones still held follow when
// they are freed. Pools are numbered from 1; one pool is in use per device at a time.
uint64_t create_pool(const Device& device);
void begin_pool(const Device& device, uint64_t pool);
void end_pool(const Device& device);
void release_pool(const Device& device, uint64_t pool);
}  // namespace detail

}  // namespace demi
