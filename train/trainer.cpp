// run_training and run_evaluation: the environment, the data, the components, a restored
// checkpoint, then the fit loop or one evaluation, and the summary.
#include "train/trainer.h"

#include <optional>

#include "train/components.h"
#include "train/console.h"
#include "train/evaluate.h"
#include "train/loop.h"
#include "train/metrics_log.h"
#include "train/summary.h"
#include "train/training_checkpoint.h"
#include "train/training_data.h"

namespace demi::train {
namespace {

// The data, loaded and announced.
TrainingData load_and_announce(const TrainerConfig& c, const Environment& env, Console& console) {
  TrainingData data = load_training_data(c, env);
  console.data(data.train->size(), data.test->size(), c.data_dir, data.load_seconds);
  return data;
}

RunSummary summarize(const FitResult& r, const Progress& progress, const Components& parts, const Device& device) {
  RunSummary s;
  s.epochs = progress.epochs_done;
  s.time_s = r.time_s;
  s.images_per_s = r.time_s > 0 ? static_cast<double>(r.images_seen) / r.time_s : 0.0;
  s.accuracy = r.accuracy;
  s.plain_accuracy = r.plain_accuracy;
  s.best_accuracy = progress.best_accuracy;
  s.steps_skipped = parts.scaler->steps_skipped();
  s.nonfinite_steps = r.nonfinite_steps;
  s.scaler_enabled = parts.scaler->is_enabled();
  s.final_loss_scale = parts.scaler->get_scale();
  s.memory = memory_report(device);
  return s;
}

}  // namespace

double run_training(const TrainerConfig& c) {
  check_config(c);  // before CIFAR-10 is read: a bad combination of flags fails at once
  const Environment env = make_environment(c);
  Console console(env);
  TrainingData data = load_and_announce(c, env, console);
  return run_training(c, env, data);
}

double run_training(const TrainerConfig& c, const Environment& env, TrainingData& data) {
  check_config(c);
  Console console(env);
  Components parts = make_components(c, env, &data.train_set, step_counts(c, data.train->batches_per_epoch()));
  Progress progress;
  std::optional<int64_t> resumed_step;
  if (!c.resume_dir.empty()) {
    progress = restore_training(c.resume_dir, c, parts);
    resumed_step = progress.step;
    console.resumed(c.resume_dir, progress.epochs_done, progress.step);
  }
  distribute(parts, env, c.sync_batch_norm);  // after restoring: every rank starts from rank 0's weights

  MetricsLog log(c.out_dir, env.main_rank(), resumed_step, log_every(c, parts.steps.total));
  const FitResult result = fit(c, env, data, parts, progress, log, console);

  const RunSummary summary = summarize(result, progress, parts, env.device);
  if (env.main_rank()) write_summary(c, env.device, summary);
  console.summary(c, summary);
  return result.accuracy;
}

double run_evaluation(const TrainerConfig& c) {
  check_config(c);
  const Environment env = make_environment(c);
  Console console(env);
  TrainingData data = load_and_announce(c, env, console);
  const std::shared_ptr<nn::Module> model = make_model(c, env.device, &data.train_set);
  if (!c.resume_dir.empty()) {
    const Progress progress = restore_weights(c.resume_dir, c, *model);
    console.resumed(c.resume_dir, progress.epochs_done, progress.step);
  }
  const double accuracy = evaluate(*model, *data.test, env.device, env.dtype, env.group.get(), c.tta, input_format(c)).augmented;
  console.test_accuracy(accuracy, c.tta);
  return accuracy;
}

}  // namespace demi::train
