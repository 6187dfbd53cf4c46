// train_cifar's console output, one method per kind of line.
#include "train/console.h"

#include <unistd.h>

#include <iomanip>
#include <sstream>

#include "backends/kernels.h"

namespace demi::train {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kPlainLineSeconds = 30.0;

// A stream for one line, numbers in fixed notation as every line prints them.
std::ostringstream fixed_line() {
  std::ostringstream line;
  line << std::fixed;
  return line;
}

}  // namespace

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

std::string progress_text(const ProgressLine& p) {
  std::ostringstream line = fixed_line();
  line << "epoch " << p.epoch + 1 << "/" << p.epochs << " " << std::setw(4) << p.batch << "/" << p.batches
       << " loss " << std::setprecision(4) << p.mean_loss << " " << std::setprecision(0) << p.images_per_s
       << " img/s scale " << p.loss_scale << " ETA " << format_duration(p.eta_s);
  return line.str();
}

Console::Console(const Environment& env) : Console(*env.out, !env.group && ::isatty(STDOUT_FILENO)) {}

void Console::data(int64_t train_images, int64_t test_images, const std::string& dir, double seconds) {
  std::ostringstream line = fixed_line();
  line << "data: " << train_images << " train / " << test_images << " test images from " << dir << " ("
       << std::setprecision(1) << seconds << " s)";
  out_ << line.str() << std::endl;
}

void Console::resumed(const std::string& dir, int epochs_done, int64_t step) {
  out_ << "resumed from " << dir << " after epoch " << epochs_done << " (step " << step << ")\n";
}

void Console::banner(const TrainerConfig& c, const Environment& env, int64_t steps_per_epoch) {
  std::ostringstream line;
  line << name_of(c.model) << " " << name_of(c.precision) << (c.half_params ? " (half params)" : "")
       << (c.channels_last ? " channels_last" : "") << (c.cuda_graph ? " cuda_graph" : "") << " on " << env.device;
  if (env.device.is_cpu()) {
    line << " (" << backend::cpu_isa() << " kernels, bf16 route " << backend::cpu_bf16_route() << "; "
         << backend::cpu_tuning() << ")";
  }
  if (env.group) {
    line << " x " << env.world << " processes (" << env.group->backend() << ", " << c.batch_size / env.world
         << " images each)";
  }
  line << ", " << c.epochs << " epochs of " << steps_per_epoch << " steps, batch " << c.batch_size
       << (c.recipe != Recipe::Standard ? ", recipe " + name_of(c.recipe) : std::string());
  out_ << line.str() << std::endl;
  last_plain_line_ = Clock::now();
}

void Console::progress(const ProgressLine& p, int64_t every) {
  if (tty_) {
    out_ << "\r" << progress_text(p) << std::flush;
    return;
  }
  if (p.batch % every == 0 ||
      std::chrono::duration<double>(Clock::now() - last_plain_line_).count() >= kPlainLineSeconds) {
    out_ << progress_text(p) << std::endl;  // flushed: logs and `| tee` show progress as it happens
    last_plain_line_ = Clock::now();
  }
}

void Console::end_of_epoch_progress() {
  if (tty_) out_ << "\n";
}

void Console::stopped(int64_t step, int epoch, int64_t batch, const std::string& out_dir) {
  out_ << "stopping after step " << step << " (epoch " << epoch + 1 << ", batch " << batch << "); --resume "
       << out_dir << " continues from there\n";
}

void Console::epoch(int epoch, double accuracy, std::optional<double> tta_accuracy, int tta, double seconds) {
  std::ostringstream line = fixed_line();
  line << "epoch " << epoch + 1 << ": test accuracy " << std::setprecision(2) << 100.0 * accuracy << "%";
  if (tta_accuracy) line << ", " << 100.0 * *tta_accuracy << "% with test-time augmentation " << tta;
  line << " (" << std::setprecision(1) << seconds << " s)";
  out_ << line.str() << std::endl;
}

void Console::summary(const TrainerConfig& c, const RunSummary& s) {
  std::ostringstream t = fixed_line();
  const std::string tta = c.tta > 0 ? " (test-time augmentation " + std::to_string(c.tta) +
                                          "; without: " + percent(s.plain_accuracy) + ")"
                                    : std::string();
  const std::string nonfinite =
      s.nonfinite_steps > 0 ? " (" + std::to_string(s.nonfinite_steps) + " with a non-finite loss)" : "";
  t << "\n"
    << std::left << std::setw(24) << "precision" << name_of(c.precision) << (c.half_params ? " (half params)" : "")
    << "\n"
    << std::setw(24) << "epochs" << s.epochs << "\n"
    << std::setw(24) << "time" << format_duration(s.time_s) << "\n"
    << std::setw(24) << "images/s" << std::setprecision(0) << s.images_per_s << "\n"
    << std::setw(24) << "final test accuracy" << std::setprecision(2) << 100.0 * s.accuracy << "%" << tta << "\n"
    << std::setw(24) << "best test accuracy" << 100.0 * s.best_accuracy << "%\n"
    // Without a scaler, the steps with a non-finite loss are the skipped ones (TrainStep skips them).
    << std::setw(24) << "steps skipped" << s.steps_skipped + (s.scaler_enabled ? 0 : s.nonfinite_steps) << nonfinite
    << "\n"
    << std::setw(24) << "final loss scale" << std::setprecision(0) << s.final_loss_scale << "\n"
    << "peak memory by category:\n"
    << s.memory.str() << "outputs in " << c.out_dir << " (metrics.jsonl, report.html, summary.json, checkpoint)\n";
  out_ << t.str();
}

void Console::test_accuracy(double accuracy, int tta) {
  out_ << "test accuracy: " << percent(accuracy)
       << (tta > 0 ? " (test-time augmentation " + std::to_string(tta) + ")" : std::string()) << "\n";
}

}  // namespace demi::train
