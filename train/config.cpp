// TrainerConfig's cross-flag checks and the option parsers that are not a table of names.
#include "train/config.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace demi::train {

void check_config(const TrainerConfig& c) {
  DEMI_CHECK(c.epochs >= 0 && c.batch_size >= 1 && c.accum >= 1 && c.batch_size % c.accum == 0,
             "--epochs must be >= 0, --batch-size >= 1, and --batch-size divisible by --accum (got ", c.batch_size,
             " and ", c.accum, ")");
  DEMI_CHECK(!c.half_params || c.precision != Precision::Fp32, "--half-params needs --precision fp16 or bf16");
  const bool stochastic = c.rounding == optim::Rounding::Stochastic;
  DEMI_CHECK(!stochastic || c.half_params, "--rounding stochastic rounds the half weights the optimizer "
             "writes: add --half-params (and --master-weights none to train them without fp32 masters)");
  DEMI_CHECK(!stochastic || c.optimizer != OptimizerKind::Muon, "--rounding stochastic: Muon writes its matrices "
             "through framework ops, which round to nearest; use --optimizer sgd or adamw");
  DEMI_CHECK(!c.cuda_graph || c.device.is_cuda(), "--cuda-graph captures the training step's CUDA kernels: add "
             "--device cuda");
  DEMI_CHECK(!c.cuda_graph || !stochastic, "--cuda-graph: stochastic rounding draws on the host each step, which a "
             "captured step would freeze; use --rounding nearest");
  DEMI_CHECK(!c.cuda_graph || c.optimizer != OptimizerKind::Muon, "--cuda-graph: Muon computes its step with "
             "host-side values a captured step would freeze; use --optimizer sgd or adamw");
}

DType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::Fp16: return DType::F16;
    case Precision::Bf16: return DType::BF16;
    case Precision::Fp32: return DType::F32;
  }
  DEMI_INTERNAL_CHECK(false, "unknown precision ", static_cast<int>(precision));
  return DType::F32;
}

std::optional<LossScale> parse_loss_scale(const std::string& text) {
  if (text == "dynamic") return LossScale{LossScale::Kind::Dynamic, 0.0};
  if (text == "none") return LossScale{LossScale::Kind::None, 0.0};
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (text.empty() || !end || *end != '\0' || !(s > 0) || !std::isfinite(s)) return std::nullopt;
  return LossScale{LossScale::Kind::Fixed, s};
}

std::string name_of(const LossScale& scale) {
  switch (scale.kind) {
    case LossScale::Kind::Dynamic: return "dynamic";
    case LossScale::Kind::None: return "none";
    case LossScale::Kind::Fixed: break;
  }
  std::ostringstream out;
  out << scale.value;
  return out.str();
}

}  // namespace demi::train
