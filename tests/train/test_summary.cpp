// summary.json keeps its keys and spells the run's options as the command line does.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "support/temp_dir.h"
#include "train/summary.h"

namespace demi {
namespace {

TEST(Summary, KeysAndNamesAsTheCommandLineSpellsThem) {
  const test::TempDir tmp("demi_summary_");
  train::TrainerConfig c;
  c.precision = train::Precision::Bf16;
  c.recipe = train::Recipe::AirbenchMuon;
  c.model = train::ModelKind::AirNet;
  c.rounding = optim::Rounding::Stochastic;
  c.tta = 2;
  c.out_dir = tmp.path.string();
  train::RunSummary s;
  s.epochs = 8;
  s.accuracy = 0.94;
  s.plain_accuracy = 0.93;
  s.nonfinite_steps = 2;
  train::write_summary(c, Device::cpu(), s);
  std::ifstream in(tmp.path / "summary.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  std::set<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.insert(key);
  EXPECT_EQ(keys, (std::set<std::string>{"model", "precision", "half_params", "master_weights", "rounding", "device",
                                         "cpu_isa", "cpu_bf16_route", "epochs", "time_s", "images_per_s", "recipe",
                                         "final_test_accuracy", "final_test_accuracy_without_tta", "tta",
                                         "best_test_accuracy", "steps_skipped", "nonfinite_loss_steps",
                                         "final_loss_scale", "peak_memory_bytes"}));
  EXPECT_EQ(j.at("model"), "AirNet");
  EXPECT_EQ(j.at("precision"), "bf16");
  EXPECT_EQ(j.at("recipe"), "airbench-muon");
  EXPECT_EQ(j.at("rounding"), "stochastic");
  EXPECT_EQ(j.at("master_weights"), "fp32");
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_EQ(j.at("final_test_accuracy"), 0.94);
  EXPECT_EQ(j.at("final_test_accuracy_without_tta"), 0.93);
  EXPECT_EQ(j.at("nonfinite_loss_steps"), 2);
  EXPECT_TRUE(j.at("peak_memory_bytes").contains("saved activations"));
}

}  // namespace
}  // namespace demi
