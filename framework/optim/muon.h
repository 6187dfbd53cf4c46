// optim::Muon: momentum SGD whose update for a matrix is replaced by the nearest semi-orthogonal
// matrix (all singular values ~1), found by a few Newton-Schulz iterations: every direction of
// the weight moves at the same rate, however unevenly the raw gradient spreads over them. The
// update is torch.optim.Muon's (PyTorch 2.9); airbench94_muon trains AirNet's filters with it
// (airbench94_muon.py in Keller Jordan's https://github.com/KellerJordan/cifar10-airbench).
//
// Muon groups hold matrices: 2-D weights, or convolution filters [O, C, KH, KW] taken as
// [O, C*KH*KW]. Everything else (biases, norms, often the first and last layers) goes in SGD
// groups: add_param_group with SGD::Options, stepped by the same update as optim::SGD
// (sgd_update.h). One optimizer drives both kinds, so the GradScaler, clipping and schedulers see
// one parameter list (Keller Jordan's MuonWithAuxAdam pattern, with airbench's Nesterov SGD for
// the auxiliary groups). A group's kind is the type of the options it was added with.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "framework/optim/optimizer.h"
#include "framework/optim/sgd_update.h"

namespace demi::optim {

// Newton-Schulz iteration of Muon: for x [rows, cols] (fp32 or fp64), x / ||x||_F followed by
// `steps` quintic iterations X <- a X + (b A + c A^2) X with A = X X^T and (a, b, c) =
// (3.4445, -4.7750, 2.0315). The result has x's singular vectors and singular values in about
// [0.5, 1.5] after 5 steps (the coefficients trade exact convergence for speed). Computed with
// the rows x rows Gram matrix whatever the shape: the same polynomial as the transposed form, in
// more flops for tall matrices.
Tensor newton_schulz_orthogonalize(const Tensor& x, int steps, double eps = 1e-7);

class Muon : public Optimizer {
 public:
  struct Options {
    double lr = 1e-3;  // torch.optim.Muon's defaults
    double momentum = 0.95;
    bool nesterov = true;
    double weight_decay = 0.1;  // decoupled: p *= 1 - lr * weight_decay
    int ns_steps = 5;
    // airbench94_muon: before each step rescale the weight to Frobenius norm sqrt(rows) (rows of
    // unit norm on average). For weights followed by a normalisation, whose scale is arbitrary,
    // this keeps the relative step size at lr for the whole run.
    bool normalize_weights = false;
    MasterWeights master_weights = MasterWeights::Fp32;
  };

  Muon(const std::vector<Tensor>& params, const Options& options);
  // A group of matrices with Muon updates.
  void add_param_group(const std::vector<Tensor>& params, const Options& options);
  // A group stepped by torch.optim.SGD's update (any shape), exactly as optim::SGD steps it.
  void add_param_group(const std::vector<Tensor>& params, const SgdOptions& options);
  void step() override;
  double lr(size_t group) const override;
  void set_lr(size_t group, double lr) override;
  bool has_momentum() const override { return true; }
  double momentum(size_t group) const override;
  void set_momentum(size_t group, double momentum) override;

  // Whether group g takes Muon updates (else SGD ones).
  bool is_muon_group(size_t g) const { return std::holds_alternative<Options>(groups_.at(g)); }

 private:
  void muon_update(const Options& o, size_t g, size_t i, const Slot& slot, const Tensor& grad);
  // "momentum_buffer" once the parameter has stepped, for both kinds of group.
  std::vector<std::pair<std::string, Tensor>> slot_state(size_t group, size_t index) const override;
  void load_slot_state(size_t group, size_t index, std::map<std::string, Tensor>& named) override;

  std::vector<std::variant<Options, SgdOptions>> groups_;
  MomentumBuffers momentum_;  // Muon's and SGD's alike
};

}  // namespace demi::optim
