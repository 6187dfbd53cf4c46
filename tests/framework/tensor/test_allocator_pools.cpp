// The caching allocator's private pools (what a CUDA graph's memory lives in), checked on the CPU,
// where the same allocator runs: inside a pool a thread gets the pool's blocks; a pool block freed
// at any time goes back to its pool and no other allocation receives it; after release_pool the
// shared cache takes the pool's blocks, and the ones still held follow when freed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

// A size no other test of this process uses, so the cache holds no block of its class beforehand.
constexpr size_t kBytes = 123 * 1024 + 17;

TEST(AllocatorPools, APoolsBlocksGoToNoOtherAllocation) {
  const Device cpu = Device::cpu();
  const uint64_t pool = detail::create_pool(cpu);
  detail::begin_pool(cpu, pool);
  void* in_pool = detail::allocate(cpu, kBytes);
  detail::end_pool(cpu);
  detail::deallocate(cpu, in_pool);  // freed after the capture: back to the pool

  void* outside = detail::allocate(cpu, kBytes);
  EXPECT_NE(outside, in_pool) << "the shared cache handed out a pool's block";
  detail::begin_pool(cpu, pool);
  void* again = detail::allocate(cpu, kBytes);
  EXPECT_EQ(again, in_pool) << "the pool did not reuse its own free block";
  detail::end_pool(cpu);

  detail::release_pool(cpu, pool);  // `again` is still held: it joins the shared cache when freed
  detail::deallocate(cpu, again);
  void* shared = detail::allocate(cpu, kBytes);
  EXPECT_TRUE(shared == in_pool || shared == outside);
  detail::deallocate(cpu, shared);
  detail::deallocate(cpu, shared == in_pool ? outside : in_pool);
}

TEST(AllocatorPools, OnlyThePoolsThreadAllocatesFromIt) {
  const Device cpu = Device::cpu();
  const uint64_t pool = detail::create_pool(cpu);
  detail::begin_pool(cpu, pool);
  void* mine = detail::allocate(cpu, kBytes + 4096);
  detail::deallocate(cpu, mine);  // free in the pool
  void* other = nullptr;
  std::thread([&] { other = detail::allocate(cpu, kBytes + 4096); }).join();
  EXPECT_NE(other, mine) << "another thread received the pool's block";
  EXPECT_EQ(detail::allocate(cpu, kBytes + 4096), mine);
  detail::end_pool(cpu);
  detail::deallocate(cpu, mine);
  detail::deallocate(cpu, other);
  detail::release_pool(cpu, pool);
}

TEST(AllocatorPools, OnePoolInUseAtATime) {
  const Device cpu = Device::cpu();
  const uint64_t a = detail::create_pool(cpu), b = detail::create_pool(cpu);
  EXPECT_NE(a, b);
  detail::begin_pool(cpu, a);
  EXPECT_THAT(error_of([&] { detail::begin_pool(cpu, b); }), HasSubstr("is already in use"));
  detail::end_pool(cpu);
  detail::release_pool(cpu, a);
  EXPECT_THAT(error_of([&] { detail::begin_pool(cpu, a); }), HasSubstr("does not exist (released?)"));
  detail::release_pool(cpu, b);
}

}  // namespace
}  // namespace demi
