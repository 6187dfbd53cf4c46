// A training run's checkpoint: the one place that knows its keys. save_training writes what
// restore_training reads: the model, the optimizer (with lookahead's averages under "lookahead."),
// and state.json's training fields (what the run is, where it stands, the GradScaler). The
// crash-safe files themselves are checkpoint.h's.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "framework/nn/module.h"
#include "train/components.h"
#include "train/config.h"

namespace demi::train {

// Where a run stands: what a checkpoint resumes.
struct Progress {
  int epochs_done = 0;
  int64_t step = 0;                   // optimizer steps taken in all
  int64_t batches_done_in_epoch = 0;  // of epoch epochs_done, when stopped inside it (Ctrl-C)
  double best_accuracy = 0.0;
};

// state.json's training fields, type-checked.
struct TrainingState {
  std::string model, precision, recipe;  // as --model, --precision and --recipe spell them
  Progress progress;
  std::map<std::string, double> scaler;  // GradScaler::state_dict(); empty when absent
};

// Validates state.json's training fields; throws demi::Error naming `name` ("DIR/state.json")
// when one is missing, of the wrong type or out of range. Checkpoints written before a field
// existed get its default ("recipe": standard, the counters 0).
TrainingState parse_training_state(const nlohmann::json& state, const std::string& name);

// Commits a checkpoint of the run into c.out_dir (call on rank 0 only).
void save_training(const TrainerConfig& c, const Components& parts, const Progress& progress);

// Loads the checkpoint in `dir` into parts (weights, optimizer, lookahead, scaler; the schedule is
// stepped to the checkpoint's step) and returns where the run stood. Throws demi::Error when the
// checkpoint is of another model, precision, recipe or --lookahead setting.
Progress restore_training(const std::string& dir, const TrainerConfig& c, Components& parts);

// The weights alone (--eval-only), after the same check of model, precision and recipe.
Progress restore_weights(const std::string& dir, const TrainerConfig& c, nn::Module& model);

}  // namespace demi::train
