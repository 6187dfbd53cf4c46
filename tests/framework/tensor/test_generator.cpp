// Generators: the per-device defaults (one for the CPU, one per CUDA device, as PyTorch), what
// manual_seed resets, and a state that, restored, gives the same draws again (what activation
// checkpointing relies on). CUDA generators are plain (seed, offset) states: no GPU is needed.
#include <gtest/gtest.h>

#include <vector>

#include "framework/demi/demi.h"

namespace demi {
namespace {

TEST(Generator, TheCpuDefaultIsTheDeviceDefaultOfTheCpu) {
  EXPECT_EQ(&default_generator(Device::cpu()), &default_generator());
}

TEST(Generator, EachCudaDeviceHasItsOwnDefault) {
  Generator& cuda0 = default_generator(Device::cuda(0));
  Generator& cuda1 = default_generator(Device::cuda(1));
  EXPECT_NE(&cuda0, &cuda1);
  EXPECT_NE(&cuda0, &default_generator());
  EXPECT_EQ(&default_generator(Device::cuda(0)), &cuda0);  // the same one each time
  cuda0.advance(10);
  EXPECT_EQ(cuda1.offset(), 0u);
  EXPECT_EQ(default_generator(Device::cuda(0)).offset(), cuda0.offset());
}

TEST(Generator, ManualSeedReseedsEveryDefaultAndTheOnesMadeLater) {
  Generator& cuda0 = default_generator(Device::cuda(0));
  cuda0.advance(7);
  default_generator().advance(5);
  manual_seed(1234);
  EXPECT_EQ(default_generator().state(), (GeneratorState{1234, 0}));
  EXPECT_EQ(cuda0.state(), (GeneratorState{1234, 0}));
  EXPECT_EQ(default_generator(Device::cuda(3)).state(), (GeneratorState{1234, 0}));  // made after the seed
  manual_seed(0);
  EXPECT_EQ(default_generator(Device::cuda(3)).seed(), 0u);
}

TEST(Generator, ARestoredStateDrawsTheSameNumbersAgain) {
  Generator gen(99);
  gen.advance(3);
  const GeneratorState saved = gen.state();
  EXPECT_EQ(saved, (GeneratorState{99, 3}));
  const std::vector<float> first = rand({100}, gen).to_vector<float>();
  EXPECT_EQ(gen.offset(), 103u);
  gen.set_state(saved);
  EXPECT_EQ(rand({100}, gen).to_vector<float>(), first);
  Generator other;
  other.set_state(saved);
  EXPECT_EQ(rand({100}, other).to_vector<float>(), first);
}

}  // namespace
}  // namespace demi
