// metrics.jsonl as the log writes it: step records every few steps with the mean of the finite
// losses since the last one, non-finite and epoch records, the default record interval, the
// records a resumed run keeps, and the gradient-underflow probe's fractions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "support/temp_dir.h"
#include "support/trainer_run.h"
#include "train/metrics_log.h"

namespace demi {
namespace {

train::StepEntry entry(int64_t step, double loss, bool finite = true) {
  train::StepEntry e;
  e.step = step;
  e.loss = loss;
  e.finite = finite;
  return e;
}

TEST(MetricsLog, StepRecordsCarryTheMeanOfTheFiniteLossesSinceTheLastOne) {
  const test::TempDir tmp("demi_metrics_");
  {
    train::MetricsLog log(tmp.path.string(), true, std::nullopt, 3);
    log.step(entry(1, 1.0));
    log.step(entry(2, 1e9, /*finite=*/false));
    log.nonfinite(2, 0, 1);
    log.step(entry(3, 3.0));
    log.step(entry(4, 5.0));
    train::EpochEntry epoch;
    epoch.step = 4;
    epoch.test_accuracy_tta = 0.5;
    log.epoch(epoch);
  }
  const auto records = test::read_jsonl((tmp.path / "metrics.jsonl").string());
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].at("type"), "nonfinite");
  EXPECT_EQ(records[0].at("batch"), 1);
  EXPECT_EQ(records[1].at("type"), "step");
  EXPECT_EQ(records[1].at("step"), 3);
  EXPECT_EQ(records[1].at("loss"), 3.0);
  EXPECT_EQ(records[1].at("loss_mean"), 2.0);  // (1 + 3) / 2: the inf/NaN step left out
  for (const char* key : {"lr", "loss_scale", "skipped_steps", "grad_norm", "images_per_s", "step_ms", "epoch"}) {
    EXPECT_TRUE(records[1].contains(key)) << key;
  }
  EXPECT_EQ(records[2].at("type"), "epoch");
  EXPECT_EQ(records[2].at("test_accuracy_tta"), 0.5);
  EXPECT_TRUE(records[2].contains("grad_underflow"));
}

TEST(MetricsLog, AResumedRunKeepsTheRecordsUpToItsCheckpointAndAppends) {
  const test::TempDir tmp("demi_metrics_resume_");
  const std::string path = (tmp.path / "metrics.jsonl").string();
  std::ofstream(path) << "{\"type\":\"step\",\"step\":1}\n{\"type\":\"step\",\"step\":2}\n"
                         "{\"type\":\"step\",\"step\":3}\n{\"type\":\"st";  // killed mid-line
  {
    train::MetricsLog log(tmp.path.string(), true, int64_t{2}, 1);
    log.step(entry(3, 1.0));
  }
  const auto records = test::read_jsonl(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[2].at("step"), 3);
  EXPECT_EQ(records[2].at("loss"), 1.0);
}

TEST(MetricsLog, OtherRanksWriteNothing) {
  const test::TempDir tmp("demi_metrics_rank_");
  train::MetricsLog log((tmp.path / "sub").string(), false, std::nullopt, 1);
  log.step(entry(1, 1.0));
  EXPECT_FALSE(std::filesystem::exists(tmp.path / "sub"));
}

TEST(MetricsLog, AboutAHundredRecordsARunByDefault) {
  train::TrainerConfig c;
  EXPECT_EQ(train::log_every(c, 2), 1);
  EXPECT_EQ(train::log_every(c, 3900), 39);
  EXPECT_EQ(train::log_every(c, 100000), 50);
  c.log_every = 7;
  EXPECT_EQ(train::log_every(c, 100000), 7);
}

TEST(UnderflowProbe, FractionsOfZeroSubnormalAndNonFiniteGradientsOnArmedSteps) {
  Tensor w = zeros({4}).requires_grad_();
  (w * tensor(std::vector<float>{0.0f, 1e-6f, 1.0f, INFINITY}, {4})).sum().backward();
  train::UnderflowProbe probe({{"w", w}}, DType::F16, /*enabled=*/true);
  probe.capture();
  EXPECT_TRUE(probe.last().is_null()) << "not armed";
  probe.arm(true);
  probe.capture();
  EXPECT_EQ(probe.last().at("w").at("zero"), 0.25);
  EXPECT_EQ(probe.last().at("w").at("subnormal"), 0.25);  // 1e-6 is below fp16's smallest normal
  EXPECT_EQ(probe.last().at("w").at("inf"), 0.25);
}

}  // namespace
}  // namespace demi
