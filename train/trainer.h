// train_cifar's entry points, each a short sequence of the parts in this directory: training
// (run_training), evaluation of a checkpoint (run_evaluation) and the memory plan
// (print_memory_plan). The command line in train_cifar.cpp fills a TrainerConfig and picks one;
// --report, which only reads metrics.jsonl, is report.h's write_report.
#pragma once

#include <ostream>

#include "train/config.h"
#include "train/environment.h"
#include "train/training_data.h"

namespace demi::train {

// Trains as configured (resuming from c.resume_dir when set): metrics.jsonl, checkpoints,
// report.html and summary.json in c.out_dir. Returns the final test accuracy in [0, 1].
double run_training(const TrainerConfig& c);
// The same on data already loaded (make_training_data), in an environment of the caller's.
double run_training(const TrainerConfig& c, const Environment& env, TrainingData& data);

// --eval-only: the test accuracy of c.resume_dir's weights (with --tta's augmentation), printed
// and returned; without --resume, of the freshly initialised model.
double run_evaluation(const TrainerConfig& c);

// --plan: what training with `c` will hold in memory, by category (amp::plan_memory on the model
// as the run would build it, without loading CIFAR-10 or training), printed to `out`.
void print_memory_plan(const TrainerConfig& c, std::ostream& out);

}  // namespace demi::train
