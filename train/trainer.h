// Trainer: train_cifar's loop. It owns the model, optimizer, scaler, schedule and data loaders,
// runs amp::TrainStep per batch, evaluates, logs metrics.jsonl, checkpoints every epoch and
// prints a progress line and a summary. The CLI in train_cifar.cpp only fills TrainerConfig.
#pragma once

#include <atomic>
#include <ostream>

#include "train/config.h"

namespace demi::train {

// Set by the SIGINT handler: the loop stops after the current step, checkpoints and returns.
extern std::atomic<bool> g_stop_requested;

// Runs training (or evaluation) as configured; returns the final test accuracy in [0, 1].
double run_training(const TrainerConfig& config);

// train_cifar --plan: what training with `config` will hold in memory, by category (amp::plan_memory
// on the model as the run would build it, without loading CIFAR-10 or training), printed to `out`.
void print_memory_plan(const TrainerConfig& config, std::ostream& out);

}  // namespace demi::train
