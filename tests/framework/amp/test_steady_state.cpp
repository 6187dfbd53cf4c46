// Steady state: 1,000 fp16 training steps (autocast + GradScaler + SGD through training::TrainStep) of
// a tiny conv net must not grow memory after warm-up: the caching allocator's bytes, its calls to
// the system allocator and the live C++ heap objects all stay exactly where they were.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <new>

#include "framework/demi/demi.h"

// Counts live operator-new blocks, so that host-side growth (autograd nodes, optimizer or scaler
// bookkeeping that piles up) shows too, not only tensor storage.
namespace {
std::atomic<int64_t> g_live_heap_blocks{0};
}  // namespace

void* operator new(std::size_t size) {
  void* p = std::malloc(size ? size : 1);
  if (!p) throw std::bad_alloc();
  g_live_heap_blocks.fetch_add(1, std::memory_order_relaxed);
  return p;
}
void operator delete(void* p) noexcept {
  if (!p) return;
  g_live_heap_blocks.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }

namespace demi {
namespace {

struct Snapshot {
  MemoryStats stats;
  int64_t by_category[kNumMemoryCategories];
  int64_t heap_blocks;
};

Snapshot snapshot() {
  Snapshot s;
  const MemoryReport report = memory_report(Device::cpu());
  s.stats = report.allocator;
  for (int c = 0; c < kNumMemoryCategories; ++c) s.by_category[c] = report.by_category[c].current;
  s.heap_blocks = g_live_heap_blocks.load();
  return s;
}

TEST(SteadyState, ThousandFp16StepsDoNotGrowMemory) {
  constexpr int kWarmup = 50, kSteps = 1000, kBatch = 8;
  Generator gen(3);
  nn::Sequential net;
  net.emplace<nn::Conv2d>(nn::Conv2d::Options{3, 8, 3, 1, 1, false}, gen)
      .emplace<nn::BatchNorm2d>(nn::BatchNorm2d::Options{8})
      .emplace<nn::ReLU>()
      .emplace<nn::GlobalAvgPool2d>()
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(nn::Linear::Options{8, 10}, gen);
  optim::SGD::Options o;
  o.lr = 0.05;
  o.momentum = 0.9;
  optim::SGD opt(net.parameters(), o);
  amp::GradScaler scaler;
  training::TrainStep step(opt, scaler, {Device::Kind::CPU, DType::F16, 5.0, 1});
  std::vector<int64_t> label_values;
  for (int i = 0; i < kBatch; ++i) label_values.push_back(i % 10);
  const Tensor labels = tensor(label_values, {kBatch});

  Snapshot warm{};
  int stepped = 0;
  for (int i = 0; i < kSteps; ++i) {
    const Tensor x = randn({kBatch, 3, 8, 8}, gen);  // a fresh batch each step, as a loader gives
    stepped += step.run([&](int) { return cross_entropy(net(x), labels); }).stepped();
    if (i + 1 == kWarmup) warm = snapshot();
    if (i + 1 <= kWarmup) continue;
    const Snapshot now = snapshot();
    ASSERT_EQ(now.stats.allocated_bytes, warm.stats.allocated_bytes) << "allocated bytes grew by step " << i + 1;
    ASSERT_EQ(now.stats.reserved_bytes, warm.stats.reserved_bytes) << "the allocator's cache grew by step " << i + 1;
    ASSERT_EQ(now.stats.system_allocations, warm.stats.system_allocations)
        << "step " << i + 1 << " went to the system allocator";
    for (int c = 0; c < kNumMemoryCategories; ++c)
      ASSERT_EQ(now.by_category[c], warm.by_category[c])
          << memory_category_name(static_cast<MemoryCategory>(c)) << " bytes changed by step " << i + 1;
    ASSERT_EQ(now.heap_blocks, warm.heap_blocks) << "live heap objects changed by step " << i + 1;
  }
  EXPECT_GT(stepped, kSteps - 10);  // the loop trained: the scaler skipped at most a few steps
  std::cout << "after " << kSteps << " steps: " << warm.stats.allocated_bytes << " bytes allocated, "
            << warm.stats.reserved_bytes << " reserved, " << warm.stats.system_allocations
            << " system allocations, " << warm.heap_blocks << " live heap objects (all flat since step " << kWarmup
            << ")\n";
}

}  // namespace
}  // namespace demi
