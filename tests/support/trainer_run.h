// Runs train_cifar's Trainer in-process and reads back what it logged, for the trainer and
// convergence tests.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace demi::test {

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

struct TrainerRun {
  double accuracy = 0.0;             // final test accuracy in [0, 1]
  std::vector<int64_t> steps;        // of the step records (every config.log_every steps)
  std::vector<double> loss;          // that step's loss
  std::vector<double> loss_mean;     // mean loss since the previous record
  int64_t skipped_steps = 0;         // by the GradScaler, at the last record
  std::vector<nlohmann::json> records;  // all of metrics.jsonl
};

// Parses what a finished run left in out_dir (metrics.jsonl; the accuracy from summary.json).
inline TrainerRun train_and_read_only(const std::string& out_dir) {
  TrainerRun run;
  std::ifstream summary(out_dir + "/summary.json");
  if (summary.good()) run.accuracy = nlohmann::json::parse(summary).at("final_test_accuracy").get<double>();
  run.records = read_jsonl(out_dir + "/metrics.jsonl");
  for (const auto& r : run.records) {
    run.skipped_steps = r.at("skipped_steps").get<int64_t>();
    if (r.at("type") != "step") continue;
    run.steps.push_back(r.at("step").get<int64_t>());
    run.loss.push_back(r.at("loss").get<double>());
    run.loss_mean.push_back(r.at("loss_mean").get<double>());
  }
  return run;
}

// Trains as configured (config.out_dir must be set) and parses out_dir/metrics.jsonl.
inline TrainerRun train_and_read(const train::TrainerConfig& config) {
  const double accuracy = train::run_training(config);
  TrainerRun run = train_and_read_only(config.out_dir);
  run.accuracy = accuracy;
  return run;
}

}  // namespace demi::test
