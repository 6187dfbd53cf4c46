// The MPI process group's collectives on 2 ranks: all_reduce (sum, max) per dtype, broadcast,
// barrier, async order, and errors that name the culprit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "framework/demi/demi.h"
#include "support/dist_world.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::world;

TEST(ProcessGroup, KnowsWhereItSitsFromTheLauncher) {
  const dist::LaunchInfo info = dist::launch_info();
  EXPECT_EQ(info.launcher, "mpirun");
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(world().size(), 2);
  EXPECT_EQ(world().rank(), info.rank);
  EXPECT_EQ(world().backend(), "mpi");
}

// Rank r holds (r + 1) * (i - 3) for element i: exact in every dtype, so sums and maxima are exact.
Tensor rank_values(DType dtype, int rank) {
  std::vector<float> v(8);
  for (int i = 0; i < 8; ++i) v[i] = static_cast<float>((rank + 1) * (i - 3));
  return tensor(v, {8}).to(dtype);
}

TEST(ProcessGroup, AllReduceSumsAndTakesTheMaximumInEveryDtype) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor sum = rank_values(dtype, world().rank());
    world().all_reduce(sum, dist::ReduceOp::Sum);
    const Tensor max = rank_values(dtype, world().rank());
    world().all_reduce(max, dist::ReduceOp::Max);
    const std::vector<double> s = sum.to_vector<double>(), m = max.to_vector<double>();
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(s[i], 3.0 * (i - 3)) << "element " << i;       // 1x + 2x
      EXPECT_EQ(m[i], i >= 3 ? 2.0 * (i - 3) : 1.0 * (i - 3));  // the larger of x and 2x
    }
  }
}

TEST(ProcessGroup, HalfSumsRoundOnceLikeNccl) {
  // 2048 + 1 is not an fp16 value: the fp32 sum 2049 rounds to even, 2048; 2048 + 3 = 2051 -> 2052.
  const Tensor t = tensor({world().rank() == 0 ? 2048.0f : 1.0f, world().rank() == 0 ? 2048.0f : 3.0f}, {2}).to(DType::F16);
  world().all_reduce(t);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2048.0f, 2052.0f}));
  // fp16's overflow is fp16's: 60000 + 60000 is inf, as a real fp16 all-reduce gives.
  const Tensor big = full({1}, 60000.0, DType::F16);
  world().all_reduce(big);
  EXPECT_TRUE(std::isinf(big.item<float>()));
}

TEST(ProcessGroup, BroadcastCopiesTheRootsTensor) {
  for (int root : {0, 1}) {
    const Tensor t = full({5}, 10.0 + world().rank(), DType::BF16);
    world().broadcast(t, root);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(5, 10.0f + root));
  }
}

TEST(ProcessGroup, AsyncCollectivesFinishInOrder) {
  std::vector<Tensor> ts;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int k = 0; k < 20; ++k) {
    ts.push_back(full({1000}, k + world().rank(), DType::F32));
    works.push_back(world().all_reduce_async(ts.back(), dist::ReduceOp::Sum));
  }
  world().barrier();
  for (int k = 0; k < 20; ++k) {
    works[k]->wait();
    EXPECT_EQ(ts[k].to_vector<float>()[999], 2.0f * k + 1.0f);
  }
}

TEST(ProcessGroup, RefusesWhatItCannotReduceAndSaysWhy) {
  const Tensor bytes = zeros({4}, DType::U8);
  EXPECT_THAT(test::error_of([&] { world().all_reduce(bytes); }),
              ::testing::HasSubstr("dtype uint8 is not supported"));
  EXPECT_THAT(test::error_of([&] { world().broadcast(zeros({1}), 2); }),
              ::testing::HasSubstr("root 2 is not a rank of this group of 2"));
  EXPECT_THAT(test::error_of([] { dist::init_process_group("gloo"); }),
              ::testing::HasSubstr("backend 'gloo' is not one of auto, mpi, nccl"));
}

}  // namespace
}  // namespace demi
