// optim::Lookahead: the averaging arithmetic, in place on the module's own tensors; BatchNorm's
// statistics averaged, its counter not; fp32 masters of half parameters reset with the weights.
#include <gtest/gtest.h>

#include "framework/demi/demi.h"

namespace demi {
namespace {

// Sets every element of `t` (in place) to `value`.
void set_all(const Tensor& t, double value) { kernels(t).fill(t.ref(), value); }

class Net : public nn::Module {
 public:
  Net() {
    fc = register_module("fc", std::make_shared<nn::Linear>(nn::Linear::Options{2, 2}));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(nn::BatchNorm2d::Options{2}));
  }
  Tensor forward(const Tensor& x) override { return (*fc)(x); }
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::BatchNorm2d> bn;
};

TEST(Lookahead, MovesTheAverageAndResetsTheLiveWeights) {
  Net net;
  set_all(net.fc->weight, 1.0);
  set_all(net.bn->running_mean, 4.0);
  optim::Lookahead lookahead(net);
  set_all(net.fc->weight, 3.0);  // what SGD steps did since the snapshot
  set_all(net.bn->running_mean, 0.0);
  set_all(net.bn->num_batches_tracked, 7.0);
  lookahead.update(0.75);  // average = 1 + 0.25 * (3 - 1)
  for (float v : net.fc->weight.to_vector<float>()) EXPECT_FLOAT_EQ(v, 1.5f);
  for (float v : net.bn->running_mean.to_vector<float>()) EXPECT_FLOAT_EQ(v, 3.0f);
  for (int64_t v : net.bn->num_batches_tracked.to_vector<int64_t>()) EXPECT_EQ(v, 7);  // a counter, not averaged
  for (float v : lookahead.state_dict().at("fc.weight").to_vector<float>()) EXPECT_FLOAT_EQ(v, 1.5f);

  set_all(net.fc->weight, 9.0);
  lookahead.update(1.0);  // airbench's final sync: back to the average
  for (float v : net.fc->weight.to_vector<float>()) EXPECT_FLOAT_EQ(v, 1.5f);
  set_all(net.fc->weight, 9.0);
  lookahead.update(0.0);  // keep the live weights, and they become the average
  for (float v : lookahead.state_dict().at("fc.weight").to_vector<float>()) EXPECT_FLOAT_EQ(v, 9.0f);
  EXPECT_THROW(lookahead.update(1.5), Error);
}

TEST(Lookahead, ResetsTheFp32MastersOfHalfParameters) {
  Net net;
  net.to(DType::BF16);  // BatchNorm stays fp32
  set_all(net.fc->weight, 1.0);
  optim::SGD::Options o;
  o.lr = 0.1;
  optim::SGD sgd(net.parameters(), o);
  optim::Lookahead lookahead(net, &sgd);
  set_all(net.fc->weight, 2.0);
  set_all(sgd.master_of(net.fc->weight), 2.0);
  lookahead.update(0.5);
  EXPECT_EQ(net.fc->weight.dtype(), DType::BF16);
  for (float v : net.fc->weight.to_vector<float>()) EXPECT_FLOAT_EQ(v, 1.5f);
  for (float v : sgd.master_of(net.fc->weight).to_vector<float>()) EXPECT_FLOAT_EQ(v, 1.5f);
}

TEST(Lookahead, StateDictRoundTripsAndNamesWhatIsMissing) {
  Net a, b;
  set_all(a.fc->weight, 5.0);
  optim::Lookahead from(a), to(b);
  to.load_state_dict(from.state_dict());
  to.update(1.0);
  for (float v : b.fc->weight.to_vector<float>()) EXPECT_FLOAT_EQ(v, 5.0f);
  StateDict partial = from.state_dict();
  partial.erase("bn.running_var");
  try {
    to.load_state_dict(partial);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bn.running_var"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace demi
