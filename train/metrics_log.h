// metrics.jsonl: one JSON object a line. "step" records every few steps (loss, the mean loss since
// the last record, lr, loss scale, skipped steps, grad norm, speed), "nonfinite" records for steps
// with an inf/NaN loss, and "epoch" records (test accuracy and the gradients' underflow per layer).
// Only rank 0 writes; on the other ranks the log takes records and writes nothing.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor/tensor.h"
#include "train/config.h"

namespace demi::train {

// A "step" record, before the log adds its running mean.
struct StepEntry {
  int64_t step = 0;
  int epoch = 0;
  double loss = 0.0;
  bool finite = true;  // false: the update was skipped; the loss is left out of the means
  double lr = 0.0;
  double loss_scale = 1.0;
  int64_t skipped_steps = 0;
  double grad_norm = 0.0;
  double images_per_s = 0.0;
  double step_ms = 0.0;
};

// An "epoch" record.
struct EpochEntry {
  int epoch = 0;
  int64_t step = 0;
  double train_loss = 0.0;                  // mean of the epoch's finite losses
  double test_accuracy = 0.0;               // without test-time augmentation
  std::optional<double> test_accuracy_tta;  // the final epoch's, with --tta
  double lr = 0.0;
  double loss_scale = 1.0;
  int64_t skipped_steps = 0;
  double images_per_s = 0.0;
  double epoch_time_s = 0.0;
  nlohmann::json grad_underflow;  // UnderflowProbe::last()
};

// Steps between step records: --log-every, else about 100 records a run (so that a short first
// run still draws curves in report.html), at most every 50 steps.
int64_t log_every(const TrainerConfig& c, int64_t total_steps);

class MetricsLog {
 public:
  // write (rank 0): creates out_dir and opens out_dir/metrics.jsonl, empty for a new run; for a
  // run resumed at `resumed_step`, keeps the records up to that step (a run killed between
  // checkpoints logged steps that will be trained again) and appends.
  MetricsLog(const std::string& out_dir, bool write, std::optional<int64_t> resumed_step, int64_t every);

  // Adds a finite loss to the running mean; writes the record when e.step is a multiple of every().
  void step(const StepEntry& e);
  // A step whose loss was inf/NaN (batch: its index in the epoch, from 0).
  void nonfinite(int64_t step, int epoch, int64_t batch);
  void epoch(const EpochEntry& e);
  int64_t every() const { return every_; }

 private:
  void write(const nlohmann::json& record);

  std::ofstream file_;
  bool write_;
  int64_t every_;
  double loss_since_record_ = 0.0;  // for loss_mean: one step's loss is noisy
  int64_t steps_since_record_ = 0;
};

// On resume: drops the records of `path` after `step`, and a torn last line, so that the log holds
// each step once.
void keep_records_up_to(const std::string& path, int64_t step);

// The epoch record's "grad_underflow": for each parameter, the fractions of its gradient's
// elements that are exactly zero, subnormal or inf/NaN in the half format (measured before
// unscaling, where they went through it), on the steps it is armed for.
class UnderflowProbe {
 public:
  UnderflowProbe(std::vector<std::pair<std::string, Tensor>> named_parameters, DType format, bool enabled);
  void arm(bool on) { armed_ = on; }  // measure at the next capture()
  bool armed() const { return enabled_ && armed_; }
  void capture();                     // TrainStep's gradient probe
  const nlohmann::json& last() const { return last_; }  // null until a capture

 private:
  std::vector<std::pair<std::string, Tensor>> named_;
  DType format_;
  bool enabled_;
  bool armed_ = false;
  nlohmann::json last_;
};

}  // namespace demi::train
