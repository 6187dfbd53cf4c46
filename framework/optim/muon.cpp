// optim::Muon: the Newton-Schulz orthogonalisation and the per-matrix update, in framework ops
// (so it runs on any backend); SGD groups take the shared SGD update (sgd_update.h).
#include "framework/optim/muon.h"

#include <algorithm>
#include <cmath>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace demi::optim {
namespace {

Tensor frobenius_norm(const Tensor& x) { return sqrt(sum(x * x)); }

}  // namespace

Tensor newton_schulz_orthogonalize(const Tensor& x, int steps, double eps) {
  DEMI_CHECK(x.dim() == 2 && (x.dtype() == DType::F32 || x.dtype() == DType::F64),
             "newton_schulz_orthogonalize: expects an fp32 or fp64 matrix, got ", x.dtype(), " ", x.shape());
  DEMI_CHECK(steps >= 0, "newton_schulz_orthogonalize: steps must be >= 0, got ", steps);
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  NoGradGuard no_grad;
  Tensor X = x / (frobenius_norm(x) + eps);  // every singular value <= 1, where the iteration converges
  for (int s = 0; s < steps; ++s) {
    const Tensor A = linear(X, X);  // X X^T
    const Tensor B = A * b + matmul(A, A) * c;
    X = X * a + matmul(B, X);
  }
  return X;
}

Muon::Muon(const std::vector<Tensor>& params, const Options& options) { add_param_group(params, options); }

void Muon::add_param_group(const std::vector<Tensor>& params, const Options& o) {
  DEMI_CHECK(o.lr >= 0.0, "Muon: learning rate must be >= 0, got ", o.lr);
  DEMI_CHECK(o.momentum >= 0.0 && o.momentum < 1.0, "Muon: momentum must be in [0, 1), got ", o.momentum);
  DEMI_CHECK(o.weight_decay >= 0.0, "Muon: weight_decay must be >= 0, got ", o.weight_decay);
  DEMI_CHECK(o.ns_steps >= 1, "Muon: ns_steps must be >= 1, got ", o.ns_steps);
  for (size_t i = 0; i < params.size(); ++i) {
    DEMI_CHECK(params[i].defined() && params[i].dim() >= 2, "Muon: parameter ", i, " of group ", groups_.size(),
               " has shape ", params[i].defined() ? params[i].shape() : Shape{},
               "; Muon orthogonalises matrices (2-D, or filters taken as [out, rest]): put biases and other "
               "vectors in an SGD group (add_param_group with SGD::Options)");
  }
  add_params(params, o.master_weights, "Muon");
  groups_.emplace_back(o);
  momentum_.add_group(params.size());
}

void Muon::add_param_group(const std::vector<Tensor>& params, const SgdOptions& o) {
  check_sgd_options(o);
  add_params(params, o.master_weights, "SGD");
  groups_.emplace_back(o);
  momentum_.add_group(params.size());
}

double Muon::lr(size_t g) const {
  return std::visit([](const auto& o) { return o.lr; }, groups_.at(g));
}

void Muon::set_lr(size_t g, double lr) {
  std::visit([lr](auto& o) { o.lr = lr; }, groups_.at(g));
}

double Muon::momentum(size_t g) const {
  return std::visit([](const auto& o) { return o.momentum; }, groups_.at(g));
}

void Muon::set_momentum(size_t g, double momentum) {
  std::visit([momentum](auto& o) { o.momentum = momentum; }, groups_.at(g));
}

void Muon::step() {
  NoGradGuard no_grad;
  for_each_gradient([&](size_t g, size_t i, const Slot& slot, const Tensor& grad) {
    if (const auto* muon = std::get_if<Options>(&groups_[g])) {
      muon_update(*muon, g, i, slot, grad);
    } else {
      const SgdOptions& o = std::get<SgdOptions>(groups_[g]);
      sgd_update(o, slot.param, slot.master, grad, momentum_, g, i, write_rounding(g, i, o.rounding, o.rounding_seed));
    }
  });
}

std::vector<std::pair<std::string, Tensor>> Muon::slot_state(size_t g, size_t i) const { return momentum_.state(g, i); }

void Muon::load_slot_state(size_t g, size_t i, std::map<std::string, Tensor>& named) {
  const Slot& slot = slots_[g][i];
  momentum_.restore(g, i, take_state(named, "momentum_buffer", slot, MomentumBuffers::dtype_for(slot.param)));
}

void Muon::muon_update(const Options& o, size_t g, size_t i, const Slot& slot, const Tensor& grad) {
  const double lr = o.lr;  // as the scheduler set it
  const DType math = slot.param.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor g32 = grad.to(math);

  // torch.optim.Muon's momentum: an exponential average (the 1 - momentum factor cancels in the
  // normalisation below, so this is also Keller Jordan's buf = momentum * buf + grad).
  Tensor& buffer = momentum_.at(g, i, slot.param);
  buffer.copy_(buffer * o.momentum + g32 * (1.0 - o.momentum));
  const Tensor direction = o.nesterov ? g32 * (1.0 - o.momentum) + buffer * o.momentum : buffer;

  const Shape& shape = slot.param.shape();
  const int64_t rows = shape[0];
  const int64_t cols = slot.param.numel() / std::max<int64_t>(rows, 1);
  if (rows == 0 || cols == 0) return;
  const Tensor update = newton_schulz_orthogonalize(direction.reshape({rows, cols}), o.ns_steps).reshape(shape);
  // torch's default lr adjustment: tall matrices step by sqrt(rows / cols) more.
  const double adjusted_lr = lr * std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols)));

  const Tensor& target = slot.master.defined() ? slot.master : slot.param;
  Tensor w = target.to(math);
  if (o.normalize_weights) w = w * (std::sqrt(static_cast<double>(rows)) / (frobenius_norm(w) + 1e-30));
  if (o.weight_decay != 0.0) w = w * (1.0 - lr * o.weight_decay);
  w = w - update * adjusted_lr;
  target.copy_(w);
  if (slot.master.defined()) slot.param.copy_(slot.master);
}

}  // namespace demi::optim
