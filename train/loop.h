// The fit loop: epochs of steps (training::TrainStep on each batch), an evaluation, a metrics record
// and a checkpoint after each epoch, and the rules that stop it: Ctrl-C, --max-steps, and too many
// non-finite losses in a row (NonFiniteGuard).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "train/components.h"
#include "train/config.h"
#include "train/console.h"
#include "train/environment.h"
#include "train/metrics_log.h"
#include "train/training_checkpoint.h"
#include "train/training_data.h"

namespace demi::train {

// Counts the steps whose loss was inf/NaN (their updates were skipped) and stops the run with an
// error naming the batch once --max-nonfinite-steps of them come in a row: poisoned data or a
// diverged run does not recover by itself, and the last good checkpoint must stay untouched.
class NonFiniteGuard {
 public:
  NonFiniteGuard(int max_in_a_row, std::string out_dir) : max_in_a_row_(max_in_a_row), out_dir_(std::move(out_dir)) {}
  // After every step; epoch from 0, batch: batches done in the epoch. Throws demi::Error.
  void after_step(bool non_finite_loss, int epoch, int64_t batch);
  int64_t total() const { return total_; }

 private:
  int max_in_a_row_;
  std::string out_dir_;
  int in_a_row_ = 0;
  int64_t total_ = 0;
};

// How the loop ended.
struct FitResult {
  double accuracy = 0.0;        // the last evaluation's, with test-time augmentation after the final epoch
  double plain_accuracy = 0.0;  // without
  int64_t images_seen = 0;      // trained, over all ranks
  int64_t nonfinite_steps = 0;
  double time_s = 0.0;
};

// Trains from `progress` (a fresh run or a restored checkpoint) to c.epochs or until stopped,
// checkpointing after every epoch and when stopped inside one; progress follows the run.
FitResult fit(const TrainerConfig& c, const Environment& env, TrainingData& data, Components& parts,
              Progress& progress, MetricsLog& log, Console& console);

}  // namespace demi::train
