// Optimizers writing half weights with stochastic rounding: each parameter has its own stream,
// its position is saved in the state ("<g>.<i>.rounding_step"), so a resumed run continues the very
// same draws and ends bit for bit where the uninterrupted one does; fp32 parameters have no stream.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

struct Trajectory {
  std::vector<Tensor> params;
  std::vector<Tensor> grads;
};

// Two bf16 parameters and fixed per-step gradients, so runs can be compared element for element.
Trajectory make_run(uint64_t seed) {
  Generator gen(seed);
  Trajectory r;
  r.params = {randn({64}, gen).to(DType::BF16).requires_grad_(), randn({8, 8}, gen).to(DType::BF16).requires_grad_()};
  for (int s = 0; s < 6; ++s) {
    r.grads.push_back(randn({64}, gen) * 1e-3);
    r.grads.push_back(randn({8, 8}, gen) * 1e-3);
  }
  return r;
}

template <typename Opt>
void steps(Opt& opt, Trajectory& r, int from, int to) {
  for (int s = from; s < to; ++s) {
    for (size_t p = 0; p < r.params.size(); ++p) r.params[p].set_grad(r.grads[2 * s + p].to(DType::BF16));
    opt.step();
  }
}

template <typename Opt>
void resume_equals_uninterrupted(const typename Opt::Options& o) {
  Trajectory whole = make_run(1), first = make_run(1);
  Opt a(whole.params, o);
  steps(a, whole, 0, 6);
  EXPECT_EQ(a.state_dict().at("0.0.rounding_step").item(), 6.0);
  EXPECT_EQ(a.state_dict().at("0.1.rounding_step").item(), 6.0);

  Opt b(first.params, o);
  steps(b, first, 0, 3);
  const StateDict saved = b.state_dict();
  Trajectory second = make_run(1);  // fresh parameter tensors, loaded from the first half's values
  for (size_t p = 0; p < second.params.size(); ++p) {
    NoGradGuard no_grad;
    second.params[p].copy_(first.params[p]);
  }
  Opt c(second.params, o);
  c.load_state_dict(saved);
  steps(c, second, 3, 6);
  for (size_t p = 0; p < whole.params.size(); ++p) {
    EXPECT_EQ(second.params[p].to_vector<float>(), whole.params[p].to_vector<float>()) << "parameter " << p;
  }
}

TEST(StochasticRounding, SgdResumeContinuesTheSameStream) {
  optim::SGD::Options o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.master_weights = optim::MasterWeights::None;
  o.rounding = optim::Rounding::Stochastic;
  o.rounding_seed = 5;
  resume_equals_uninterrupted<optim::SGD>(o);
}

TEST(StochasticRounding, AdamWResumeContinuesTheSameStream) {
  optim::AdamW::Options o;
  o.lr = 1e-3;
  o.master_weights = optim::MasterWeights::None;
  o.rounding = optim::Rounding::Stochastic;
  resume_equals_uninterrupted<optim::AdamW>(o);
}

TEST(StochasticRounding, DiffersFromNearestAndBySeedAndOnlyForHalfParams) {
  auto final_values = [](optim::Rounding rounding, uint64_t seed) {
    Trajectory r = make_run(2);
    optim::SGD::Options o;
    o.lr = 0.1;
    o.master_weights = optim::MasterWeights::None;
    o.rounding = rounding;
    o.rounding_seed = seed;
    optim::SGD opt(r.params, o);
    steps(opt, r, 0, 6);
    return r.params[0].to_vector<float>();
  };
  const std::vector<float> nearest = final_values(optim::Rounding::Nearest, 0);
  EXPECT_NE(final_values(optim::Rounding::Stochastic, 0), nearest);
  EXPECT_NE(final_values(optim::Rounding::Stochastic, 0), final_values(optim::Rounding::Stochastic, 1));
  EXPECT_EQ(final_values(optim::Rounding::Stochastic, 3), final_values(optim::Rounding::Stochastic, 3));

  Tensor w = ones({4}).requires_grad_();  // fp32: nothing to round, no stream in the state
  optim::SGD::Options o;
  o.rounding = optim::Rounding::Stochastic;
  optim::SGD opt({w}, o);
  w.set_grad(ones({4}));
  opt.step();
  EXPECT_FALSE(opt.state_dict().contains("0.0.rounding_step"));
}

}  // namespace
}  // namespace demi
