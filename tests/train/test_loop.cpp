// The fit loop on synthetic images (no CIFAR-10): a run writes its metrics, summary, report and
// checkpoint and prints its lines; a run stopped by --max-steps inside an epoch and resumed ends
// bit for bit where the uninterrupted run ends, logging each step once; the non-finite guard stops
// a run after --max-nonfinite-steps bad steps in a row; --checkpoint-activations and --channels-last
// train the same weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "framework/serialize/safetensors.h"
#include "support/error_of.h"
#include "support/temp_dir.h"
#include "support/trainer_run.h"
#include "train/loop.h"
#include "train/trainer.h"

namespace demi {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

// n random 32x32 RGB images, labels cycling over 10 classes.
data::Dataset random_images(int64_t n, uint64_t seed) {
  data::Dataset d;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(i % 10);
  d.labels = tensor(labels, {n});
  Generator gen(seed);
  d.images = (rand({n, 3, 32, 32}, gen) * 255.0).to(DType::U8);
  for (int64_t k = 0; k < 10; ++k) d.classes.push_back("class" + std::to_string(k));
  return d;
}

// 2 epochs of 4 steps (batch 16 of 64 images), a step record each step.
train::TrainerConfig small_run(const fs::path& out) {
  train::TrainerConfig c;
  c.epochs = 2;
  c.batch_size = 16;
  c.log_every = 1;
  c.seed = 2;
  c.out_dir = out.string();
  return c;
}

// Trains `c` on the synthetic images; returns what it printed.
std::string train_synthetic(const train::TrainerConfig& c) {
  std::ostringstream printed;
  train::Environment env;
  env.out = &printed;
  train::TrainingData data = train::make_training_data(c, env, random_images(64, 1), random_images(40, 2));
  train::run_training(c, env, data);
  return printed.str();
}

TEST(FitLoop, ARunWritesItsRecordsAndPrintsItsLines) {
  const test::TempDir tmp("demi_loop_run_");
  const std::string printed = train_synthetic(small_run(tmp.path));
  EXPECT_THAT(printed, HasSubstr("SmallCNN fp32 on cpu"));
  EXPECT_THAT(printed, HasSubstr(", 2 epochs of 4 steps, batch 16\n"));
  EXPECT_THAT(printed, HasSubstr("epoch 1: test accuracy "));
  EXPECT_THAT(printed, HasSubstr("epoch 2: test accuracy "));
  EXPECT_THAT(printed, HasSubstr("final test accuracy     "));
  EXPECT_THAT(printed, HasSubstr("outputs in " + tmp.path.string()));

  const auto records = test::read_jsonl((tmp.path / "metrics.jsonl").string());
  ASSERT_EQ(records.size(), 10u);  // 8 steps and 2 epochs
  EXPECT_EQ(records[0].at("type"), "step");
  EXPECT_EQ(records[0].at("step"), 1);
  EXPECT_EQ(records[4].at("type"), "epoch");
  EXPECT_EQ(records[4].at("step"), 4);
  EXPECT_TRUE(records[4].at("grad_underflow").contains("fc.weight"));
  for (const char* file : {"summary.json", "report.html", "state.json", "model.safetensors"}) {
    EXPECT_TRUE(fs::exists(tmp.path / file)) << file;
  }
}

TEST(FitLoop, StoppingInsideAnEpochAndResumingReproducesTheUninterruptedRun) {
  const test::TempDir whole("demi_loop_whole_"), stopped("demi_loop_stopped_");
  train_synthetic(small_run(whole.path));
  train::TrainerConfig c = small_run(stopped.path);
  c.max_steps = 6;  // inside the second epoch
  EXPECT_THAT(train_synthetic(c), HasSubstr("stopping after step 6 (epoch 2, batch 2); --resume"));
  c.max_steps = 0;
  c.resume_dir = c.out_dir;
  EXPECT_THAT(train_synthetic(c), HasSubstr("resumed from " + c.out_dir + " after epoch 1 (step 6)"));

  const auto a = load_safetensors((whole.path / "model.safetensors").string());
  const auto b = load_safetensors((stopped.path / "model.safetensors").string());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_EQ(t.to_vector<float>(), b.at(name).to_vector<float>()) << name;
  const test::TrainerRun ra = test::train_and_read_only(whole.path.string());
  const test::TrainerRun rb = test::train_and_read_only(stopped.path.string());
  EXPECT_EQ(ra.steps, rb.steps) << "each step logged once";
  EXPECT_EQ(ra.loss, rb.loss);
  EXPECT_EQ(ra.accuracy, rb.accuracy);
}

// --checkpoint-activations with bf16 autocast and two micro-batches: the weights of the plain run.
TEST(FitLoop, CheckpointedActivationsTrainTheSameWeights) {
  const test::TempDir plain("demi_loop_plain_"), checkpointed("demi_loop_checkpointed_");
  train::TrainerConfig c = small_run(plain.path);
  c.epochs = 1;
  c.precision = train::Precision::Bf16;
  c.accum = 2;
  train_synthetic(c);
  c.out_dir = checkpointed.path.string();
  c.checkpoint_activations = true;
  train_synthetic(c);
  const auto a = load_safetensors((plain.path / "model.safetensors").string());
  const auto b = load_safetensors((checkpointed.path / "model.safetensors").string());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_EQ(t.to_vector<double>(), b.at(name).to_vector<double>()) << name;
}

// --channels-last (weights and images NHWC) in fp16 with the GradScaler: the plain run's weights,
// saved in the shape's order.
TEST(FitLoop, ChannelsLastTrainsTheSameWeights) {
  const test::TempDir plain("demi_loop_plain_"), channels_last("demi_loop_channels_last_");
  train::TrainerConfig c = small_run(plain.path);
  c.epochs = 1;
  c.precision = train::Precision::Fp16;
  train_synthetic(c);
  c.out_dir = channels_last.path.string();
  c.channels_last = true;
  EXPECT_THAT(train_synthetic(c), HasSubstr("fp16 channels_last on cpu"));
  const auto wa = load_safetensors((plain.path / "model.safetensors").string());
  const auto wb = load_safetensors((channels_last.path / "model.safetensors").string());
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, t] : wa) EXPECT_EQ(t.to_vector<double>(), wb.at(name).to_vector<double>()) << name;
}

// The steps between logging steps make no host read: the loop reads their results in one go at the
// next logging step. A run of 9 steps logging every 9th reads exactly as often as one of 3 steps
// logging every 3rd (one read of the results, the scaler's state, the checkpoint at the stop).
TEST(FitLoop, StepsBetweenLoggingStepsMakeNoHostRead) {
  auto reads_of = [](int64_t steps) {
    const test::TempDir tmp("demi_loop_reads_");
    train::TrainerConfig c = small_run(tmp.path);
    c.epochs = 1;
    c.max_steps = steps;
    c.log_every = steps;
    std::ostringstream printed;
    train::Environment env;
    env.out = &printed;
    train::TrainingData data = train::make_training_data(c, env, random_images(160, 1), random_images(40, 2));
    const int64_t before = host_reads();
    train::run_training(c, env, data);
    return host_reads() - before;
  };
  const int64_t three = reads_of(3), nine = reads_of(9);
  EXPECT_GT(three, 0);
  EXPECT_EQ(nine, three) << "6 more steps between the logging steps read " << nine - three << " times more";
}

TEST(NonFiniteGuard, StopsAfterTheGivenNumberInARowAndNamesTheBatch) {
  train::NonFiniteGuard guard(3, "runs/x");
  guard.after_step(true, 0, 1);
  guard.after_step(true, 0, 2);
  guard.after_step(false, 0, 3);  // a finite loss starts the count again
  guard.after_step(true, 0, 4);
  guard.after_step(true, 1, 1);
  const std::string e = test::error_of([&] { guard.after_step(true, 1, 2); });
  EXPECT_THAT(e, HasSubstr("stopping: 3 steps in a row had a non-finite loss (the last: epoch 2, batch 2)"));
  EXPECT_THAT(e, HasSubstr("the checkpoint in 'runs/x' is untouched: fix the cause and --resume runs/x"));
  EXPECT_EQ(guard.total(), 5);
}

}  // namespace
}  // namespace demi
