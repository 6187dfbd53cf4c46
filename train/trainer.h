// Trainer: train_cifar's loop. It owns the model, optimizer, scaler, schedule and data loaders,
// runs training::TrainStep per batch, evaluates, logs metrics.jsonl, checkpoints every epoch and
// prints a progress line and a summary. The CLI in train_cifar.cpp only fills TrainerConfig.
#pragma once

#include <atomic>
#include <cstdint>
#include <ostream>
#include <string>

#include "framework/core/device.h"
#include "framework/core/dtype.h"

namespace demi::train {

struct TrainerConfig {
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  Device device = Device::cpu();
  std::string model = "SmallCNN";
  std::string data_dir;
  int epochs = 15;
  int64_t batch_size = 128;
  // The default recipe (SGD Nesterov, one-cycle to lr 0.1, label smoothing 0.1, batch 128, 15
  // epochs) is the one measured in docs/BENCHMARKS.md: SmallCNN 82.3% fp32, 82.7% bf16 on the CPU.
  double lr = 0.1;
  std::string optimizer = "sgd";     // sgd | adamw | muon (muon: --recipe airbench-muon)
  double momentum = 0.9;             // SGD's (Nesterov) momentum
  double weight_decay = 5e-4;
  std::string schedule = "onecycle";  // onecycle | cosine | linear | linear-decay | step | none
  double label_smoothing = 0.1;
  std::string recipe = "standard";   // standard | airbench | airbench-muon (train/recipe.h)
  int tta = 0;                       // test-time augmentation of the final evaluation: 0 none, 1 mirror, 2 mirror + translate
  bool lookahead = false;            // airbench's lookahead averaging every 5 steps
  bool half_params = false;          // model weights in the half dtype, fp32 masters in the optimizer
  std::string master_weights = "fp32";  // fp32 | none (with half_params: step the half weights directly)
  std::string rounding = "nearest";     // nearest | stochastic: how steps write half weights
  std::string loss_scale = "dynamic";  // dynamic | none | <number>
  double clip = 0.0;
  int accum = 1;
  uint64_t seed = 0;
  std::string out_dir = "runs/latest";
  std::string resume_dir;
  bool eval_only = false;
  bool plan = false;         // print the memory plan and exit (train_cifar --plan)
  int64_t train_subset = 0;  // 0: all
  int64_t test_subset = 0;
  int threads = 0;           // 0: all cores
  bool sync_batch_norm = false;  // data parallel: batch-norm statistics over the global batch
  int log_every = 0;  // steps between metrics records; 0: about 100 a run, at most every 50 steps
  int max_nonfinite_steps = 10;  // stop after this many steps in a row with an inf/NaN loss
  int64_t max_steps = 0;     // stop (and checkpoint, as on Ctrl-C) once this many steps are done; 0: no limit
  std::string report_dir;    // only regenerate DIR/report.html from DIR/metrics.jsonl
};

// Set by the SIGINT handler: the loop stops after the current step, checkpoints and returns.
extern std::atomic<bool> g_stop_requested;

// Runs training (or evaluation) as configured; returns the final test accuracy in [0, 1].
double run_training(const TrainerConfig& config);

// The compute dtype of --precision: float32, float16 or bfloat16.
DType compute_dtype(const std::string& precision);

// train_cifar --plan: what training with `config` will hold in memory, by category (amp::plan_memory
// on the model as the run would build it, without loading CIFAR-10 or training), printed to `out`.
void print_memory_plan(const TrainerConfig& config, std::ostream& out);

}  // namespace demi::train
