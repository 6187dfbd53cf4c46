// metrics.jsonl's writer, its trimming on resume, and the gradient-underflow probe.
#include "train/metrics_log.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "framework/serialize/safetensors.h"

namespace demi::train {
namespace {

using json = nlohmann::json;

// Fractions of a gradient's elements that are exactly zero, subnormal or inf/NaN in `format`
// (the values reached the parameter through that format, so classifying them there is exact).
json classify(const Tensor& grad, DType format) {
  const std::vector<float> g = grad.to_vector<float>();
  const double smallest_normal = format == DType::F16 ? 6.103515625e-5 : 1.1754943508222875e-38;
  double zero = 0, subnormal = 0, non_finite = 0;
  for (float v : g) {
    const double a = std::fabs(static_cast<double>(v));
    if (!std::isfinite(v)) non_finite += 1;
    else if (a == 0.0) zero += 1;
    else if (a < smallest_normal) subnormal += 1;
  }
  const double n = std::max<double>(1.0, static_cast<double>(g.size()));
  return {{"zero", zero / n}, {"subnormal", subnormal / n}, {"inf", non_finite / n}};
}

}  // namespace

int64_t log_every(const TrainerConfig& c, int64_t total_steps) {
  return c.log_every > 0 ? c.log_every : std::clamp<int64_t>(total_steps / 100, 1, 50);
}

MetricsLog::MetricsLog(const std::string& out_dir, bool write, std::optional<int64_t> resumed_step, int64_t every)
    : write_(write), every_(every) {
  if (!write_) return;
  std::filesystem::create_directories(out_dir);
  const std::string path = out_dir + "/metrics.jsonl";
  if (resumed_step) keep_records_up_to(path, *resumed_step);
  file_.open(path, resumed_step ? std::ios::app : std::ios::trunc);
  DEMI_CHECK(file_.good(), "cannot write '", out_dir, "/metrics.jsonl'");
}

void MetricsLog::write(const json& record) {
  if (!write_) return;
  file_ << record.dump() << "\n";
  file_.flush();
}

void MetricsLog::step(const StepEntry& e) {
  if (e.finite) {
    loss_since_record_ += e.loss;
    ++steps_since_record_;
  }
  if (e.step % every_ != 0) return;
  write({{"type", "step"}, {"step", e.step}, {"epoch", e.epoch}, {"loss", e.loss},
         {"loss_mean", loss_since_record_ / static_cast<double>(std::max<int64_t>(1, steps_since_record_))},
         {"lr", e.lr}, {"loss_scale", e.loss_scale}, {"skipped_steps", e.skipped_steps},
         {"grad_norm", e.grad_norm}, {"images_per_s", e.images_per_s}, {"step_ms", e.step_ms}});
  loss_since_record_ = 0.0;
  steps_since_record_ = 0;
}

void MetricsLog::nonfinite(int64_t step, int epoch, int64_t batch) {
  write({{"type", "nonfinite"}, {"step", step}, {"epoch", epoch}, {"batch", batch}});
}

void MetricsLog::epoch(const EpochEntry& e) {
  json record = {{"type", "epoch"}, {"epoch", e.epoch}, {"step", e.step}, {"train_loss", e.train_loss},
                 {"test_accuracy", e.test_accuracy}, {"lr", e.lr}, {"loss_scale", e.loss_scale},
                 {"skipped_steps", e.skipped_steps}, {"images_per_s", e.images_per_s},
                 {"epoch_time_s", e.epoch_time_s}, {"grad_underflow", e.grad_underflow}};
  if (e.test_accuracy_tta) record["test_accuracy_tta"] = *e.test_accuracy_tta;
  write(record);
}

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

UnderflowProbe::UnderflowProbe(std::vector<std::pair<std::string, Tensor>> named_parameters, DType format,
                               bool enabled)
    : named_(std::move(named_parameters)), format_(format), enabled_(enabled) {}

void UnderflowProbe::capture() {
  if (!armed_ || !enabled_) return;
  last_ = json::object();
  for (const auto& [name, p] : named_) {
    if (!p.grad().defined()) continue;
    last_[name] = classify(p.grad(), format_);
  }
}

}  // namespace demi::train
