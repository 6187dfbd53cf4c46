// The train_cifar loop: data, model, optimizer, scaler and schedule from the config; one
// amp::TrainStep per batch; evaluation, metrics.jsonl, checkpoints and the summary per epoch.
#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "datasets/cifar10.h"
#include "datasets/transforms.h"
#include "framework/dist/distributed_data_parallel.h"
#include "framework/dist/sync_batch_norm.h"
#include "framework/demi/demi.h"
#include "models/small_cnn.h"
#include "train/checkpoint.h"
#include "train/recipe.h"
#include "train/report.h"
#include "framework/serialize/safetensors.h"

namespace demi::train {

std::atomic<bool> g_stop_requested{false};

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Where the ranks other than 0 print: nowhere.
std::ostream& null_stream() {
  static std::ostream null(nullptr);
  return null;
}


// Fractions of a gradient's elements that are exactly zero, subnormal or inf/NaN in `format`
// (the values reached the parameter through that format, so classifying them there is exact).
struct Underflow {
  double zero = 0, subnormal = 0, non_finite = 0;
};
Underflow classify(const Tensor& grad, DType format) {
  const std::vector<float> g = grad.to_vector<float>();
  const double smallest_normal = format == DType::F16 ? 6.103515625e-5 : 1.1754943508222875e-38;
  Underflow u;
  for (float v : g) {
    const double a = std::fabs(static_cast<double>(v));
    if (!std::isfinite(v)) u.non_finite += 1;
    else if (a == 0.0) u.zero += 1;
    else if (a < smallest_normal) u.subnormal += 1;
  }
  const double n = std::max<double>(1.0, static_cast<double>(g.size()));
  return {u.zero / n, u.subnormal / n, u.non_finite / n};
}

// Logits of a test batch averaged over test-time augmentations as airbench does, given the
// plain logits of the batch: level 1 adds the mirror image; level 2 also the images moved one
// pixel down-right and up-left (reflected borders), each with its mirror: 0.5 * mirrored pair +
// 0.25 * each translated pair.
Tensor tta_logits(nn::Module& model, const Tensor& images, const Tensor& plain, const Device& device, int tta) {
  auto logits = [&](const Tensor& x) { return model(x.to(device)).to(DType::F32); };
  auto with_mirror = [&](const Tensor& x) { return (logits(x) + logits(data::mirror(x))) * 0.5; };
  const Tensor mirrored_pair = (plain + logits(data::mirror(images))) * 0.5;
  if (tta == 1) return mirrored_pair;
  return mirrored_pair * 0.5 +
         (with_mirror(data::translate(images, 1, 1)) + with_mirror(data::translate(images, -1, -1))) * 0.25;
}

// How many of a batch's rows have their largest logit at the label.
int64_t count_correct(const Tensor& logits, const std::vector<int64_t>& labels) {
  const std::vector<float> l = logits.to_vector<float>();
  const int64_t k = logits.size(1);
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const float* row = l.data() + i * static_cast<size_t>(k);
    correct += (std::max_element(row, row + k) - row) == labels[i];
  }
  return correct;
}

// Test accuracy without and with test-time augmentation (the same when tta is 0).
struct Accuracy {
  double plain = 0.0;
  double augmented = 0.0;
};

// Accuracy of `model` on `loader` (one pass; with tta > 0 the augmented views are scored beside
// the plain ones), under the run's autocast. Data parallel: each rank scores its shard with rank
// 0's buffers and the counts are summed over `group`.
Accuracy evaluate(nn::Module& model, data::DataLoader& loader, const Device& device, DType dtype,
                  dist::ProcessGroup* group, int tta = 0) {
  NoGradGuard no_grad;
  // Every rank evaluates rank 0's running statistics: the model the checkpoint holds.
  if (group) dist::broadcast_buffers(*group, model);
  model.eval();
  std::optional<amp::AutocastGuard> autocast;
  if (dtype != DType::F32) autocast.emplace(device.kind(), dtype);
  loader.start_epoch(0);
  data::Batch batch;
  int64_t correct = 0, correct_augmented = 0, total = 0;
  while (loader.next(batch)) {
    const Tensor plain = model(batch.images.to(device)).to(DType::F32);
    const std::vector<int64_t> y = batch.labels.to_vector<int64_t>();
    const int64_t right = count_correct(plain, y);
    correct += right;
    correct_augmented += tta > 0 ? count_correct(tta_logits(model, batch.images, plain, device, tta), y) : right;
    total += static_cast<int64_t>(y.size());
  }
  model.train();
  if (group) {
    const Tensor counts = tensor(std::vector<int64_t>{correct, correct_augmented, total}, {3});
    group->all_reduce(counts);
    const std::vector<int64_t> summed = counts.to_vector<int64_t>();
    correct = summed[0], correct_augmented = summed[1], total = summed[2];
  }
  const double n = static_cast<double>(std::max<int64_t>(total, 1));
  return {static_cast<double>(correct) / n, static_cast<double>(correct_augmented) / n};
}

// An optimizer over the recipe's parameter groups; options(group) gives each group's options.
template <typename Optimizer, typename OptionsOf>
std::unique_ptr<optim::Optimizer> make_grouped(const std::vector<ParamGroup>& groups, OptionsOf options) {
  std::unique_ptr<Optimizer> opt;
  for (const ParamGroup& g : groups) {
    if (!opt) opt = std::make_unique<Optimizer>(g.params, options(g));
    else opt->add_param_group(g.params, options(g));
  }
  return opt;
}

std::string percent(double fraction) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << 100.0 * fraction << "%";
  return out.str();
}

std::string format_duration(double s) {
  std::ostringstream out;
  const int64_t t = static_cast<int64_t>(s + 0.5);
  out << t / 60 << "m" << std::setw(2) << std::setfill('0') << t % 60 << "s";
  return out.str();
}

// On resume, drops the metrics.jsonl records written after the checkpoint (a run killed between
// checkpoints logged steps that will be trained again) and a torn last line, so the log holds
// each step once.
void keep_records_up_to(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    const json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() <= step) {
      kept += line + "\n";
    }
  }
  in.close();
  write_file_atomically(path, kept);
}

}  // namespace


double run_training(const TrainerConfig& c) {
  if (!c.report_dir.empty()) {
    write_report(c.report_dir);
    std::cout << "wrote " << c.report_dir << "/report.html\n";
    return 0.0;
  }
  check_config(c);
  const DType dtype = compute_dtype(c.precision);
  if (c.threads > 0) set_num_threads(c.threads);

  // Data parallel when a launcher (mpirun, torchrun) started several processes: each rank trains
  // on its shard of every batch; rank 0 alone prints, logs and checkpoints.
  const dist::LaunchInfo launch = dist::launch_info();
  Device device = c.device;
  if (launch.world_size > 1 && device.kind() == Device::Kind::CUDA) device = Device::cuda(launch.local_rank);
  std::shared_ptr<dist::ProcessGroup> group;
  if (launch.world_size > 1) group = dist::init_process_group("auto", device);
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const bool main_rank = rank == 0;
  DEMI_CHECK(c.batch_size % (static_cast<int64_t>(world) * c.accum) == 0, "--batch-size ", c.batch_size,
             " is the global batch: it must divide evenly among ", world, " processes", c.accum > 1 ? " times --accum " : "",
             c.accum > 1 ? std::to_string(c.accum) : "", "; pick a multiple of ", world * c.accum);
  std::ostream& out = main_rank ? std::cout : null_stream();
  if (main_rank) std::filesystem::create_directories(c.out_dir);

  // Data
  const auto load_start = Clock::now();
  data::Dataset train_set = data::load_cifar10(c.data_dir, data::Split::Train);
  data::Dataset test_set = data::load_cifar10(c.data_dir, data::Split::Test);
  if (c.train_subset > 0) train_set = data::balanced_subset(train_set, c.train_subset, c.seed);
  if (c.test_subset > 0) test_set = data::balanced_subset(test_set, c.test_subset, c.seed + 1);
  data::DataLoader::Options train_options;
  train_options.batch_size = c.batch_size;
  train_options.shuffle = true;
  train_options.augment = true;
  train_options.augmentation = train_augmentation(c);
  train_options.drop_last = true;
  train_options.seed = c.seed;
  train_options.num_shards = world;
  train_options.shard = rank;
  data::DataLoader train_loader(train_set, train_options);
  data::DataLoader::Options test_options;
  test_options.batch_size = 500;
  test_options.shuffle = false;
  test_options.num_shards = world;
  test_options.shard = rank;
  data::DataLoader test_loader(test_set, test_options);
  out << "data: " << train_loader.size() << " train / " << test_loader.size() << " test images from "
            << c.data_dir << " (" << std::fixed << std::setprecision(1) << seconds_since(load_start) << " s)" << std::endl;

  // Model, optimizer, scaler, schedule
  Generator gen(c.seed);
  manual_seed(c.seed);
  std::shared_ptr<nn::Module> model = make_recipe_model(c, gen, &train_set);
  model->to(device);
  if (c.half_params) model->to(dtype);  // BatchNorm stays fp32
  const optim::MasterWeights masters = c.master_weights;
  const optim::Rounding rounding = c.rounding;
  std::unique_ptr<optim::Optimizer> opt;
  const std::vector<ParamGroup> groups = parameter_groups(c, *model);
  auto sgd_options = [&](const ParamGroup& g) {
    optim::SGD::Options o;
    o.lr = c.lr * g.lr_scale;
    o.momentum = c.momentum;
    o.nesterov = c.momentum > 0.0;
    o.weight_decay = c.weight_decay * g.weight_decay_scale;
    o.master_weights = masters;
    o.rounding = rounding;
    o.rounding_seed = c.seed;
    return o;
  };
  if (c.optimizer == OptimizerKind::Sgd) {
    opt = make_grouped<optim::SGD>(groups, sgd_options);
  } else if (c.optimizer == OptimizerKind::Muon) {
    // The recipe's Muon groups (filters) and SGD groups (everything else), in the recipe's order.
    std::unique_ptr<optim::Muon> muon;
    for (const ParamGroup& g : groups) {
      if (g.muon) {
        optim::Muon::Options o = *g.muon;
        o.lr = c.lr * g.lr_scale;
        o.master_weights = masters;
        if (!muon) muon = std::make_unique<optim::Muon>(g.params, o);
        else muon->add_param_group(g.params, o);
      } else {
        DEMI_CHECK(muon, "--optimizer muon: the recipe's first parameter group must be a Muon group");
        muon->add_sgd_group(g.params, sgd_options(g));
      }
    }
    opt = std::move(muon);
  } else {
    opt = make_grouped<optim::AdamW>(groups, [&](const ParamGroup& g) {
      optim::AdamW::Options o;
      o.lr = c.lr * g.lr_scale;
      o.weight_decay = c.weight_decay * g.weight_decay_scale;
      o.master_weights = masters;
      o.rounding = rounding;
      o.rounding_seed = c.seed;
      return o;
    });
  }
  // airbench's lookahead: every 5 steps the weights move to an average that trails them by a decay
  // of 0.95^5 (step / total)^3: nothing early on, a strong pull at the end.
  std::optional<optim::Lookahead> lookahead;
  if (c.lookahead) lookahead.emplace(*model, opt.get());
  constexpr int64_t kLookaheadEvery = 5;
  constexpr char kLookaheadPrefix[] = "lookahead.";
  amp::GradScaler::Options so;
  if (group) so.reduce_found_inf = dist::found_inf_reduction(group);  // every rank skips together
  std::optional<double> static_scale;
  if (c.loss_scale.kind == LossScale::Kind::Dynamic) {
    so.enabled = dtype == DType::F16;  // bf16 has fp32's range: nothing to rescue
  } else if (c.loss_scale.kind == LossScale::Kind::None) {
    so.enabled = false;
  } else {
    so.init_scale = c.loss_scale.value;
    static_scale = c.loss_scale.value;
  }
  amp::GradScaler scaler(so);
  const int64_t steps_per_epoch = train_loader.batches_per_epoch();
  const int64_t total_steps = std::max<int64_t>(2, steps_per_epoch * c.epochs);
  // A short first run still draws curves in report.html: records ~100 times a run by default.
  const int64_t log_every = c.log_every > 0 ? c.log_every : std::clamp<int64_t>(total_steps / 100, 1, 50);
  std::unique_ptr<optim::LRScheduler> schedule;
  if (c.schedule == ScheduleKind::OneCycle) {
    schedule = std::make_unique<optim::OneCycle>(*opt, total_steps);
  } else if (c.schedule == ScheduleKind::Cosine) {
    schedule = std::make_unique<optim::CosineWithWarmup>(*opt, std::min<int64_t>(steps_per_epoch, total_steps / 10),
                                                         total_steps);
  } else if (c.schedule == ScheduleKind::Linear) {
    // airbench's np.interp points; the peak at least one step in, so that a run of a few steps
    // (total >= 2) still has increasing points.
    const double total = static_cast<double>(total_steps);
    schedule = std::make_unique<optim::PiecewiseLinear>(
        *opt, std::vector<optim::PiecewiseLinear::Point>{
                  {0.0, 0.2}, {std::max(1.0, std::floor(0.23 * total)), 1.0}, {total, 0.07}});
  } else if (c.schedule == ScheduleKind::LinearDecay) {
    schedule = std::make_unique<optim::PiecewiseLinear>(
        *opt, std::vector<optim::PiecewiseLinear::Point>{{0.0, 1.0}, {static_cast<double>(total_steps), 0.0}});
  } else if (c.schedule == ScheduleKind::Step) {
    schedule = std::make_unique<optim::StepLR>(*opt, std::max<int64_t>(1, total_steps / 3), 0.1);
  }
  // Groups trained for their first epochs only: linear decay to 0 there, whatever --schedule says.
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].train_epochs <= 0) continue;
    if (!schedule) schedule = std::make_unique<optim::LambdaLR>(*opt, [](int64_t) { return 1.0; });
    const double steps = std::max(1.0, static_cast<double>(groups[g].train_epochs * steps_per_epoch));
    schedule->set_group_factor(g, [steps](int64_t t) { return std::max(0.0, 1.0 - static_cast<double>(t) / steps); });
  }

  // Resume
  int first_epoch = 0;
  int64_t step = 0;
  int64_t resume_batches = 0;  // batches of first_epoch already trained (a Ctrl-C mid-epoch)
  double best_accuracy = 0.0;
  const std::string resume = c.resume_dir;
  if (!resume.empty()) {
    const Checkpoint checkpoint = load_checkpoint(resume);  // verified; falls back to the previous one
    const json& state = checkpoint.state;
    const std::string recipe = state.value("recipe", std::string("standard"));
    DEMI_CHECK(state.at("model") == name_of(c.model) && state.at("precision") == name_of(c.precision) &&
                   recipe == name_of(c.recipe),
               "--resume: the checkpoint is ", state.at("model").get<std::string>(), "/",
               state.at("precision").get<std::string>(), " (recipe ", recipe, ") but this run is ", name_of(c.model),
               "/", name_of(c.precision), " (recipe ", name_of(c.recipe),
               "); pass the same --model, --precision and --recipe");
    model->load_state_dict(checkpoint.model);
    StateDict optimizer_state, lookahead_state;
    for (const auto& [key, value] : checkpoint.optimizer) {
      if (key.rfind(kLookaheadPrefix, 0) == 0) lookahead_state[key.substr(sizeof(kLookaheadPrefix) - 1)] = value;
      else optimizer_state[key] = value;
    }
    opt->load_state_dict(optimizer_state);
    DEMI_CHECK(lookahead_state.empty() == !lookahead, "--resume: the checkpoint was written ",
               lookahead ? "without" : "with", " --lookahead; resume with the same setting");
    if (lookahead) lookahead->load_state_dict(lookahead_state);
    if (scaler.is_enabled()) scaler.load_state_dict(state.value("scaler", std::map<std::string, double>{}));
    first_epoch = state.at("epochs_done").get<int>();
    step = state.at("step").get<int64_t>();
    resume_batches = state.value("batches_done_in_epoch", int64_t{0});
    best_accuracy = state.value("best_accuracy", 0.0);
    if (schedule) {
      for (int64_t i = 0; i < step; ++i) schedule->step();
    }
    out << "resumed from " << resume << " after epoch " << first_epoch << " (step " << step << ")\n";
  }

  const std::string checkpoint_dir = c.out_dir;
  int64_t batches_done_in_epoch = 0;
  auto checkpoint_now = [&](int epochs_done) {
    json state = {{"model", name_of(c.model)}, {"precision", name_of(c.precision)}, {"recipe", name_of(c.recipe)}, {"epochs_done", epochs_done}, {"step", step},
                  {"batches_done_in_epoch", batches_done_in_epoch}, {"best_accuracy", best_accuracy},
                  {"seed", c.seed}, {"scaler", scaler.state_dict()},
                  {"lr", opt->lr(0)}};
    StateDict optimizer_state = opt->state_dict();
    if (lookahead) {
      for (const auto& [key, value] : lookahead->state_dict()) optimizer_state[kLookaheadPrefix + key] = value;
    }
    if (main_rank) save_checkpoint(checkpoint_dir, step, {model->state_dict(), optimizer_state, state, ""});
  };

  // After resuming, so that rank 0's loaded weights are what every rank starts from.
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (group && c.sync_batch_norm) model = dist::convert_sync_batch_norm(model, group);
  if (group) ddp = std::make_shared<dist::DistributedDataParallel>(model, group);
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;

  if (c.eval_only) {
    const double acc = evaluate(*model, test_loader, device, dtype, group.get(), c.tta).augmented;
    out << "test accuracy: " << percent(acc)
        << (c.tta > 0 ? " (test-time augmentation " + std::to_string(c.tta) + ")" : std::string()) << "\n";
    return acc;
  }

  const std::string metrics_path = c.out_dir + "/metrics.jsonl";
  if (!resume.empty() && main_rank) keep_records_up_to(metrics_path, step);
  std::ofstream metrics;
  if (main_rank) {
    metrics.open(metrics_path, resume.empty() ? std::ios::trunc : std::ios::app);
    DEMI_CHECK(metrics.good(), "cannot write '", c.out_dir, "/metrics.jsonl'");
  }
  // With --clip 0 the norm is still measured (an infinite bound never clips) for metrics.jsonl.
  const double clip = c.clip > 0 ? c.clip : std::numeric_limits<double>::infinity();
  amp::TrainStep::Options step_options{device.kind(), dtype, clip, c.accum};
  step_options.ddp = ddp.get();
  amp::TrainStep train_step(*opt, scaler, step_options, schedule.get());
  // mpirun gives every rank a pseudo-terminal even when its own output is a pipe: plain lines there.
  const bool tty = !group && ::isatty(STDOUT_FILENO);
  // Without a terminal: a line every --log-every steps, and at least every 30 s (big batches of a
  // slow model take minutes for 50 steps).
  constexpr double kPlainLineSeconds = 30.0;
  auto last_plain_line = Clock::now();
  const auto named = model->named_parameters();
  json underflow;
  bool probe_now = false;
  train_step.set_gradient_probe([&] {
    if (!probe_now || !main_rank) return;
    underflow = json::object();
    for (const auto& [name, p] : named) {
      if (!p.grad().defined()) continue;
      const Underflow u = classify(p.grad(), dtype);
      underflow[name] = {{"zero", u.zero}, {"subnormal", u.subnormal}, {"inf", u.non_finite}};
    }
  });

  // Ctrl-C or --max-steps: finish the current step, checkpoint, return. Data parallel: the ranks
  // agree after every step (a signal reaches them at different instants).
  bool stop_agreed = false;
  auto stop_requested = [&] {
    return stop_agreed || (!group && g_stop_requested.load()) || (c.max_steps > 0 && step >= c.max_steps);
  };
  reset_peak_memory_stats(device);
  const auto run_start = Clock::now();
  int64_t images_seen = 0;
  double accuracy = 0.0;        // the final model's, with test-time augmentation when --tta asks for it
  double plain_accuracy = 0.0;  // without
  int epochs_done = first_epoch;
  out << name_of(c.model) << " " << name_of(c.precision) << (c.half_params ? " (half params)" : "") << " on " << device;
  if (device.is_cpu()) out << " (" << backend::cpu_isa() << " kernels)";
  if (group) out << " x " << world << " processes (" << group->backend() << ", " << c.batch_size / world << " images each)";
  out << ", " << c.epochs << " epochs of " << steps_per_epoch << " steps, batch " << c.batch_size
      << (c.recipe != Recipe::Standard ? ", recipe " + name_of(c.recipe) : std::string()) << std::endl;
  int nonfinite_in_a_row = 0;
  int64_t nonfinite_total = 0;
  double loss_since_record = 0.0;  // for the step records' loss_mean: one step's loss is noisy
  int64_t steps_since_record = 0;
  for (int epoch = first_epoch; epoch < c.epochs && !stop_requested(); ++epoch) {
    train_loader.start_epoch(epoch);
    const auto epoch_start = Clock::now();
    double loss_sum = 0.0;  // over the epoch's finite losses
    int64_t finite_losses = 0;
    int64_t batch_index = 0, epoch_images = 0;
    data::Batch batch;
    // Resuming inside an epoch: its batch order is fixed by (seed, epoch), so skipping the batches
    // already trained puts the run exactly where it stopped.
    for (; epoch == first_epoch && batch_index < resume_batches && train_loader.next(batch); ++batch_index) {
    }
    const int64_t first_batch = batch_index;
    while (!stop_requested() && train_loader.next(batch)) {
      const auto step_start = Clock::now();
      const Tensor images = batch.images.to(device), labels = batch.labels.to(device);
      const int64_t micro = images.size(0) / c.accum;
      probe_now = batch_index == steps_per_epoch - 1;
      amp::TrainStep::Result r = train_step.run([&](int i) {
        const Tensor x = c.accum == 1 ? images : images.slice(i * micro, (i + 1) * micro);
        const Tensor y = c.accum == 1 ? labels : labels.slice(i * micro, (i + 1) * micro);
        return cross_entropy(net(x), y, {c.label_smoothing});
      });
      if (group) {  // the global batch's mean loss, and whether any rank was asked to stop
        const Tensor shared = tensor(std::vector<double>{r.loss / world, g_stop_requested ? 1.0 : 0.0}, {2});
        group->all_reduce(shared);
        r.loss = shared.to_vector<double>()[0];
        stop_agreed = shared.to_vector<double>()[1] > 0.0;
      }
      if (static_scale) scaler.update(*static_scale);
      ++step;
      if (lookahead && step % kLookaheadEvery == 0) {
        const double progress = static_cast<double>(step) / static_cast<double>(total_steps);
        lookahead->update(std::pow(0.95, kLookaheadEvery) * progress * progress * progress);
      }
      ++batch_index;
      if (r.non_finite_loss) {
        // Poisoned data or divergence: the update was skipped (by the scaler or by TrainStep).
        ++nonfinite_total;
        if (main_rank) warn("epoch " + std::to_string(epoch + 1) + ", batch " + std::to_string(batch_index) + " (step " +
             std::to_string(step) + "): the loss is " + std::to_string(r.loss) + "; the update was skipped");
        metrics << json{{"type", "nonfinite"}, {"step", step}, {"epoch", epoch}, {"batch", batch_index - 1}}.dump()
                << "\n";
        metrics.flush();
        DEMI_CHECK(++nonfinite_in_a_row < c.max_nonfinite_steps, "stopping: ", nonfinite_in_a_row,
                   " steps in a row had a non-finite loss (the last: epoch ", epoch + 1, ", batch ", batch_index,
                   "). The data holds inf/NaN or training diverged (try a lower --lr or --clip); no update was "
                   "taken from those steps and the checkpoint in '", c.out_dir, "' is untouched: fix the cause and "
                   "--resume ", c.out_dir);
      } else {
        nonfinite_in_a_row = 0;
      }
      if (!r.non_finite_loss) {
        loss_sum += r.loss;
        ++finite_losses;
        loss_since_record += r.loss;
        ++steps_since_record;
      }
      epoch_images += images.size(0) * world;
      images_seen += images.size(0) * world;
      const double ips = static_cast<double>(epoch_images) / seconds_since(epoch_start);
      if (step % log_every == 0) {
        metrics << json{{"type", "step"}, {"step", step}, {"epoch", epoch}, {"loss", r.loss},
                        {"loss_mean", loss_since_record / static_cast<double>(std::max<int64_t>(1, steps_since_record))}, {"lr", opt->lr(0)},
                        {"loss_scale", scaler.get_scale()}, {"skipped_steps", scaler.steps_skipped()},
                        {"grad_norm", r.grad_norm}, {"images_per_s", ips},
                        {"step_ms", 1000.0 * seconds_since(step_start)}}.dump()
                << "\n";
        metrics.flush();
        loss_since_record = 0.0;
        steps_since_record = 0;
      }
      batches_done_in_epoch = batch_index;
      const double eta = (steps_per_epoch - batch_index) * seconds_since(epoch_start) /
                         static_cast<double>(batch_index - first_batch);
      std::ostringstream line;
      line << "epoch " << epoch + 1 << "/" << c.epochs << " " << std::setw(4) << batch_index << "/" << steps_per_epoch
           << " loss " << std::fixed << std::setprecision(4) << loss_sum / static_cast<double>(std::max<int64_t>(1, finite_losses))
           << " "
           << std::setprecision(0) << ips << " img/s scale " << scaler.get_scale() << " ETA " << format_duration(eta);
      if (tty) {
        out << "\r" << line.str() << std::flush;
      } else if (batch_index % log_every == 0 || seconds_since(last_plain_line) >= kPlainLineSeconds) {
        out << line.str() << std::endl;  // flushed: logs and `| tee` show progress as it happens
        last_plain_line = Clock::now();
      }
    }
    if (tty) out << "\n";
    if (stop_requested() && batch_index < steps_per_epoch) {
      out << "stopping after step " << step << " (epoch " << epoch + 1 << ", batch " << batch_index
                << "); --resume " << c.out_dir << " continues from there\n";
      break;
    }
    const bool last_epoch = epoch + 1 == c.epochs;
    if (last_epoch && lookahead) lookahead->update(1.0);  // airbench's final sync: end on the average
    // Test-time augmentation costs 1-5 more forward passes: only the final model gets it.
    const Accuracy scores = evaluate(*model, test_loader, device, dtype, group.get(), last_epoch ? c.tta : 0);
    plain_accuracy = scores.plain;
    accuracy = scores.augmented;
    best_accuracy = std::max({best_accuracy, accuracy, plain_accuracy});
    epochs_done = epoch + 1;
    batches_done_in_epoch = 0;
    const double epoch_time = seconds_since(epoch_start);
    json record = {{"type", "epoch"}, {"epoch", epoch}, {"step", step},
                   {"train_loss", finite_losses > 0 ? loss_sum / static_cast<double>(finite_losses) : 0.0},
                   {"test_accuracy", plain_accuracy}, {"lr", opt->lr(0)}, {"loss_scale", scaler.get_scale()},
                   {"skipped_steps", scaler.steps_skipped()},
                   {"images_per_s", static_cast<double>(epoch_images) / epoch_time}, {"epoch_time_s", epoch_time},
                   {"grad_underflow", underflow}};
    if (last_epoch && c.tta > 0) record["test_accuracy_tta"] = accuracy;
    metrics << record.dump() << "\n";
    metrics.flush();
    out << "epoch " << epoch + 1 << ": test accuracy " << std::setprecision(2) << 100.0 * plain_accuracy << "%";
    if (last_epoch && c.tta > 0) out << ", " << 100.0 * accuracy << "% with test-time augmentation " << c.tta;
    out << " (" << std::setprecision(1) << epoch_time << " s)" << std::endl;
    checkpoint_now(epochs_done);
    if (main_rank) write_report(c.out_dir);
  }
  if (batches_done_in_epoch > 0) checkpoint_now(epochs_done);  // stopped inside an epoch

  // Summary
  const double total_time = seconds_since(run_start);
  const MemoryReport memory = memory_report(device);
  json summary = {{"model", name_of(c.model)},
                  {"precision", name_of(c.precision)},
                  {"half_params", c.half_params}, {"master_weights", name_of(c.master_weights)},
                  {"rounding", name_of(c.rounding)},
                  {"device", device.str()}, {"cpu_isa", backend::cpu_isa()},
                  {"epochs", epochs_done},
                  {"time_s", total_time},
                  {"images_per_s", total_time > 0 ? static_cast<double>(images_seen) / total_time : 0.0},
                  {"recipe", name_of(c.recipe)},
                  {"final_test_accuracy", accuracy},
                  {"final_test_accuracy_without_tta", plain_accuracy}, {"tta", c.tta},
                  {"best_test_accuracy", best_accuracy},
                  {"steps_skipped", scaler.steps_skipped()}, {"nonfinite_loss_steps", nonfinite_total},
                  {"final_loss_scale", scaler.get_scale()}};
  json peak = json::object();
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    peak[memory_category_name(static_cast<MemoryCategory>(i))] = memory.by_category[i].peak;
  }
  summary["peak_memory_bytes"] = peak;
  if (main_rank) write_file_atomically(c.out_dir + "/summary.json", summary.dump(2) + "\n");
  out << "\n"
            << std::left << std::setw(24) << "precision" << name_of(c.precision) << (c.half_params ? " (half params)" : "") << "\n"
            << std::setw(24) << "epochs" << epochs_done << "\n"
            << std::setw(24) << "time" << format_duration(total_time) << "\n"
            << std::setw(24) << "images/s" << std::setprecision(0) << summary["images_per_s"].get<double>() << "\n"
            << std::setw(24) << "final test accuracy" << std::setprecision(2) << 100.0 * accuracy << "%"
            << (c.tta > 0 ? " (test-time augmentation " + std::to_string(c.tta) + "; without: " +
                                percent(plain_accuracy) + ")"
                          : std::string()) << "\n"
            << std::setw(24) << "best test accuracy" << 100.0 * best_accuracy << "%\n"
            << std::setw(24) << "steps skipped" << scaler.steps_skipped() + (scaler.is_enabled() ? 0 : nonfinite_total)
            << (nonfinite_total > 0 ? " (" + std::to_string(nonfinite_total) + " with a non-finite loss)" : "") << "\n"
            << std::setw(24) << "final loss scale" << std::setprecision(0) << scaler.get_scale() << "\n"
            << "peak memory by category:\n"
            << memory.str() << "outputs in " << c.out_dir << " (metrics.jsonl, report.html, summary.json, checkpoint)\n";
  return accuracy;
}

}  // namespace demi::train
