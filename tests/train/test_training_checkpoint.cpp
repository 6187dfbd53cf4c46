// The save/restore pair of a training run, without CIFAR-10: what save_training writes (the keys
// of state.json and optimizer.safetensors, as earlier releases wrote them) restore_training reads
// back into fresh components bit for bit; checkpoints of another run are refused; a checkpoint
// written before a field existed still restores; malformed training fields are errors naming the
// file, and a checkpoint with them falls back to the previous one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "framework/serialize/safetensors.h"
#include "support/error_of.h"
#include "support/temp_dir.h"
#include "train/checkpoint.h"
#include "train/training_checkpoint.h"

namespace demi {
namespace {

using testing::HasSubstr;

// A fp16 SmallCNN run with lookahead and one-cycle, writing into `out`.
train::TrainerConfig small_run(const std::string& out) {
  train::TrainerConfig c;
  c.precision = train::Precision::Fp16;
  c.lookahead = true;
  c.seed = 4;
  c.out_dir = out;
  return c;
}

train::Components components(const train::TrainerConfig& c) {
  train::Environment env;
  env.dtype = train::compute_dtype(c.precision);
  return train::make_components(c, env, nullptr, {2, 20});  // lookahead starts at step 10 (epoch 3)
}

// `steps` steps on random images, with lookahead's updates as the loop takes them.
void train_steps(const train::TrainerConfig& c, train::Components& parts, int steps) {
  training::TrainStep::Options o{Device::Kind::CPU, train::compute_dtype(c.precision), 0.0, 1};
  training::TrainStep step(*parts.optimizer, *parts.scaler, o, parts.schedule.get());
  Generator gen(9);
  for (int i = 1; i <= steps; ++i) {
    const Tensor x = randn({8, 3, 32, 32}, gen);
    const Tensor y = tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
    step.run([&](int) { return cross_entropy((*parts.model)(x), y); });
    if (auto decay = train::lookahead_decay(i, parts.steps)) parts.lookahead->update(*decay);
  }
}

void expect_same(const StateDict& a, const StateDict& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [key, t] : a) {
    ASSERT_TRUE(b.count(key)) << what << ": " << key;
    EXPECT_EQ(t.to_vector<float>(), b.at(key).to_vector<float>()) << what << ": " << key;
  }
}

void expect_progress(const train::Progress& got, const train::Progress& want) {
  EXPECT_EQ(got.epochs_done, want.epochs_done);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.batches_done_in_epoch, want.batches_done_in_epoch);
  EXPECT_EQ(got.best_accuracy, want.best_accuracy);
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(TrainingCheckpoint, RestoreReadsBackEverythingSaveWrote) {
  const test::TempDir tmp("demi_training_ckpt_");
  const train::TrainerConfig c = small_run(tmp.path.string());
  train::Components trained = components(c);
  train_steps(c, trained, 16);  // past lookahead's start (step 10) and its first pull (step 15)
  const train::Progress progress{8, 16, 0, 0.25};
  train::save_training(c, trained, progress);

  train::Components fresh = components(c);
  expect_progress(train::restore_training(c.out_dir, c, fresh), progress);
  expect_same(trained.model->state_dict(), fresh.model->state_dict(), "model");
  expect_same(trained.optimizer->state_dict(), fresh.optimizer->state_dict(), "optimizer");
  expect_same(trained.lookahead->state_dict(), fresh.lookahead->state_dict(), "lookahead");
  EXPECT_EQ(trained.scaler->state_dict(), fresh.scaler->state_dict());
  EXPECT_EQ(fresh.optimizer->lr(0), trained.optimizer->lr(0)) << "the schedule stepped to the checkpoint's step";

  // --eval-only's restore: the weights alone.
  auto model = train::make_model(c, Device::cpu(), nullptr);
  EXPECT_EQ(train::restore_weights(c.out_dir, c, *model).step, 16);
  expect_same(trained.model->state_dict(), model->state_dict(), "weights");
}

// The format is what runs already on disk hold: these keys and nothing else.
TEST(TrainingCheckpoint, StateJsonAndOptimizerFileKeepTheirKeys) {
  const test::TempDir tmp("demi_training_ckpt_keys_");
  const train::TrainerConfig c = small_run(tmp.path.string());
  train::Components parts = components(c);
  train_steps(c, parts, 1);
  train::save_training(c, parts, {2, 20, 0, 0.5});
  const nlohmann::json state = read_json(tmp.path / "state.json");
  std::set<std::string> keys;
  for (const auto& [key, value] : state.items()) keys.insert(key);
  EXPECT_EQ(keys, (std::set<std::string>{"model", "precision", "recipe", "epochs_done", "step", "batches_done_in_epoch",
                                         "best_accuracy", "seed", "scaler", "lr", "checkpoint"}));
  EXPECT_EQ(state.at("model"), "SmallCNN");
  EXPECT_EQ(state.at("precision"), "fp16");
  EXPECT_EQ(state.at("recipe"), "standard");
  EXPECT_EQ(state.at("epochs_done"), 2);
  EXPECT_EQ(state.at("step"), 20);
  EXPECT_EQ(state.at("seed"), 4);
  EXPECT_EQ(state.at("scaler").at("scale"), parts.scaler->get_scale());
  const StateDict optimizer =
      load_safetensors((tmp.path / state.at("checkpoint").at("dir").get<std::string>() / "optimizer.safetensors").string());
  size_t lookahead_keys = 0;
  for (const auto& [key, t] : optimizer) lookahead_keys += key.rfind("lookahead.", 0) == 0;
  EXPECT_EQ(lookahead_keys, parts.lookahead->state_dict().size());
  EXPECT_GT(optimizer.size(), lookahead_keys);
}

TEST(TrainingCheckpoint, ACheckpointWrittenBeforeRecipesAndMidEpochStopsStillRestores) {
  const test::TempDir tmp("demi_training_ckpt_old_");
  train::TrainerConfig c = small_run(tmp.path.string());
  c.lookahead = false;
  train::Components parts = components(c);
  train_steps(c, parts, 2);
  train::Checkpoint old;  // the fields of the first checkpoint format, no recipe, counters or accuracy
  old.model = parts.model->state_dict();
  old.optimizer = parts.optimizer->state_dict();
  old.state = {{"model", "SmallCNN"}, {"precision", "fp16"}, {"epochs_done", 1}, {"step", 2},
               {"scaler", parts.scaler->state_dict()}};
  train::save_checkpoint(c.out_dir, 2, old);
  train::Components fresh = components(c);
  expect_progress(train::restore_training(c.out_dir, c, fresh), {1, 2, 0, 0.0});  // absent fields: 0
  expect_same(parts.model->state_dict(), fresh.model->state_dict(), "model");
}

TEST(TrainingCheckpoint, ACheckpointOfAnotherRunIsRefusedWithWhatToPass) {
  const test::TempDir tmp("demi_training_ckpt_other_");
  const train::TrainerConfig c = small_run(tmp.path.string());
  train::Components parts = components(c);
  train::save_training(c, parts, {1, 10, 0, 0.0});

  train::TrainerConfig bf16 = c;
  bf16.precision = train::Precision::Bf16;
  train::Components other = components(bf16);
  EXPECT_THAT(test::error_of([&] { train::restore_training(c.out_dir, bf16, other); }),
              HasSubstr("the checkpoint is SmallCNN/fp16 (recipe standard) but this run is SmallCNN/bf16 (recipe "
                        "standard); pass the same --model, --precision and --recipe"));
  train::TrainerConfig plain = c;
  plain.lookahead = false;
  train::Components no_lookahead = components(plain);
  EXPECT_THAT(test::error_of([&] { train::restore_training(c.out_dir, plain, no_lookahead); }),
              HasSubstr("the checkpoint was written with --lookahead"));
}

TEST(TrainingCheckpoint, MalformedTrainingFieldsAreErrorsNamingTheFile) {
  const auto parse_error = [](const std::string& text) {
    return test::error_of([&] { train::parse_training_state(train::parse_checkpoint_state(text, "x/state.json"), "x/state.json"); });
  };
  EXPECT_THAT(parse_error(R"({"model": "m", "precision": "fp32", "epochs_done": 0})"), HasSubstr("x/state.json: missing \"step\""));
  EXPECT_THAT(parse_error(R"({"model": "m", "precision": "fp32", "epochs_done": "0", "step": 1})"),
              HasSubstr("\"epochs_done\" must be an integer, got \"0\""));
  EXPECT_THAT(parse_error(R"({"model": "m", "precision": "fp32", "epochs_done": 1.4e33, "step": 1})"),
              HasSubstr("\"epochs_done\" must be an integer"));  // found by the fuzzer: UB in get<int>
  EXPECT_THAT(parse_error(R"({"model": "m", "precision": "fp32", "epochs_done": 0, "step": -1})"),
              HasSubstr("\"step\" is negative"));
  EXPECT_THAT(parse_error(R"({"model": "m", "precision": "fp32", "epochs_done": 0, "step": 1, "scaler": {"scale": "x"}})"),
              HasSubstr("\"scale\" must be a number"));
  EXPECT_THAT(parse_error(R"({"model": "m", "precision": "fp32", "epochs_done": 0, "step": 1, "recipe": 3})"),
              HasSubstr("\"recipe\" has the wrong type"));
  EXPECT_EQ(parse_error(R"({"model": "m", "precision": "fp32", "epochs_done": 0, "step": 1})"), "(no error)");
}

TEST(TrainingCheckpoint, ACommitRecordWithBadTrainingFieldsFallsBackToTheStepDirectory) {
  const test::TempDir tmp("demi_training_ckpt_fallback_");
  const train::TrainerConfig c = small_run(tmp.path.string());
  train::Components parts = components(c);
  train::save_training(c, parts, {1, 10, 0, 0.0});
  nlohmann::json state = read_json(tmp.path / "state.json");
  state["step"] = "ten";  // a hand edit
  std::ofstream(tmp.path / "state.json") << state.dump();
  std::vector<std::string> warnings;
  set_warning_handler([&](const std::string& w) { warnings.push_back(w); });
  train::Components fresh = components(c);
  const std::string error = test::error_of([&] { train::restore_training(c.out_dir, c, fresh); });
  set_warning_handler(nullptr);
  EXPECT_EQ(error, "(no error)");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("\"step\" must be an integer"));
}

}  // namespace
}  // namespace demi
