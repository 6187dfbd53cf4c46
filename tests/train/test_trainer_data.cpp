// train_cifar's Trainer end to end on a small slice of the real CIFAR-10: every output exists and
// parses, and --resume continues from the checkpoint. Needs $DEMI_CIFAR10 (fails under CI=true
// when it is missing, skips otherwise).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/error_of.h"
#include "support/real_data.h"
#include "support/temp_dir.h"
#include "support/trainer_run.h"
#include "train/recipe.h"
#include "framework/serialize/safetensors.h"
#include "train/trainer.h"

namespace demi {
namespace {

namespace fs = std::filesystem;

TEST(TrainerData, OneEpochWritesMetricsSummaryAndACheckpointThatResumes) {
  DEMI_REQUIRE_REAL_DATA();
  const std::string data = test::real_data_dir();
  const test::TempDir tmp("demi_test_trainer_");
  const fs::path& out = tmp.path;
  train::TrainerConfig c;
  c.data_dir = data;
  c.precision = train::Precision::Fp16;
  c.epochs = 1;
  c.batch_size = 64;
  c.train_subset = 640;
  c.test_subset = 200;
  c.log_every = 5;
  c.out_dir = out.string();
  const double accuracy = train::run_training(c);
  EXPECT_GT(accuracy, 0.0);

  const auto records = test::read_jsonl((out / "metrics.jsonl").string());
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.front().at("type"), "step");
  EXPECT_EQ(records.front().at("step"), 5);
  EXPECT_GT(records.front().at("grad_norm").get<double>(), 0.0);
  const auto& epoch = records.back();
  EXPECT_EQ(epoch.at("type"), "epoch");
  EXPECT_DOUBLE_EQ(epoch.at("test_accuracy").get<double>(), accuracy);
  EXPECT_TRUE(epoch.at("grad_underflow").contains("fc.weight"));
  EXPECT_TRUE(epoch.at("grad_underflow").at("fc.weight").contains("subnormal"));

  std::ifstream summary_file(out / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary.at("precision"), "fp16");
  EXPECT_EQ(summary.at("epochs"), 1);
  EXPECT_GT(summary.at("peak_memory_bytes").at("saved activations").get<double>(), 0.0);
  std::ifstream report_file(out / "report.html");
  const std::string report((std::istreambuf_iterator<char>(report_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(report.find("<svg"), std::string::npos);
  EXPECT_NE(report.find("fc.weight"), std::string::npos);  // a heat-map row per layer
  EXPECT_EQ(report.find("<script"), std::string::npos);    // self-contained: no scripts, no fetches
  const auto weights = load_safetensors((out / "model.safetensors").string());
  EXPECT_EQ(weights.at("fc.weight").shape(), (Shape{10, 128}));

  // Resume for a second epoch: continues at step 10 (640 / 64 per epoch) and appends to the log.
  c.epochs = 2;
  c.resume_dir = out.string();
  train::run_training(c);
  const auto resumed = test::read_jsonl((out / "metrics.jsonl").string());
  EXPECT_EQ(resumed.back().at("epoch"), 1);
  EXPECT_EQ(resumed.back().at("step"), 20);
}

// Trains `c` (one epoch) in one go into `a`, and into `b` stopped after `stop_step` steps (as
// Ctrl-C does) then resumed: the final weights must be bit for bit the same.
void expect_stop_and_resume_reproduces(train::TrainerConfig c, const fs::path& a, const fs::path& b, int64_t stop_step) {
  c.out_dir = a.string();
  train::run_training(c);
  c.out_dir = b.string();
  c.max_steps = stop_step;
  train::run_training(c);
  std::ifstream state_file(b / "state.json");
  const auto state = nlohmann::json::parse(state_file);
  const int64_t per_epoch = c.train_subset / c.batch_size;  // every caller's subset is whole batches
  EXPECT_EQ(state.at("batches_done_in_epoch"), stop_step % per_epoch);
  EXPECT_EQ(state.at("epochs_done"), stop_step / per_epoch);
  c.max_steps = 0;
  c.resume_dir = b.string();
  train::run_training(c);
  const auto wa = load_safetensors((a / "model.safetensors").string());
  const auto wb = load_safetensors((b / "model.safetensors").string());
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, t] : wa) EXPECT_EQ(t.to_vector<float>(), wb.at(name).to_vector<float>()) << name;
}

TEST(TrainerData, StoppingMidEpochAndResumingReproducesTheUninterruptedRun) {
  DEMI_REQUIRE_REAL_DATA();
  const test::TempDir tmp_a("demi_test_trainer_a_"), tmp_b("demi_test_trainer_b_");
  train::TrainerConfig c;
  c.data_dir = test::real_data_dir();
  c.epochs = 1;
  c.batch_size = 64;
  c.train_subset = 640;
  c.test_subset = 100;
  expect_stop_and_resume_reproduces(c, tmp_a.path, tmp_b.path, 4);  // of 10 steps
}

TEST(TrainerData, AirbenchRecipeResumesExactlyWithItsLookaheadAverage) {
  // 4 epochs of 10 steps, stopped at step 37, after the lookahead average started at step 35 (epoch
  // 3): the resumed run must restore that average from the checkpoint (re-snapshotting it from the
  // weights would change step 40's) and end epoch 3 on it.
  DEMI_REQUIRE_REAL_DATA();
  const test::TempDir tmp_a("demi_test_airbench_a_"), tmp_b("demi_test_airbench_b_");
  const fs::path &a = tmp_a.path, &b = tmp_b.path;
  train::TrainerConfig c;
  c.data_dir = test::real_data_dir();
  c.recipe = train::Recipe::Airbench;
  c.epochs = 4;
  c.batch_size = 32;
  train::apply_recipe_defaults(c, [](const std::string& flag) { return flag == "--epochs" || flag == "--batch-size"; });
  EXPECT_EQ(c.model, train::ModelKind::AirNet);
  EXPECT_TRUE(c.lookahead);
  c.train_subset = 320;
  c.test_subset = 100;
  expect_stop_and_resume_reproduces(c, a, b, 37);  // of 40 steps

  // The final evaluation used test-time augmentation and says so beside the plain accuracy.
  std::ifstream summary_file(a / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary.at("recipe"), "airbench");
  EXPECT_EQ(summary.at("tta"), 2);
  EXPECT_TRUE(summary.contains("final_test_accuracy_without_tta"));
  EXPECT_TRUE(test::read_jsonl((a / "metrics.jsonl").string()).back().contains("test_accuracy_tta"));

  // A checkpoint of one recipe does not resume under another.
  train::TrainerConfig standard = c;
  standard.recipe = train::Recipe::Standard;
  standard.out_dir = standard.resume_dir = b.string();
  EXPECT_THAT(test::error_of([&] { train::run_training(standard); }), testing::HasSubstr("--recipe"));
}

TEST(TrainerData, AirbenchMuonResumesExactlyAndFreezesTheWhiteningBiasAfterThreeEpochs) {
  DEMI_REQUIRE_REAL_DATA();
  const test::TempDir tmp_a("demi_test_muon_a_"), tmp_b("demi_test_muon_b_"), tmp_c("demi_test_muon_c_");
  train::TrainerConfig c;
  c.data_dir = test::real_data_dir();
  c.recipe = train::Recipe::AirbenchMuon;
  c.epochs = 1;
  c.batch_size = 32;
  train::apply_recipe_defaults(c, [](const std::string& flag) { return flag == "--epochs" || flag == "--batch-size"; });
  EXPECT_EQ(c.optimizer, train::OptimizerKind::Muon);
  c.train_subset = 320;
  c.test_subset = 100;
  expect_stop_and_resume_reproduces(c, tmp_a.path, tmp_b.path, 4);  // of 10 steps: Muon's momentum restored

  // 4 epochs of 2 steps: the whitening bias moves in the first 3 epochs (6 steps) only.
  c.epochs = 4;
  c.train_subset = 64;
  c.test_subset = 20;
  c.out_dir = tmp_c.path.string();
  c.max_steps = 6;
  train::run_training(c);
  const auto after_three = load_safetensors((tmp_c.path / "model.safetensors").string());
  c.max_steps = 0;
  c.resume_dir = c.out_dir;
  train::run_training(c);
  const auto after_four = load_safetensors((tmp_c.path / "model.safetensors").string());
  EXPECT_EQ(after_three.at("whiten.bias").to_vector<float>(), after_four.at("whiten.bias").to_vector<float>());
  EXPECT_NE(after_three.at("fc.weight").to_vector<float>(), after_four.at("fc.weight").to_vector<float>());
}

TEST(TrainerData, EverySchedulePlansARunOfTwoSteps) {
  // The smallest run (2 steps): the linear schedule's warm-up point must not collapse onto its start.
  DEMI_REQUIRE_REAL_DATA();
  for (const std::string& schedule : train::names_of<train::ScheduleKind>()) {
    const test::TempDir tmp("demi_test_schedule_");
    train::TrainerConfig c;
    c.data_dir = test::real_data_dir();
    c.schedule = train::from_name<train::ScheduleKind>(schedule);
    c.epochs = 1;
    c.batch_size = 32;
    c.train_subset = 64;
    c.test_subset = 20;
    c.out_dir = tmp.path.string();
    EXPECT_EQ(test::error_of([&] { train::run_training(c); }), "(no error)") << schedule;
  }
}

TEST(TrainerData, ADivergingRunStopsWithAClearErrorAndKeepsTheCheckpoint) {
  DEMI_REQUIRE_REAL_DATA();
  const test::TempDir tmp("demi_test_trainer_diverge_");
  train::TrainerConfig c;
  c.data_dir = test::real_data_dir();
  c.epochs = 1;
  c.batch_size = 64;
  c.train_subset = 320;
  c.test_subset = 100;
  c.out_dir = tmp.path.string();
  train::run_training(c);  // a good checkpoint after epoch 1
  std::ifstream before_file(tmp.path / "state.json");
  const std::string before((std::istreambuf_iterator<char>(before_file)), std::istreambuf_iterator<char>());

  c.epochs = 3;
  c.lr = 1e30;  // garbage: the weights blow up and every loss after the first update is inf/NaN
  c.schedule = train::ScheduleKind::None;
  c.max_nonfinite_steps = 3;
  c.resume_dir = c.out_dir;
  const std::string e = test::error_of([&] { train::run_training(c); });
  EXPECT_THAT(e, ::testing::HasSubstr("3 steps in a row had a non-finite loss"));
  EXPECT_THAT(e, ::testing::HasSubstr("--resume " + c.out_dir));
  std::ifstream after_file(tmp.path / "state.json");
  const std::string after((std::istreambuf_iterator<char>(after_file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(after, before) << "a stopped, diverged run must not overwrite the last good checkpoint";
  size_t nonfinite_records = 0;
  for (const auto& r : test::read_jsonl((tmp.path / "metrics.jsonl").string())) nonfinite_records += r.at("type") == "nonfinite";
  EXPECT_EQ(nonfinite_records, 3u);
}

}  // namespace
}  // namespace demi
