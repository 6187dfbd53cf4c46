// The end of a run in numbers: summary.json and the console's closing table are both drawn from
// one RunSummary.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "framework/core/device.h"
#include "framework/tensor/allocator.h"
#include "train/config.h"

namespace demi::train {

struct RunSummary {
  int epochs = 0;               // completed
  double time_s = 0.0;          // of the training loop
  double images_per_s = 0.0;
  double accuracy = 0.0;        // the final model's, with test-time augmentation when --tta asks
  double plain_accuracy = 0.0;  // without
  double best_accuracy = 0.0;
  int64_t steps_skipped = 0;    // by the GradScaler
  int64_t nonfinite_steps = 0;  // steps with an inf/NaN loss (skipped too)
  bool scaler_enabled = false;
  double final_loss_scale = 1.0;
  MemoryReport memory;          // peaks since the loop started
};

// summary.json's object.
nlohmann::json summary_json(const TrainerConfig& c, const Device& device, const RunSummary& s);

// Writes summary_json to c.out_dir/summary.json (atomically).
void write_summary(const TrainerConfig& c, const Device& device, const RunSummary& s);

}  // namespace demi::train
