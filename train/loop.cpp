// The fit loop (FitLoop: epochs, steps, end of epoch, stop rules) and NonFiniteGuard.
#include "train/loop.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

#include "framework/core/warning.h"
#include "train/evaluate.h"
#include "train/report.h"

namespace demi::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A step taken whose results are still on the device: the loop reads them in one go at the next
// logging step (drain), so that the steps between make no host read.
struct PendingStep {
  training::TrainStep::Result r;
  int64_t step = 0;   // progress_.step after it
  int64_t batch = 0;  // batches done in the epoch after it
  int64_t images = 0;  // over all ranks
  Clock::time_point start;
};

// One step as the bookkeeping needs it, read from the device.
struct StepResult {
  double loss = 0.0;  // the global batch's mean loss
  bool non_finite_loss = false;
  double grad_norm = 0.0;
  int64_t step = 0, batch = 0, images = 0;
  Clock::time_point start;
};

// An epoch's running totals.
struct EpochTotals {
  Clock::time_point start = Clock::now();
  double loss_sum = 0.0;  // over the epoch's finite losses
  int64_t finite_losses = 0;
  int64_t batch = 0;        // batches done
  int64_t first_batch = 0;  // where this process started (a resumed epoch skips the ones done)
  int64_t images = 0;
  double mean_loss() const { return loss_sum / static_cast<double>(std::max<int64_t>(1, finite_losses)); }
};

class FitLoop {
 public:
  FitLoop(const TrainerConfig& c, const Environment& env, TrainingData& data, Components& parts, Progress& progress,
          MetricsLog& log, Console& console);
  FitResult run();

 private:
  bool stop_requested() const;
  // Trains epoch `epoch` from where progress stands; false when stopped inside it.
  bool train_epoch(int epoch);
  PendingStep take_step(const data::Batch& batch);
  // Reads the pending steps' results (one host read, one all-reduce when data parallel) and does
  // their bookkeeping in order; also where the ranks agree on stopping.
  void drain(int epoch, EpochTotals& e);
  void after_step(int epoch, EpochTotals& e, const StepResult& r, double loss_scale, int64_t skipped_steps);
  void finish_epoch(int epoch, const EpochTotals& e);
  void checkpoint();

  const TrainerConfig& c_;
  const Environment& env_;
  TrainingData& data_;
  Components& parts_;
  Progress& progress_;
  MetricsLog& log_;
  Console& console_;
  training::TrainStep train_step_;
  UnderflowProbe probe_;
  NonFiniteGuard guard_;
  const int first_epoch_;
  const int64_t resume_batches_;  // of first_epoch_, already trained before a Ctrl-C
  bool stop_agreed_ = false;      // data parallel: some rank was asked to stop
  std::vector<PendingStep> pending_;
  FitResult result_;
};

// With --clip 0 the norm is still measured (an infinite bound never clips) for metrics.jsonl.
training::TrainStep::Options step_options(const TrainerConfig& c, const Environment& env, const Components& parts) {
  const double clip = c.clip > 0 ? c.clip : std::numeric_limits<double>::infinity();
  training::TrainStep::Options o{env.device.kind(), env.dtype, clip, c.accum};
  o.ddp = parts.ddp.get();
  o.cuda_graph = c.cuda_graph;
  return o;
}

FitLoop::FitLoop(const TrainerConfig& c, const Environment& env, TrainingData& data, Components& parts,
                 Progress& progress, MetricsLog& log, Console& console)
    : c_(c), env_(env), data_(data), parts_(parts), progress_(progress), log_(log), console_(console),
      train_step_(*parts.optimizer, *parts.scaler, step_options(c, env, parts), parts.schedule.get()),
      probe_(parts.model->named_parameters(), env.dtype, env.main_rank()),
      guard_(c.max_nonfinite_steps, c.out_dir),
      first_epoch_(progress.epochs_done),
      resume_batches_(progress.batches_done_in_epoch) {
  progress_.batches_done_in_epoch = 0;  // until a step of this run
  train_step_.set_gradient_probe([this] { probe_.capture(); }, [this] { return probe_.armed(); });
}

// Ctrl-C or --max-steps. Data parallel: the ranks agree at every logging step (a signal reaches
// them at different instants).
bool FitLoop::stop_requested() const {
  return stop_agreed_ || (!env_.group && g_stop_requested.load()) ||
         (c_.max_steps > 0 && progress_.step >= c_.max_steps);
}

FitResult FitLoop::run() {
  reset_peak_memory_stats(env_.device);
  const auto start = Clock::now();
  console_.banner(c_, env_, parts_.steps.per_epoch);
  for (int epoch = first_epoch_; epoch < c_.epochs && !stop_requested(); ++epoch) {
    if (!train_epoch(epoch)) break;
  }
  if (progress_.batches_done_in_epoch > 0) checkpoint();  // stopped inside an epoch
  result_.nonfinite_steps = guard_.total();
  result_.time_s = seconds_since(start);
  return result_;
}

bool FitLoop::train_epoch(int epoch) {
  data::DataLoader& loader = *data_.train;
  loader.start_epoch(epoch);
  EpochTotals e;
  data::Batch batch;
  // Resuming inside an epoch: its batch order is fixed by (seed, epoch), so skipping the batches
  // already trained puts the run exactly where it stopped.
  for (; epoch == first_epoch_ && e.batch < resume_batches_ && loader.next(batch); ++e.batch) {
  }
  e.first_batch = e.batch;
  int64_t batches = e.batch;  // taken; e.batch counts those whose results were read (drain)
  while (!stop_requested() && loader.next(batch)) {
    probe_.arm(batches == parts_.steps.per_epoch - 1);  // the epoch record's underflow: its last step
    PendingStep p = take_step(batch);
    p.batch = ++batches;
    pending_.push_back(std::move(p));
    const bool last = pending_.back().batch == parts_.steps.per_epoch;
    if (progress_.step % log_.every() == 0 || last || stop_requested()) drain(epoch, e);
  }
  drain(epoch, e);
  console_.end_of_epoch_progress();
  if (stop_requested() && e.batch < parts_.steps.per_epoch) {
    console_.stopped(progress_.step, epoch, e.batch, c_.out_dir);
    return false;
  }
  finish_epoch(epoch, e);
  return true;
}

// One optimizer step on `batch` (split into --accum micro-batches), then what follows every step:
// a fixed loss scale is set back, lookahead moves. Nothing is read from the device.
PendingStep FitLoop::take_step(const data::Batch& batch) {
  PendingStep result;
  result.start = Clock::now();
  const Tensor images = batch.images.to(env_.device).contiguous(input_format(c_)), labels = batch.labels.to(env_.device);
  const int64_t micro = images.size(0) / c_.accum;
  nn::Module& net = parts_.net();
  // The batch goes in as inputs: under --cuda-graph a replay copies it into the captured step's own.
  result.r = train_step_.run({images, labels}, [&](int i, const std::vector<Tensor>& batch) {
    const Tensor& x = batch[0];
    const Tensor& y = batch[1];
    if (c_.accum == 1) return cross_entropy(net(x), y, {c_.label_smoothing});
    return cross_entropy(net(x.slice(i * micro, (i + 1) * micro)), y.slice(i * micro, (i + 1) * micro),
                         {c_.label_smoothing});
  });
  if (c_.loss_scale.kind == LossScale::Kind::Fixed) parts_.scaler->update(c_.loss_scale.value);
  ++progress_.step;
  if (parts_.lookahead) {
    if (const std::optional<double> decay = lookahead_decay(progress_.step, parts_.steps)) {
      parts_.lookahead->update(*decay);
    }
  }
  result.step = progress_.step;
  result.images = images.size(0) * env_.world;
  return result;
}

void FitLoop::drain(int epoch, EpochTotals& e) {
  if (pending_.empty()) return;
  const size_t k = pending_.size();
  std::vector<Tensor> parts;  // [loss..., non-finite..., grad norm...]: one tensor, one read
  for (const PendingStep& p : pending_) parts.push_back(p.r.loss.reshape({1}));
  for (const PendingStep& p : pending_) parts.push_back(p.r.non_finite_loss.reshape({1}));
  for (const PendingStep& p : pending_) {
    parts.push_back(p.r.grad_norm.defined() ? p.r.grad_norm.to(DType::F32).reshape({1}) : zeros({1}, DType::F32, env_.device));
  }
  std::vector<double> values = cat(parts, 0).to_vector<double>();
  if (env_.group) {  // the global batch's mean losses, and whether any rank was asked to stop
    std::vector<double> shared(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k));
    for (double& v : shared) v /= env_.world;
    shared.push_back(g_stop_requested ? 1.0 : 0.0);
    const Tensor t = tensor(shared, {static_cast<int64_t>(shared.size())});
    env_.group->all_reduce(t);
    shared = t.to_vector<double>();
    std::copy(shared.begin(), shared.begin() + static_cast<std::ptrdiff_t>(k), values.begin());
    stop_agreed_ = shared.back() > 0.0;
  }
  const amp::GradScaler& scaler = *parts_.scaler;
  const double loss_scale = scaler.get_scale();
  const int64_t skipped_steps = scaler.steps_skipped();
  for (size_t i = 0; i < k; ++i) {
    const PendingStep& p = pending_[i];
    StepResult r;
    r.loss = values[i];
    r.non_finite_loss = values[k + i] != 0.0;
    r.grad_norm = values[2 * k + i];
    r.step = p.step;
    r.batch = p.batch;
    r.images = p.images;
    r.start = p.start;
    after_step(epoch, e, r, loss_scale, skipped_steps);
  }
  pending_.clear();
}

// A step's bookkeeping, at the drain that read it: the non-finite guard, the epoch's totals, metrics
// and the progress line. loss_scale and skipped_steps are the scaler's at the drain (the last step).
void FitLoop::after_step(int epoch, EpochTotals& e, const StepResult& r, double loss_scale, int64_t skipped_steps) {
  const int64_t step = r.step;
  e.batch = r.batch;
  if (r.non_finite_loss) {  // poisoned data or divergence: the update was skipped (by the scaler or TrainStep)
    if (env_.main_rank()) {
      warn("epoch " + std::to_string(epoch + 1) + ", batch " + std::to_string(e.batch) + " (step " +
           std::to_string(step) + "): the loss is " + std::to_string(r.loss) + "; the update was skipped");
    }
    log_.nonfinite(step, epoch, e.batch - 1);
  }
  guard_.after_step(r.non_finite_loss, epoch, e.batch);
  if (!r.non_finite_loss) {
    e.loss_sum += r.loss;
    ++e.finite_losses;
  }
  e.images += r.images;
  result_.images_seen += r.images;
  const double ips = static_cast<double>(e.images) / seconds_since(e.start);
  log_.step({step, epoch, r.loss, !r.non_finite_loss, parts_.optimizer->lr(0), loss_scale, skipped_steps,
             r.grad_norm, ips, 1000.0 * seconds_since(r.start)});
  progress_.batches_done_in_epoch = e.batch;
  const double eta = static_cast<double>(parts_.steps.per_epoch - e.batch) * seconds_since(e.start) /
                     static_cast<double>(e.batch - e.first_batch);
  console_.progress({epoch, c_.epochs, e.batch, parts_.steps.per_epoch, e.mean_loss(), ips, loss_scale, eta},
                    log_.every());
}

// The end of an epoch: once lookahead's average exists each epoch ends on it (airbench94's sync,
// before the evaluation); the final epoch is scored with test-time augmentation (1-5 more forward
// passes: only the final model gets them); then the epoch record, the checkpoint and report.html.
void FitLoop::finish_epoch(int epoch, const EpochTotals& e) {
  const bool last_epoch = epoch + 1 == c_.epochs;
  if (parts_.lookahead && lookahead_started(progress_.step, parts_.steps)) parts_.lookahead->update(1.0);
  const Accuracy scores =
      evaluate(*parts_.model, *data_.test, env_.device, env_.dtype, env_.group.get(), last_epoch ? c_.tta : 0,
               input_format(c_));
  result_.plain_accuracy = scores.plain;
  result_.accuracy = scores.augmented;
  progress_.best_accuracy = std::max({progress_.best_accuracy, scores.augmented, scores.plain});
  progress_.epochs_done = epoch + 1;
  progress_.batches_done_in_epoch = 0;
  const double epoch_time = seconds_since(e.start);
  const std::optional<double> tta = last_epoch && c_.tta > 0 ? std::optional<double>(scores.augmented) : std::nullopt;
  const amp::GradScaler& scaler = *parts_.scaler;
  log_.epoch({epoch, progress_.step, e.finite_losses > 0 ? e.loss_sum / static_cast<double>(e.finite_losses) : 0.0,
              scores.plain, tta, parts_.optimizer->lr(0), scaler.get_scale(), scaler.steps_skipped(),
              static_cast<double>(e.images) / epoch_time, epoch_time, probe_.last()});
  console_.epoch(epoch, scores.plain, tta, c_.tta, epoch_time);
  checkpoint();
  if (env_.main_rank()) write_report(c_.out_dir);
}

void FitLoop::checkpoint() {
  if (env_.main_rank()) save_training(c_, parts_, progress_);
}

}  // namespace

void NonFiniteGuard::after_step(bool non_finite_loss, int epoch, int64_t batch) {
  if (!non_finite_loss) {
    in_a_row_ = 0;
    return;
  }
  ++total_;
  DEMI_CHECK(++in_a_row_ < max_in_a_row_, "stopping: ", in_a_row_, " steps in a row had a non-finite loss (the last: "
             "epoch ", epoch + 1, ", batch ", batch, "). The data holds inf/NaN or training diverged (try a lower --lr "
             "or --clip); no update was taken from those steps and the checkpoint in '", out_dir_, "' is untouched: "
             "fix the cause and --resume ", out_dir_);
}

FitResult fit(const TrainerConfig& c, const Environment& env, TrainingData& data, Components& parts,
              Progress& progress, MetricsLog& log, Console& console) {
  return FitLoop(c, env, data, parts, progress, log, console).run();
}

}  // namespace demi::train
