// Determinism of the main job: two fp32 CPU runs with the same seed and thread count log identical
// losses at every step, and a run stopped mid-epoch (as by Ctrl-C) and resumed logs exactly the
// losses of the run that never stopped. Anything that reads uninitialised memory, races, or
// forgets a piece of state in the checkpoint (RNG, data order, momentum, schedule) breaks this.
#include <gtest/gtest.h>

#include <string>

#include "support/real_data.h"
#include "support/temp_dir.h"
#include "support/trainer_run.h"

namespace demi {
namespace {

train::TrainerConfig small_run(const std::string& out_dir) {
  train::TrainerConfig c;
  c.data_dir = test::real_data_dir();
  c.precision = train::Precision::Fp32;
  c.epochs = 2;
  c.batch_size = 128;
  c.train_subset = 2560;  // 20 steps per epoch
  c.test_subset = 500;
  c.seed = 3;
  c.threads = 2;
  c.log_every = 1;
  c.out_dir = out_dir;
  return c;
}

TEST(Determinism, SameSeedSameThreadsGivesIdenticalLossesAndResumeReproducesThem) {
  DEMI_REQUIRE_REAL_DATA();
  const test::TempDir a("demi_det_a_"), b("demi_det_b_"), c("demi_det_c_");
  const test::TrainerRun first = test::train_and_read(small_run(a.path.string()));
  const test::TrainerRun second = test::train_and_read(small_run(b.path.string()));
  ASSERT_EQ(first.steps.size(), 40u);
  EXPECT_EQ(first.loss, second.loss) << "same seed and threads must give bit-identical losses";
  EXPECT_EQ(first.accuracy, second.accuracy);

  train::TrainerConfig stopped = small_run(c.path.string());
  stopped.max_steps = 27;  // inside the second epoch
  test::train_and_read(stopped);
  train::TrainerConfig resumed = small_run(c.path.string());
  resumed.resume_dir = c.path.string();
  const test::TrainerRun continued = test::train_and_read(resumed);  // metrics.jsonl holds both parts
  EXPECT_EQ(continued.steps, first.steps);
  EXPECT_EQ(continued.loss, first.loss) << "resume must continue exactly where the run stopped";
  EXPECT_EQ(continued.accuracy, first.accuracy);
}

}  // namespace
}  // namespace demi
