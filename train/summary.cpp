// summary.json: what the run was and how it ended.
#include "train/summary.h"

#include "backends/kernels.h"
#include "framework/serialize/safetensors.h"

namespace demi::train {

nlohmann::json summary_json(const TrainerConfig& c, const Device& device, const RunSummary& s) {
  nlohmann::json summary = {{"model", name_of(c.model)},
                            {"precision", name_of(c.precision)},
                            {"half_params", c.half_params},
                            {"master_weights", name_of(c.master_weights)},
                            {"rounding", name_of(c.rounding)},
                            {"device", device.str()},
                            {"cpu_isa", backend::cpu_isa()},
                            {"cpu_bf16_route", backend::cpu_bf16_route()},
                            {"epochs", s.epochs},
                            {"time_s", s.time_s},
                            {"images_per_s", s.images_per_s},
                            {"recipe", name_of(c.recipe)},
                            {"final_test_accuracy", s.accuracy},
                            {"final_test_accuracy_without_tta", s.plain_accuracy},
                            {"tta", c.tta},
                            {"best_test_accuracy", s.best_accuracy},
                            {"steps_skipped", s.steps_skipped},
                            {"nonfinite_loss_steps", s.nonfinite_steps},
                            {"final_loss_scale", s.final_loss_scale}};
  nlohmann::json peak = nlohmann::json::object();
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    peak[memory_category_name(static_cast<MemoryCategory>(i))] = s.memory.by_category[i].peak;
  }
  summary["peak_memory_bytes"] = peak;
  return summary;
}

void write_summary(const TrainerConfig& c, const Device& device, const RunSummary& s) {
  write_file_atomically(c.out_dir + "/summary.json", summary_json(c, device, s).dump(2) + "\n");
}

}  // namespace demi::train
