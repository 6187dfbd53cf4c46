// What train_cifar prints: the data line, the banner, the progress line (rewritten in place on a
// terminal; whole lines in a log), each epoch's accuracy, the stop notice and the closing table.
// Every method writes whole lines to the environment's stream (nothing on ranks other than 0).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "train/config.h"
#include "train/environment.h"
#include "train/summary.h"

namespace demi::train {

// "82.30%"
std::string percent(double fraction);
// "3m07s"
std::string format_duration(double seconds);

// One progress line: where the epoch is, its mean loss, the speed, the loss scale and the ETA.
struct ProgressLine {
  int epoch = 0;  // from 0
  int epochs = 0;
  int64_t batch = 0;  // batches done in the epoch
  int64_t batches = 0;
  double mean_loss = 0.0;
  double images_per_s = 0.0;
  double loss_scale = 1.0;
  double eta_s = 0.0;
};
std::string progress_text(const ProgressLine& p);

class Console {
 public:
  // tty: rewrite the progress line in place ("\r"); otherwise print it as whole lines.
  Console(std::ostream& out, bool tty) : out_(out), tty_(tty) {}
  // A terminal on a single process's stdout (mpirun gives every rank a pseudo-terminal even when
  // its own output is a pipe: plain lines there).
  explicit Console(const Environment& env);

  void data(int64_t train_images, int64_t test_images, const std::string& dir, double seconds);
  void resumed(const std::string& dir, int epochs_done, int64_t step);
  // Also starts the clock of the 30-second rule of plain progress lines.
  void banner(const TrainerConfig& c, const Environment& env, int64_t steps_per_epoch);
  // In place on a terminal; otherwise a line every `every` batches and at least every 30 s (big
  // batches of a slow model take minutes for 50 steps).
  void progress(const ProgressLine& p, int64_t every);
  void end_of_epoch_progress();  // ends the in-place line
  void stopped(int64_t step, int epoch, int64_t batch, const std::string& out_dir);
  // tta_accuracy: the final epoch's, when --tta scored it.
  void epoch(int epoch, double accuracy, std::optional<double> tta_accuracy, int tta, double seconds);
  void summary(const TrainerConfig& c, const RunSummary& s);
  void test_accuracy(double accuracy, int tta);  // --eval-only's answer

 private:
  std::ostream& out_;
  bool tty_;
  std::chrono::steady_clock::time_point last_plain_line_ = std::chrono::steady_clock::now();
};

}  // namespace demi::train
