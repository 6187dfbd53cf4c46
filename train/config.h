// TrainerConfig: what train_cifar runs, its option values already parsed into enums. Each enum's
// names (as the command line, state.json and summary.json spell them) live once, in OptionNames,
// so that the CLI, the checkpoint and the summary convert through the same table.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/device.h"
#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "framework/core/memory_format.h"
#include "framework/optim/optimizer.h"

namespace demi::train {

enum class Precision { Fp16, Bf16, Fp32 };  // Bf16 and Fp16: autocast (Fp16 with loss scaling)
enum class ModelKind { SmallCNN, AirNet, Cct7, Cct4 };  // Cct7: CCT-7/3x1, Cct4: CCT-4/3x2
enum class OptimizerKind { Sgd, AdamW, Muon };  // Muon: only with Recipe::AirbenchMuon
enum class ScheduleKind { OneCycle, Cosine, Linear, LinearDecay, Step, None };
enum class Recipe { Standard, Airbench, AirbenchMuon, Cct };  // see train/recipe.h

// --loss-scale: GradScaler's dynamic scale (fp16 only), none, or a fixed number.
struct LossScale {
  enum class Kind { Dynamic, None, Fixed };
  Kind kind = Kind::Dynamic;
  double value = 0.0;  // Kind::Fixed's scale
};

struct TrainerConfig {
  Precision precision = Precision::Fp32;
  Device device = Device::cpu();
  ModelKind model = ModelKind::SmallCNN;
  std::string data_dir;
  int epochs = 15;
  int64_t batch_size = 128;
  // The default recipe (SGD Nesterov, one-cycle to lr 0.1, label smoothing 0.1, batch 128, 15
  // epochs) is the one measured in docs/BENCHMARKS.md: SmallCNN 82.3% fp32, 82.7% bf16 on the CPU.
  double lr = 0.1;
  OptimizerKind optimizer = OptimizerKind::Sgd;
  double momentum = 0.9;             // SGD's (Nesterov) momentum
  double weight_decay = 5e-4;
  ScheduleKind schedule = ScheduleKind::OneCycle;
  double label_smoothing = 0.1;
  Recipe recipe = Recipe::Standard;
  int tta = 0;                       // test-time augmentation of the final evaluation: 0 none, 1 mirror, 2 mirror + translate
  bool lookahead = false;            // airbench's lookahead averaging every 5 steps
  bool half_params = false;          // model weights in the half dtype, fp32 masters in the optimizer
  optim::MasterWeights master_weights = optim::MasterWeights::Fp32;  // None: step the half weights directly
  optim::Rounding rounding = optim::Rounding::Nearest;               // how steps write half weights
  LossScale loss_scale;
  double clip = 0.0;
  int accum = 1;
  bool checkpoint_activations = false;  // each top-level block of the model recomputed in backward
  bool channels_last = false;           // model weights and input batches stored NHWC
  bool cuda_graph = false;              // the training step captured once and replayed (TrainStep)
  uint64_t seed = 0;
  std::string out_dir = "runs/latest";
  std::string resume_dir;
  int64_t train_subset = 0;  // 0: all
  int64_t test_subset = 0;
  int threads = 0;           // 0: all cores
  bool sync_batch_norm = false;  // data parallel: batch-norm statistics over the global batch
  int log_every = 0;  // steps between metrics records; 0: about 100 a run, at most every 50 steps
  int max_nonfinite_steps = 10;  // stop after this many steps in a row with an inf/NaN loss
  int64_t max_steps = 0;     // stop (and checkpoint, as on Ctrl-C) once this many steps are done; 0: no limit
};

// Checks what no single flag can: --batch-size against --accum, --half-params against
// --precision, --rounding against --half-params and --optimizer. Throws demi::Error naming the flags.
void check_config(const TrainerConfig& c);

// Whether the model is a CCT (cct7, cct4): its recipe is --recipe cct.
inline bool is_cct(ModelKind model) { return model == ModelKind::Cct7 || model == ModelKind::Cct4; }

// The compute dtype of a precision: float32, float16 or bfloat16.
DType compute_dtype(Precision precision);
// The memory format the input batches take: ChannelsLast under --channels-last.
inline MemoryFormat input_format(const TrainerConfig& c) {
  return c.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

// ---- names <-> enums -------------------------------------------------------------------------

// The flag an enum answers and its values' names, in the order --help lists them.
template <typename E>
struct OptionNames;

template <>
struct OptionNames<Precision> {
  static constexpr const char* kFlag = "--precision";
  static constexpr std::array<std::pair<Precision, const char*>, 3> kNames = {
      {{Precision::Fp16, "fp16"}, {Precision::Bf16, "bf16"}, {Precision::Fp32, "fp32"}}};
};
template <>
struct OptionNames<ModelKind> {
  static constexpr const char* kFlag = "--model";
  static constexpr std::array<std::pair<ModelKind, const char*>, 4> kNames = {
      {{ModelKind::SmallCNN, "SmallCNN"},
       {ModelKind::AirNet, "AirNet"},
       {ModelKind::Cct7, "cct7"},
       {ModelKind::Cct4, "cct4"}}};
};
template <>
struct OptionNames<OptimizerKind> {
  static constexpr const char* kFlag = "--optimizer";
  static constexpr std::array<std::pair<OptimizerKind, const char*>, 3> kNames = {
      {{OptimizerKind::Sgd, "sgd"}, {OptimizerKind::AdamW, "adamw"}, {OptimizerKind::Muon, "muon"}}};
};
template <>
struct OptionNames<ScheduleKind> {
  static constexpr const char* kFlag = "--schedule";
  static constexpr std::array<std::pair<ScheduleKind, const char*>, 6> kNames = {
      {{ScheduleKind::OneCycle, "onecycle"},
       {ScheduleKind::Cosine, "cosine"},
       {ScheduleKind::Linear, "linear"},
       {ScheduleKind::LinearDecay, "linear-decay"},
       {ScheduleKind::Step, "step"},
       {ScheduleKind::None, "none"}}};
};
template <>
struct OptionNames<Recipe> {
  static constexpr const char* kFlag = "--recipe";
  static constexpr std::array<std::pair<Recipe, const char*>, 4> kNames = {
      {{Recipe::Standard, "standard"}, {Recipe::Airbench, "airbench"}, {Recipe::AirbenchMuon, "airbench-muon"},
       {Recipe::Cct, "cct"}}};
};
template <>
struct OptionNames<optim::MasterWeights> {
  static constexpr const char* kFlag = "--master-weights";
  static constexpr std::array<std::pair<optim::MasterWeights, const char*>, 2> kNames = {
      {{optim::MasterWeights::Fp32, "fp32"}, {optim::MasterWeights::None, "none"}}};
};
template <>
struct OptionNames<optim::Rounding> {
  static constexpr const char* kFlag = "--rounding";
  static constexpr std::array<std::pair<optim::Rounding, const char*>, 2> kNames = {
      {{optim::Rounding::Nearest, "nearest"}, {optim::Rounding::Stochastic, "stochastic"}}};
};

// The name of an option value ("fp16", "airbench-muon").
template <typename E>
std::string name_of(E value) {
  for (const auto& [v, name] : OptionNames<E>::kNames) {
    if (v == value) return name;
  }
  DEMI_INTERNAL_CHECK(false, OptionNames<E>::kFlag, ": value ", static_cast<int>(value), " has no name");
  return {};
}

// Every name of an option's values, in --help's order.
template <typename E>
std::vector<std::string> names_of() {
  std::vector<std::string> names;
  for (const auto& [v, name] : OptionNames<E>::kNames) names.push_back(name);
  return names;
}

// The value a name stands for; throws demi::Error "--flag: 'x' is not one of a, b, c" otherwise.
template <typename E>
E from_name(const std::string& text) {
  std::string all;
  for (const auto& [v, name] : OptionNames<E>::kNames) {
    if (text == name) return v;
    all += (all.empty() ? "" : ", ") + std::string(name);
  }
  DEMI_THROW(OptionNames<E>::kFlag, ": '", text, "' is not one of ", all);
}

// --loss-scale's text: "dynamic", "none" or a positive finite number; nullopt for anything else.
std::optional<LossScale> parse_loss_scale(const std::string& text);
std::string name_of(const LossScale& scale);  // as --loss-scale spells it

}  // namespace demi::train
