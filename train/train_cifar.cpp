// train_cifar: trains SmallCNN, AirNet or a CCT on CIFAR-10 in fp32, bf16 or fp16. Parses the command
// line once into a TrainerConfig (option names into enums) and runs one entry point: training,
// --eval-only, --plan or --report. Errors print one line and exit 2 (usage) or 1 (the run).
// Under mpirun -np N (or torchrun-style variables) the N processes train data parallel.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include "backends/kernels.h"
#include "framework/core/error.h"
#include "framework/dist/process_group.h"
#include "datasets/cifar10.h"
#include "train/cli_checks.h"
#include "train/recipe.h"
#include "train/report.h"
#include "train/trainer.h"

namespace {
namespace cli = demi::train::cli;
using demi::train::TrainerConfig;

// What to do besides training, and the device by name (made a Device after parsing).
struct Command {
  std::string device = demi::backend::cuda_device_count() > 0 ? "cuda" : "cpu";
  bool eval_only = false;
  bool plan = false;
  std::string report_dir;
};

void on_sigint(int) {
  if (demi::train::g_stop_requested) std::_Exit(130);  // a second Ctrl-C: stop now
  demi::train::g_stop_requested = true;
}

// What is trained, on what, in which precision.
void add_model_options(CLI::App& app, TrainerConfig& c, Command& command) {
  cli::add_choice(app, c.precision, "fp32, bf16 (autocast) or fp16 (autocast + dynamic loss scaling)");
  app.add_option("--device", command.device, "cpu or cuda (default: cuda when a GPU is present)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cli::add_choice(app, c.model, "SmallCNN, AirNet, cct7 (CCT-7/3x1) or cct4 (CCT-4/3x2; both train with --recipe cct "
                  "unless --recipe says otherwise) (models/README.md)");
  app.add_option("--data-dir", c.data_dir, "CIFAR-10: image folders train/<class>/*.jpg or the binary batches "
                 "(default: $DEMI_CIFAR10, else ./data/cifar-10)")->capture_default_str();
}

// The training recipe: epochs, batch, optimizer, schedule, regularisation, evaluation.
void add_recipe_options(CLI::App& app, TrainerConfig& c) {
  app.add_option("--epochs", c.epochs, "epochs to train")->check(cli::non_negative())->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "images per step, in all: under mpirun -np N each process takes 1/N")->check(cli::positive())->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate")->check(cli::non_negative())->capture_default_str();
  cli::add_choice(app, c.optimizer, "sgd (Nesterov momentum), adamw, or muon (with --recipe airbench-muon, which sets it)");
  app.add_option("--momentum", c.momentum, "SGD's Nesterov momentum (0: plain SGD)")->check(cli::between(0.0, 0.999))
      ->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "weight decay (L2 for sgd, decoupled for adamw)")
      ->check(cli::non_negative())->capture_default_str();
  cli::add_choice(app, c.schedule, "learning-rate schedule: onecycle, cosine (with warm-up), linear (0.2x to 1x "
                  "over 23% of the steps, then down to 0.07x: airbench's), linear-decay (1x down to 0), step or none");
  app.add_option("--label-smoothing", c.label_smoothing, "cross-entropy label smoothing in [0, 1]")
      ->check(cli::between(0.0, 1.0))->capture_default_str();
  cli::add_choice(app, c.recipe, "standard, or airbench: AirNet with airbench94's recipe (whitening stem from patch "
                  "statistics, identity-initialised convs, frozen BatchNorm weights, 2-pixel translations with "
                  "alternating flips) and its defaults for the flags not given: --epochs 10 --batch-size 1024 --lr 1.5 "
                  "(scaled with --batch-size) "
                  "--momentum 0.85 --weight-decay 0.00133 --schedule linear --label-smoothing 0.2 --lookahead --tta 2; "
                  "or airbench-muon: the same model and augmentation with airbench94_muon's training (Muon for the "
                  "convolution filters at --lr, Nesterov SGD for biases and head, whitening bias trained 3 epochs): "
                  "--epochs 8 --batch-size 2000 --lr 0.24 --optimizer muon --momentum 0.85 (SGD's) --weight-decay "
                  "0.00241 (the head's) --schedule linear-decay --label-smoothing 0.2 --tta 2; "
                  "or cct: a CCT (default --model cct4) with AdamW, no weight decay on norms, biases and the "
                  "positional embedding: --optimizer adamw --lr 0.001 --weight-decay 0.06 --schedule cosine "
                  "--label-smoothing 0.1");
  app.add_option("--tta", c.tta, "test-time augmentation of the final evaluation: 0 none, 1 mirror, 2 mirror and "
                 "one-pixel translations (6 passes)")->check(cli::between(0, 2))->capture_default_str();
  app.add_flag("--lookahead", c.lookahead, "from the 4th epoch on, every 5 steps pull the weights to their running "
               "average, and end each epoch on it (airbench94's lookahead)");
}

// Where the weights live and how steps are taken: half params, masters, rounding, loss scale,
// clipping, accumulation, activation checkpointing, the seed.
void add_step_options(CLI::App& app, TrainerConfig& c) {
  app.add_flag("--half-params", c.half_params, "model weights in fp16/bf16 with fp32 masters in the optimizer "
               "(BatchNorm stays fp32)");
  cli::add_choice(app, c.master_weights, "with --half-params: fp32 (the optimizer steps an fp32 copy) or "
                  "none (it steps the half weights directly; updates below half an ulp are lost: for experiments)");
  cli::add_choice(app, c.rounding, "with --half-params: how the optimizer writes the half weights: nearest, "
                  "or stochastic (unbiased: small updates survive on average, so --master-weights none trains; "
                  "SGD and AdamW)");
  cli::add_loss_scale(app, c.loss_scale, "dynamic (GradScaler; fp16 only), none, or a fixed number");
  app.add_option("--clip", c.clip, "clip the global gradient norm to this (0: off); applied to true gradients")
      ->check(cli::non_negative())->capture_default_str();
  app.add_option("--accum", c.accum, "micro-batches per step (gradient accumulation); must divide --batch-size")
      ->check(cli::positive())->capture_default_str();
  app.add_flag("--checkpoint-activations", c.checkpoint_activations, "activation checkpointing: keep only the "
               "inputs of each top-level block of the model (SmallCNN's conv blocks, AirNet's blocks, a CCT's tokenizer "
               "stages and encoder layers) for backward, "
               "which reruns one block at a time: less memory for about one more forward pass; the same gradients");
  app.add_flag("--channels-last", c.channels_last, "store the convolution weights and the images NHWC "
               "(PyTorch's channels_last memory format): the same results; on CUDA the convolutions, batch norm and "
               "pooling run NHWC, on the CPU they read a contiguous copy (no faster there yet, and no slower)");
  app.add_flag("--cuda-graph", c.cuda_graph, "with --device cuda: capture the whole training step once as a CUDA "
               "graph (after 3 eager steps) and replay it for every full batch, one launch a step instead of "
               "hundreds: the same results; a last partial batch runs eagerly");
  app.add_option("--seed", c.seed, "seed for initialisation, shuffling and augmentation")->capture_default_str();
}

// Outputs, resuming, the other entry points, and the run's limits.
void add_run_options(CLI::App& app, TrainerConfig& c, Command& command) {
  app.add_option("--out", c.out_dir, "output directory: metrics.jsonl, summary.json, checkpoint")
      ->capture_default_str();
  app.add_option("--resume", c.resume_dir, "continue from the checkpoint in this directory");
  app.add_flag("--eval-only", command.eval_only, "evaluate (with --resume's weights) and exit");
  app.add_flag("--plan", command.plan, "print the memory this run would hold, by category (parameters, gradients, "
               "optimizer state, master weights, saved activations), and exit without training");
  app.add_option("--train-subset", c.train_subset, "train on a fixed class-balanced subset of N images (0: all)")
      ->check(cli::non_negative())->capture_default_str();
  app.add_option("--test-subset", c.test_subset, "evaluate on a fixed class-balanced subset of N images (0: all)")
      ->check(cli::non_negative())->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads (0: all cores)")->check(cli::non_negative())
      ->capture_default_str();
  app.add_flag("--sync-bn", c.sync_batch_norm, "under mpirun: batch-norm statistics over all processes' images "
               "(default: each process its own, as PyTorch DDP)");
  app.add_option("--report", command.report_dir, "only regenerate DIR/report.html from DIR/metrics.jsonl");
  app.add_option("--max-nonfinite-steps", c.max_nonfinite_steps,
                 "stop (with a clear error) after this many steps in a row with an inf/NaN loss")
      ->check(cli::positive())->capture_default_str();
  app.add_option("--max-steps", c.max_steps, "stop after this many steps in all, with a checkpoint (0: no limit)")
      ->check(cli::non_negative())->capture_default_str();
  app.add_option("--log-every", c.log_every, "steps between metrics.jsonl records and plain progress lines, "
                 "where the loop reads the steps' losses from the device (0: about 100 records a run, at "
                 "most every 50 steps)")
      ->check(cli::non_negative())->capture_default_str();
}

// --plan: nothing is trained, so its errors are usage errors (exit 2).
int plan(const TrainerConfig& c) {
  try {
    demi::train::print_memory_plan(c, std::cout);
    return 0;
  } catch (const demi::Error& e) {
    std::cerr << "train_cifar: " << e.what() << "\n";
    return 2;
  }
}

// Training, --eval-only or --report; a failure ends every rank of a data-parallel job (exit 1).
int run(const TrainerConfig& c, const Command& command) {
  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);  // what mpirun and batch schedulers send
  try {
    if (!command.report_dir.empty()) {
      demi::train::write_report(command.report_dir);
      std::cout << "wrote " << command.report_dir << "/report.html\n";
      return 0;
    }
    if (command.eval_only) demi::train::run_evaluation(c);
    else demi::train::run_training(c);
  } catch (const demi::Error& e) {
    const demi::dist::LaunchInfo launch = demi::dist::launch_info();
    std::cerr << "train_cifar" << (launch.world_size > 1 ? " (rank " + std::to_string(launch.rank) + ")" : "") << ": "
              << e.what() << "\n";
    // The other ranks would wait forever in their next collective: end the whole job.
    if (launch.world_size > 1) demi::dist::abort_job(1);
    return 1;
  }
  return demi::train::g_stop_requested ? 130 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  TrainerConfig c;
  c.data_dir = demi::data::cifar10_dir_from_environment();
  if (c.data_dir.empty()) c.data_dir = demi::data::kDefaultCifar10Dir;
  Command command;
  CLI::App app{"train_cifar: train a small CNN on CIFAR-10 in the precision you choose (demi)"};
  app.get_formatter()->column_width(34);
  add_model_options(app, c, command);
  add_recipe_options(app, c);
  add_step_options(app, c);
  add_run_options(app, c, command);
  try {
    app.parse(argc, argv);
    c.device = command.device == "cuda" ? demi::Device::cuda(0) : demi::Device::cpu();
    demi::train::apply_recipe_defaults(c, [&](const std::string& flag) { return app.count(flag) > 0; });
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "train_cifar: " << e.what() << " (see --help)\n";
    return 2;
  } catch (const demi::Error& e) {
    std::cerr << "train_cifar: " << e.what() << "\n";
    return 2;
  }
  return command.plan ? plan(c) : run(c, command);
}
