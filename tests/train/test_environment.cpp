// The environment of a single-process run: its dtype from --precision, rank 0 of 1, printing to
// std::cout; and the Ctrl-C flag starts cleared.
#include <gtest/gtest.h>

#include <iostream>

#include "train/environment.h"

namespace demi {
namespace {

TEST(Environment, OneProcessIsRankZeroOfOneAndPrints) {
  train::TrainerConfig c;
  c.precision = train::Precision::Bf16;
  const train::Environment env = train::make_environment(c);
  EXPECT_EQ(env.dtype, DType::BF16);
  EXPECT_EQ(env.device, Device::cpu());
  EXPECT_EQ(env.group, nullptr);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world, 1);
  EXPECT_TRUE(env.main_rank());
  EXPECT_EQ(env.out, &std::cout);
  EXPECT_FALSE(train::g_stop_requested.load());
}

}  // namespace
}  // namespace demi
