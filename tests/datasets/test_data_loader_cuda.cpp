// DataLoader with Options::device = cuda:0: the dataset copied to the device once, each batch made
// there by augment_images, and every batch of an epoch equal, bit for bit, to the CPU loader's.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "backends/kernels.h"
#include "datasets/data_loader.h"

namespace demi::data {
namespace {

Dataset random_dataset(int64_t n) {
  Dataset d;
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i % 10;
  d.labels = tensor(labels, {n});
  d.images = empty({n, 3, 32, 32}, DType::U8);
  uint8_t* p = d.images.data<uint8_t>();
  uint64_t s = 17;
  for (int64_t i = 0; i < d.images.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<uint8_t>(s >> 56);
  }
  return d;
}

TEST(DataLoaderCuda, BatchesEqualTheCpuLoadersBitForBit) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (cuda_device_count() == 0)";
  const Dataset d = random_dataset(300);
  for (const auto& [dtype, format, padding] :
       {std::tuple{DType::F32, MemoryFormat::Contiguous, Padding::Zero},
        std::tuple{DType::F16, MemoryFormat::ChannelsLast, Padding::Reflect},
        std::tuple{DType::BF16, MemoryFormat::ChannelsLast, Padding::Zero}}) {
    DataLoader::Options o;
    o.batch_size = 64;  // 4 full batches and a partial one
    o.augment = true;
    o.augmentation.cutout = 12;
    o.augmentation.padding = padding;
    o.dtype = dtype;
    o.memory_format = format;
    DataLoader host(d, o);
    o.device = Device::cuda(0);
    DataLoader device(d, o);
    for (int64_t epoch : {0, 1}) {
      host.start_epoch(epoch), device.start_epoch(epoch);
      Batch a, b;
      int batches = 0;
      while (host.next(a)) {
        ASSERT_TRUE(device.next(b)) << "batch " << batches;
        EXPECT_TRUE(b.images.device().is_cuda());
        EXPECT_TRUE(b.labels.device().is_cuda());
        EXPECT_EQ(b.images.dtype(), dtype);
        EXPECT_TRUE(b.images.is_contiguous(format));
        EXPECT_EQ(b.labels.to(Device::cpu()).to_vector<int64_t>(), a.labels.to_vector<int64_t>());
        EXPECT_EQ(b.images.to(Device::cpu()).to_vector<float>(), a.images.to_vector<float>())
            << "epoch " << epoch << " batch " << batches;
        ++batches;
      }
      EXPECT_FALSE(device.next(b));
      EXPECT_EQ(batches, 5);
    }
  }
}

}  // namespace
}  // namespace demi::data
