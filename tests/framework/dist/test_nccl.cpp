// The NCCL process group on 2 ranks, one GPU each: all_reduce (sum, max) per dtype, broadcast and
// barrier on CUDA tensors. Skips with the reason when this build has no NCCL or there are fewer
// than 2 GPUs (NCCL refuses two ranks on one GPU).
#include <gtest/gtest.h>

#include "framework/demi/demi.h"
#include "support/dist_world.h"

namespace demi {
namespace {

using test::world;

std::shared_ptr<dist::ProcessGroup> nccl_group() {
  static std::shared_ptr<dist::ProcessGroup> group =
      dist::init_process_group("nccl", Device::cuda(world().rank()));
  return group;
}

#define DEMI_REQUIRE_TWO_GPUS()                                                                         \
  do {                                                                                                  \
    world();                                                                                            \
    if (!dist::nccl_available()) GTEST_SKIP() << "this build has no NCCL (configure with the CUDA toolkit)"; \
    if (backend::cuda_device_count() < 2)                                                               \
      GTEST_SKIP() << "needs 2 CUDA devices, found " << backend::cuda_device_count();                   \
  } while (0)

TEST(ProcessGroupNccl, AllReduceSumsAndTakesTheMaximumInEveryDtype) {
  DEMI_REQUIRE_TWO_GPUS();
  const Device gpu = Device::cuda(world().rank());
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> v(8);
    for (int i = 0; i < 8; ++i) v[i] = static_cast<float>((world().rank() + 1) * (i - 3));
    const Tensor sum = tensor(v, {8}).to(dtype).to(gpu), max = tensor(v, {8}).to(dtype).to(gpu);
    nccl_group()->all_reduce(sum, dist::ReduceOp::Sum);
    nccl_group()->all_reduce(max, dist::ReduceOp::Max);
    const std::vector<double> s = sum.to(Device::cpu()).to_vector<double>(), m = max.to(Device::cpu()).to_vector<double>();
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(s[i], 3.0 * (i - 3));
      EXPECT_EQ(m[i], i >= 3 ? 2.0 * (i - 3) : 1.0 * (i - 3));
    }
  }
}

TEST(ProcessGroupNccl, BroadcastAndBarrier) {
  DEMI_REQUIRE_TWO_GPUS();
  const Tensor t = full({5}, 10.0 + world().rank(), DType::BF16, Device::cuda(world().rank()));
  nccl_group()->broadcast(t, 1);
  EXPECT_EQ(t.to(Device::cpu()).to_vector<float>(), std::vector<float>(5, 11.0f));
  nccl_group()->barrier();
  EXPECT_EQ(nccl_group()->backend(), "nccl");
}

}  // namespace
}  // namespace demi
