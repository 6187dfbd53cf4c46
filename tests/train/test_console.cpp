// train_cifar's console lines, character for character: the progress line, an epoch's result,
// the stop notice and the closing table, and when plain progress lines are printed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "train/console.h"

namespace demi {
namespace {

using testing::HasSubstr;

train::ProgressLine line_at(int64_t batch) {
  return {0, 15, batch, 390, 2.302585, 1234.4, 65536.0, 65.0};
}

TEST(Console, TheProgressLine) {
  EXPECT_EQ(train::progress_text(line_at(3)), "epoch 1/15    3/390 loss 2.3026 1234 img/s scale 65536 ETA 1m05s");
  EXPECT_EQ(train::percent(0.8234), "82.34%");
  EXPECT_EQ(train::format_duration(3599.6), "60m00s");
}

TEST(Console, PlainProgressLinesEveryFewBatchesAndInPlaceOnATerminal) {
  std::ostringstream plain_out, tty_out;
  train::Console plain(plain_out, /*tty=*/false), tty(tty_out, /*tty=*/true);
  for (int64_t b = 1; b <= 4; ++b) {
    plain.progress(line_at(b), 2);
    tty.progress(line_at(b), 2);
  }
  plain.end_of_epoch_progress();
  tty.end_of_epoch_progress();
  EXPECT_EQ(plain_out.str(), train::progress_text(line_at(2)) + "\n" + train::progress_text(line_at(4)) + "\n");
  EXPECT_EQ(tty_out.str().back(), '\n');
  EXPECT_THAT(tty_out.str(), HasSubstr("\r" + train::progress_text(line_at(3)) + "\r"));
}

TEST(Console, EpochStopAndTheClosingTable) {
  std::ostringstream out;
  train::Console console(out, false);
  console.epoch(0, 0.4567, std::nullopt, 0, 12.34);
  console.epoch(9, 0.9, 0.925, 2, 3.0);
  console.stopped(27, 1, 7, "runs/a");
  EXPECT_EQ(out.str(),
            "epoch 1: test accuracy 45.67% (12.3 s)\n"
            "epoch 10: test accuracy 90.00%, 92.50% with test-time augmentation 2 (3.0 s)\n"
            "stopping after step 27 (epoch 2, batch 7); --resume runs/a continues from there\n");

  std::ostringstream table;
  train::Console summary(table, false);
  train::TrainerConfig c;
  c.precision = train::Precision::Fp16;
  c.out_dir = "runs/b";
  train::RunSummary s;
  s.epochs = 3;
  s.time_s = 125.0;
  s.images_per_s = 812.6;
  s.accuracy = s.plain_accuracy = 0.61;
  s.best_accuracy = 0.62;
  s.steps_skipped = 4;
  s.scaler_enabled = true;
  s.final_loss_scale = 8192.0;
  summary.summary(c, s);
  EXPECT_THAT(table.str(), HasSubstr("\nprecision               fp16\n"
                                     "epochs                  3\n"
                                     "time                    2m05s\n"
                                     "images/s                813\n"
                                     "final test accuracy     61.00%\n"
                                     "best test accuracy      62.00%\n"
                                     "steps skipped           4\n"
                                     "final loss scale        8192\n"
                                     "peak memory by category:\n"));
  EXPECT_THAT(table.str(), HasSubstr("outputs in runs/b (metrics.jsonl, report.html, summary.json, checkpoint)\n"));
}

}  // namespace
}  // namespace demi
