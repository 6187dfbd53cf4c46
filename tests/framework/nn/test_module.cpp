// nn modules: registration and names, PyTorch's parameter counts and initialisation bounds,
// train/eval, dtype moves, state_dict round trips, and a tiny CNN that learns.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "framework/demi/demi.h"

namespace demi {
namespace {

using testing::HasSubstr;

std::shared_ptr<nn::Sequential> tiny_cnn(Generator& gen) {
  auto net = std::make_shared<nn::Sequential>();
  net->emplace<nn::Conv2d>(nn::Conv2d::Options{3, 8, 3, 1, 1, false}, gen)
      .emplace<nn::BatchNorm2d>(nn::BatchNorm2d::Options{8})
      .emplace<nn::ReLU>()
      .emplace<nn::MaxPool2d>(2)
      .emplace<nn::Conv2d>(nn::Conv2d::Options{8, 16, 3, 1, 1, false}, gen)
      .emplace<nn::BatchNorm2d>(nn::BatchNorm2d::Options{16})
      .emplace<nn::GELU>()
      .emplace<nn::GlobalAvgPool2d>()
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(nn::Linear::Options{16, 4}, gen);
  return net;
}

int64_t count(const std::vector<Tensor>& params) {
  int64_t n = 0;
  for (const Tensor& p : params) n += p.numel();
  return n;
}

TEST(Module, NamedParametersBuffersAndCounts) {
  Generator gen(0);
  auto net = tiny_cnn(gen);
  std::vector<std::string> names;
  for (auto& [name, t] : net->named_parameters()) names.push_back(name);
  EXPECT_THAT(names, testing::ElementsAre("0.weight", "1.weight", "1.bias", "4.weight", "5.weight", "5.bias",
                                          "9.weight", "9.bias"));
  EXPECT_EQ(count(net->parameters()), 8 * 27 + 16 + 16 * 72 + 32 + 16 * 4 + 4);
  std::vector<std::string> buffers;
  for (auto& [name, t] : net->named_buffers()) buffers.push_back(name);
  EXPECT_THAT(buffers, testing::Contains("1.running_mean"));
  EXPECT_THAT(buffers, testing::Contains("5.num_batches_tracked"));
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, DefaultInitialisationBoundsMatchPyTorch) {
  Generator gen(1);
  nn::Conv2d conv(64, 32, 3);
  nn::Linear fc(128, 10);
  const double conv_bound = 1.0 / std::sqrt(64.0 * 9.0);
  for (float v : conv.weight.to_vector<float>()) EXPECT_LE(std::abs(v), conv_bound);
  for (float v : fc.bias.to_vector<float>()) EXPECT_LE(std::abs(v), 1.0 / std::sqrt(128.0));
  double sq = 0.0;
  for (float v : conv.weight.to_vector<float>()) sq += v * v;
  // U(-b, b) has variance b^2 / 3
  EXPECT_NEAR(sq / static_cast<double>(conv.weight.numel()), conv_bound * conv_bound / 3, 0.1 * conv_bound * conv_bound / 3);
}

TEST(Module, DiracOnTheFirstFiltersMakesThemTheIdentity) {
  // airbench's dirac_(weight[:in]): conv(x) of the first `in` channels is x itself; the rest keep
  // their random initialisation.
  nn::Conv2d conv({2, 3, 3, 1, 1, false});
  const std::vector<float> before = conv.weight.to_vector<float>();
  nn::init::dirac_(conv.weight.slice(0, 2));
  const std::vector<float> after = conv.weight.to_vector<float>();
  for (size_t k = 36; k < 54; ++k) EXPECT_EQ(after[k], before[k]) << "filter 2 untouched, element " << k;
  const Tensor x = randn({1, 2, 4, 4});
  const std::vector<float> y = conv(x).to_vector<float>(), xs = x.to_vector<float>();
  for (size_t k = 0; k < 32; ++k) EXPECT_FLOAT_EQ(y[k], xs[k]) << k;
  EXPECT_THROW(nn::init::dirac_(ones({3, 3})), Error);
}

TEST(Module, HalfConversionKeepsBatchNormInFp32) {
  Generator gen(0);
  auto net = tiny_cnn(gen);
  const Tensor w0 = net->parameters()[0];
  net->to(DType::F16);
  for (auto& [name, t] : net->named_parameters()) {
    const bool bn = name[0] == '1' || name[0] == '5';
    EXPECT_EQ(t.dtype(), bn ? DType::F32 : DType::F16) << name;
  }
  EXPECT_TRUE(w0.is_same(net->parameters()[0]));  // identity kept: optimizers built earlier still see it
  EXPECT_EQ(w0.dtype(), DType::F16);
  NoGradGuard no_grad;
  const Tensor y = (*net)(randn({2, 3, 8, 8}, gen).to(DType::F16));
  EXPECT_EQ(y.dtype(), DType::F16);
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
}

TEST(Module, StateDictRoundTripAndErrors) {
  Generator g1(1), g2(2);
  auto a = tiny_cnn(g1);
  auto b = tiny_cnn(g2);
  b->load_state_dict(a->state_dict());
  a->eval();
  b->eval();
  NoGradGuard no_grad;
  const Tensor x = randn({2, 3, 8, 8}, g1);
  EXPECT_EQ((*a)(x).to_vector<float>(), (*b)(x).to_vector<float>());
  auto state = a->state_dict();
  state.erase("0.weight");
  try {
    b->load_state_dict(state);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing key '0.weight'"));
  }
  state = a->state_dict();
  state["9.weight"] = zeros({5, 16});
  try {
    b->load_state_dict(state);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'9.weight' has shape [5, 16] in the state but [4, 16] in the module"));
  }
}

TEST(Module, TrainUpdatesRunningStatsAndEvalUsesThem) {
  nn::BatchNorm2d bn({3});
  Generator gen(3);
  const Tensor x = randn({8, 3, 4, 4}, gen) * 2.0 + 1.0;
  {
    NoGradGuard no_grad;
    bn(x);
  }
  const std::vector<float> rm = bn.running_mean.to_vector<float>();
  const std::vector<float> batch_mean = mean(x, {0, 2, 3}).to_vector<float>();
  for (size_t c = 0; c < 3; ++c) EXPECT_NEAR(rm[c], 0.1f * batch_mean[c], 1e-5f);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  bn.eval();
  NoGradGuard no_grad;
  const Tensor y = bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_EQ(bn.running_mean.to_vector<float>(), rm);  // eval leaves the statistics alone
  EXPECT_EQ(y.shape(), x.shape());
}

// A BatchNorm2d that is not one: Sequential must call its own forward, not fuse it with the ReLU.
class ShiftedBatchNorm : public nn::BatchNorm2d {
 public:
  using nn::BatchNorm2d::BatchNorm2d;
  Tensor forward(const Tensor& x) override { return nn::BatchNorm2d::forward(x) - 0.5; }
};

// A BatchNorm2d then a ReLU or a GELU runs as one op (batch_norm_relu, batch_norm_gelu) with the
// values and gradients of the two ops, bit for bit, in fp32 and in the half types.
void expect_fused_like_separate(DType dtype, bool gelu) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + (gelu ? " gelu" : " relu"));
  Generator gen(5);
  const Tensor x0 = (randn({6, 4, 5, 5}, gen) * 2.0 + 0.5).to(dtype);
  nn::Sequential fused;
  fused.emplace<nn::BatchNorm2d>(4);
  if (gelu) fused.emplace<nn::GELU>(); else fused.emplace<nn::ReLU>();
  auto activation = [gelu](const Tensor& t) { return gelu ? demi::gelu(t) : relu(t); };
  nn::BatchNorm2d alone(4);
  auto& bn = static_cast<nn::BatchNorm2d&>(fused[0]);
  for (nn::BatchNorm2d* m : {&bn, &alone}) {
    NoGradGuard no_grad;
    m->weight.copy_(tensor(std::vector<float>{1.5f, 0.5f, -1.0f, 1.0f}, {4}));
    m->bias.copy_(tensor(std::vector<float>{0.1f, -0.2f, 0.0f, 0.3f}, {4}));
  }
  const Tensor x1 = x0.detach().requires_grad_(), x2 = x0.detach().requires_grad_();
  const Tensor y1 = fused(x1), y2 = activation(alone(x2));
  ASSERT_TRUE(y1.grad_fn());
  EXPECT_STREQ(y1.grad_fn()->name(), gelu ? "batch_norm_gelu" : "batch_norm_relu");  // one op on the CPU
  EXPECT_EQ(y1.to_vector<float>(), y2.to_vector<float>());
  const Tensor w = randn({6, 4, 5, 5}, gen);
  sum(y1 * w.to(dtype)).backward();
  sum(y2 * w.to(dtype)).backward();
  EXPECT_EQ(x1.grad().to_vector<float>(), x2.grad().to_vector<float>());
  EXPECT_EQ(bn.weight.grad().to_vector<float>(), alone.weight.grad().to_vector<float>());
  EXPECT_EQ(bn.bias.grad().to_vector<float>(), alone.bias.grad().to_vector<float>());
  EXPECT_EQ(bn.running_mean.to_vector<float>(), alone.running_mean.to_vector<float>());
  EXPECT_EQ(bn.running_var.to_vector<float>(), alone.running_var.to_vector<float>());
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  // Eval: running statistics, the activation after batch_norm as two ops, still the same values.
  fused.eval(), alone.eval();
  const Tensor e1 = fused(x0), e2 = activation(alone(x0));
  EXPECT_EQ(e1.to_vector<float>(), e2.to_vector<float>());
}

TEST(Sequential, FusesBatchNormWithTheReluOrGeluAfterItForTheSameValues) {
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    expect_fused_like_separate(dtype, false);
    expect_fused_like_separate(dtype, true);
  }
}

TEST(Sequential, DoesNotFuseSubclassesOfBatchNorm) {
  Generator gen(6);
  const Tensor x = randn({4, 2, 3, 3}, gen).requires_grad_();
  nn::Sequential seq;
  seq.emplace<ShiftedBatchNorm>(2).emplace<nn::ReLU>();
  ShiftedBatchNorm alone(2);
  const Tensor y = seq(x);
  ASSERT_TRUE(y.grad_fn());
  EXPECT_STREQ(y.grad_fn()->name(), "relu");  // its own forward, then the ReLU
  EXPECT_EQ(y.to_vector<float>(), relu(alone(x)).to_vector<float>());
}

// Named children, as PyTorch's Sequential(OrderedDict(...)): the names reach state_dict, and a
// BatchNorm2d and ReLU among them still run as one op.
TEST(Sequential, NamedChildrenGiveStateDictTheirNamesAndStillFuse) {
  Generator gen(7);
  nn::Sequential seq;
  seq.add("conv", std::make_shared<nn::Conv2d>(nn::Conv2d::Options{2, 3, 3, 1, 1, false}, gen))
      .add("bn", std::make_shared<nn::BatchNorm2d>(3))
      .add("act", std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Flatten>());  // unnamed: its position, "3"
  std::vector<std::string> keys;
  for (const auto& [key, t] : seq.state_dict()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"conv.weight", "bn.weight", "bn.bias", "bn.running_mean",
                                            "bn.running_var", "bn.num_batches_tracked"}));
  EXPECT_EQ(seq.named_children().back().first, "3");
  const Tensor y = seq(randn({2, 2, 4, 4}, gen).requires_grad_());
  EXPECT_EQ(y.shape(), (Shape{2, 48}));
  EXPECT_STREQ(y.grad_fn()->next.at(0).node->name(), "batch_norm_relu");  // under the flatten
}

TEST(Sequential, NamesThatStateDictCannotCarryAreRefused) {
  nn::Sequential seq;
  seq.add("relu", std::make_shared<nn::ReLU>());
  EXPECT_THAT([&] { seq.add("relu", std::make_shared<nn::ReLU>()); },
              testing::ThrowsMessage<Error>(HasSubstr("already a module named 'relu'")));
  EXPECT_THAT([&] { seq.add("block.0", std::make_shared<nn::ReLU>()); },
              testing::ThrowsMessage<Error>(HasSubstr("contain no '.'")));
  EXPECT_THAT([&] { seq.add("", std::make_shared<nn::ReLU>()); },
              testing::ThrowsMessage<Error>(HasSubstr("must be non-empty")));
  EXPECT_EQ(seq.size(), 1u);
}

TEST(Module, TinyCnnLossDecreasesOverTwentySgdSteps) {
  Generator gen(11);
  auto net = tiny_cnn(gen);
  const Tensor x = randn({16, 3, 8, 8}, gen);
  std::vector<int64_t> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i % 4);
  const Tensor y = tensor(labels, {16});
  optim::SGD::Options o;
  o.lr = 0.1;
  o.momentum = 0.9;
  optim::SGD opt(net->parameters(), o);
  std::vector<float> losses;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    const Tensor loss = cross_entropy((*net)(x), y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item<float>());
  }
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << "first " << losses.front() << ", last " << losses.back();
}

}  // namespace
}  // namespace demi
