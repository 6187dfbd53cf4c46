// optim::Muon: the Newton-Schulz orthogonalisation against the same iteration in double and
// against the SVD, the step against torch.optim.Muon's formula (computed here with Eigen), SGD
// groups stepping exactly as optim::SGD, masters, state round trips and the errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using testing::HasSubstr;
using Matrix = Eigen::MatrixXd;

// A tensor's values as a rows x (numel / rows) row-major double matrix.
Matrix as_matrix(const Tensor& t) {
  const std::vector<double> v = t.to(DType::F64).to_vector<double>();
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  Matrix m(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) m(r, c) = v[static_cast<size_t>(r * cols + c)];
  }
  return m;
}

Matrix newton_schulz_reference(Matrix x, int steps) {
  x /= x.norm() + 1e-7;
  for (int s = 0; s < steps; ++s) {
    const Matrix a = x * x.transpose();
    const Matrix b = -4.7750 * a + 2.0315 * a * a;
    x = 3.4445 * x + b * x;
  }
  return x;
}

TEST(Muon, NewtonSchulzIsTheQuinticIterationAndKeepsTheSingularVectors) {
  Generator gen(3);
  for (const Shape& shape : {Shape{16, 40}, Shape{40, 16}, Shape{10, 10}}) {
    const Tensor x = randn(shape, gen);
    const Tensor y = optim::newton_schulz_orthogonalize(x, 5);
    ASSERT_EQ(y.shape(), x.shape());
    const Matrix ym = as_matrix(y);
    EXPECT_LT((ym - newton_schulz_reference(as_matrix(x), 5)).cwiseAbs().maxCoeff(), 2e-5) << testing::PrintToString(shape);

    // y = U f(S) V^T with x = U S V^T: U^T y V is diagonal, with every entry in [0.5, 1.5].
    Eigen::JacobiSVD<Matrix> svd(as_matrix(x), Eigen::ComputeThinU | Eigen::ComputeThinV);
    const Matrix d = svd.matrixU().transpose() * ym * svd.matrixV();
    for (int64_t r = 0; r < d.rows(); ++r) {
      for (int64_t c = 0; c < d.cols(); ++c) {
        if (r == c) {
          EXPECT_GT(d(r, c), 0.5) << testing::PrintToString(shape);
          EXPECT_LT(d(r, c), 1.5) << testing::PrintToString(shape);
        } else {
          EXPECT_LT(std::fabs(d(r, c)), 1e-4) << testing::PrintToString(shape);
        }
      }
    }
  }
  // Zero steps: only the normalisation.
  const Tensor x = randn({3, 5}, gen);
  EXPECT_NEAR(as_matrix(optim::newton_schulz_orthogonalize(x, 0)).norm(), 1.0, 1e-6);
  EXPECT_THAT(test::error_of([&] { optim::newton_schulz_orthogonalize(randn({2, 2, 2}, gen), 5); }),
              HasSubstr("matrix"));
}

// torch.optim.Muon's step for one parameter, in double.
struct MuonReference {
  Matrix param, buffer;
  void step(const Matrix& grad, double lr, double momentum, bool nesterov, double weight_decay, int ns_steps) {
    if (buffer.size() == 0) buffer = Matrix::Zero(grad.rows(), grad.cols());
    buffer = momentum * buffer + (1 - momentum) * grad;  // buf.lerp_(grad, 1 - momentum)
    const Matrix direction = nesterov ? Matrix((1 - momentum) * grad + momentum * buffer) : buffer;
    const Matrix update = newton_schulz_reference(direction, ns_steps);
    const double ratio = std::sqrt(std::max(1.0, static_cast<double>(param.rows()) / param.cols()));
    param *= 1 - lr * weight_decay;
    param -= lr * ratio * update;
  }
};

TEST(Muon, StepFollowsTorchMuonForMatricesAndFilters) {
  Generator gen(5);
  for (const Shape& shape : {Shape{4, 6}, Shape{3, 2, 2, 2}, Shape{6, 2}}) {
    for (const bool nesterov : {true, false}) {
      Tensor w = randn(shape, gen).requires_grad_();
      optim::Muon::Options o;
      o.lr = 0.05;
      o.momentum = 0.9;
      o.nesterov = nesterov;
      o.weight_decay = 0.1;
      o.ns_steps = 5;
      optim::Muon opt({w}, o);
      MuonReference ref{as_matrix(w), Matrix()};
      for (int step = 0; step < 3; ++step) {
        const Tensor g = randn(shape, gen);
        w.set_grad(g);
        opt.step();
        ref.step(as_matrix(g), o.lr, o.momentum, nesterov, o.weight_decay, o.ns_steps);
        EXPECT_LT((as_matrix(w) - ref.param).cwiseAbs().maxCoeff(), 1e-5) << testing::PrintToString(shape) << " step " << step;
      }
      EXPECT_EQ(w.shape(), shape);
    }
  }
}

TEST(Muon, NormalizedWeightsHaveNormSqrtRows) {
  Generator gen(7);
  Tensor w = (randn({8, 12}, gen) * 5.0).detach().requires_grad_();
  optim::Muon::Options o;
  o.lr = 0.0;
  o.weight_decay = 0.0;
  o.normalize_weights = true;
  optim::Muon opt({w}, o);
  w.set_grad(randn({8, 12}, gen));
  opt.step();
  EXPECT_NEAR(as_matrix(w).norm(), std::sqrt(8.0), 1e-5);
  // With a step: the step is taken from the renormalised weight.
  const Matrix before = as_matrix(w);
  opt.set_lr(0, 0.1);
  const Tensor g = randn({8, 12}, gen);
  w.set_grad(g);
  opt.step();
  EXPECT_GT((as_matrix(w) - before).norm(), 0.1);
}

TEST(Muon, SgdGroupsStepExactlyAsSgd) {
  Generator gen(9);
  const Tensor init = randn({5}, gen);
  Tensor a = init.clone().requires_grad_(), b = init.clone().requires_grad_(), m = randn({3, 4}, gen).requires_grad_();
  optim::SGD::Options so;
  so.lr = 0.3;
  so.momentum = 0.85;
  so.nesterov = true;
  so.weight_decay = 0.01;
  optim::SGD sgd({a}, so);
  optim::Muon muon({m}, optim::Muon::Options());
  muon.add_param_group({b}, so);  // SGD::Options: an SGD group
  EXPECT_TRUE(muon.is_muon_group(0));
  EXPECT_FALSE(muon.is_muon_group(1));
  for (int step = 0; step < 3; ++step) {
    const Tensor g = randn({5}, gen);
    a.set_grad(g);
    b.set_grad(g);
    m.set_grad(randn({3, 4}, gen));
    sgd.step();
    muon.step();
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>()) << step;
  }
}

// Muon shares SGD's update without being an SGD: no SGD& can reach its groups (one once added a
// group with no Muon entry, and step() then read past the end of the per-group list).
static_assert(!std::is_base_of_v<optim::SGD, optim::Muon>);
static_assert(std::is_base_of_v<optim::Optimizer, optim::Muon>);

// The schedulers drive both kinds of group through Optimizer::lr / set_lr.
TEST(Muon, LearningRatesOfBothGroupKindsAreTheOptimizers) {
  Tensor w = zeros({3, 4}).requires_grad_(), b = zeros({4}).requires_grad_();
  optim::Muon::Options mo;
  mo.lr = 0.02;
  optim::SGD::Options so;
  so.lr = 0.5;
  optim::Muon muon({w}, mo);
  muon.add_param_group({b}, so);
  optim::Optimizer& opt = muon;
  EXPECT_EQ(opt.lr(0), 0.02);
  EXPECT_EQ(opt.lr(1), 0.5);
  opt.set_lr(0, 0.01);
  opt.set_lr(1, 0.25);
  EXPECT_EQ(opt.lr(0), 0.01);
  EXPECT_EQ(opt.lr(1), 0.25);
  EXPECT_THAT(test::error_of([&] { muon.add_param_group({b}, optim::SGD::Options{-1.0}); }),
              HasSubstr("SGD: learning rate must be >= 0"));
}

// The checkpoint format of a Muon optimizer with an SGD group, as it was when Muon derived from
// SGD: "<group>.<index>.momentum_buffer" for both kinds, and "master" for half parameters. A
// state dict written in that format (here by hand) restores the momentum it holds.
TEST(Muon, StateDictKeysAreTheCheckpointFormat) {
  Generator gen(12);
  Tensor w = randn({3, 4}, gen).to(DType::BF16).detach().requires_grad_(), b = randn({4}, gen).requires_grad_();
  optim::SGD::Options so;
  so.lr = 0.1;
  so.momentum = 0.9;
  optim::Muon muon({w}, optim::Muon::Options());
  muon.add_param_group({b}, so);
  EXPECT_EQ(muon.state_dict().size(), 1u);  // before any step: only w's master
  w.set_grad(randn({3, 4}, gen).to(DType::BF16));
  b.set_grad(randn({4}, gen));
  muon.step();
  std::vector<std::string> keys;
  for (const auto& [key, value] : muon.state_dict()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"0.0.master", "0.0.momentum_buffer", "1.0.momentum_buffer"}));

  Tensor b2 = b.detach().clone().requires_grad_();
  optim::SGD::Options no_step = so;
  no_step.lr = 0.0;
  optim::Muon restored({zeros({3, 4}).requires_grad_()}, optim::Muon::Options());
  restored.add_param_group({b2}, no_step);
  StateDict old_format;
  old_format["1.0.momentum_buffer"] = full({4}, 2.0);
  restored.load_state_dict(old_format);
  const StateDict back = restored.state_dict();
  ASSERT_EQ(back.count("1.0.momentum_buffer"), 1u);
  EXPECT_EQ(back.at("1.0.momentum_buffer").to_vector<float>(), std::vector<float>(4, 2.0f));
  EXPECT_EQ(back.count("0.0.momentum_buffer"), 0u);
}

TEST(Muon, HalfParametersStepTheirFp32Masters) {
  Generator gen(11);
  const Tensor init = randn({4, 6}, gen);
  Tensor half = init.to(DType::BF16).detach().requires_grad_();
  Tensor full = half.to(DType::F32).detach().requires_grad_();
  optim::Muon::Options o;
  o.lr = 1e-3;  // below bf16's resolution for most weights: only the master keeps it
  optim::Muon half_opt({half}, o), full_opt({full}, o);
  for (int step = 0; step < 2; ++step) {
    const Tensor g = randn({4, 6}, gen);
    half.set_grad(g.to(DType::BF16));
    full.set_grad(g.to(DType::BF16).to(DType::F32));
    half_opt.step();
    full_opt.step();
  }
  const Tensor master = half_opt.master_of(half);
  ASSERT_TRUE(master.defined());
  EXPECT_LT((as_matrix(master) - as_matrix(full)).cwiseAbs().maxCoeff(), 1e-6);
  EXPECT_EQ(half.to_vector<float>(), master.to(DType::BF16).to_vector<float>());
}

TEST(Muon, StateDictResumesTheSameTrajectory) {
  Generator gen(13);
  const Tensor init = randn({4, 6}, gen);
  std::vector<Tensor> grads;
  for (int i = 0; i < 3; ++i) grads.push_back(randn({4, 6}, gen));
  optim::Muon::Options o;
  o.lr = 0.02;

  Tensor straight = init.clone().requires_grad_();
  optim::Muon straight_opt({straight}, o);
  for (const Tensor& g : grads) {
    straight.set_grad(g);
    straight_opt.step();
  }

  Tensor resumed = init.clone().requires_grad_();
  StateDict state;
  {
    optim::Muon first({resumed}, o);
    resumed.set_grad(grads[0]);
    first.step();
    state = first.state_dict();
  }
  EXPECT_EQ(state.count("0.0.momentum_buffer"), 1u);
  optim::Muon second({resumed}, o);
  second.load_state_dict(state);
  for (size_t i = 1; i < grads.size(); ++i) {
    resumed.set_grad(grads[i]);
    second.step();
  }
  EXPECT_EQ(resumed.to_vector<float>(), straight.to_vector<float>());
}

TEST(Muon, RejectsVectorsAndBadOptionsNamingTheFix) {
  Tensor bias = zeros({4}).requires_grad_(), w = zeros({4, 4}).requires_grad_();
  EXPECT_THAT(test::error_of([&] { optim::Muon({w, bias}, optim::Muon::Options()); }),
              AllOf(HasSubstr("parameter 1 of group 0"), HasSubstr("add_param_group with SGD::Options")));
  optim::Muon::Options bad;
  bad.momentum = 1.0;
  EXPECT_THAT(test::error_of([&] { optim::Muon({w}, bad); }), HasSubstr("momentum"));
  bad = optim::Muon::Options();
  bad.ns_steps = 0;
  EXPECT_THAT(test::error_of([&] { optim::Muon({w}, bad); }), HasSubstr("ns_steps"));
}

}  // namespace
}  // namespace demi
