// optim::Optimizer's shared state handling: state_dict in parameter order (each parameter's state,
// then its master), and load_state_dict written once for every optimizer: it restores by name and
// refuses keys of another model or another optimizer, naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

TEST(Optimizer, LoadStateDictRefusesForeignKeysByName) {
  Tensor w = ones({3}).requires_grad_();
  optim::SGD::Options o;
  o.momentum = 0.9;
  optim::SGD sgd({w}, o);
  EXPECT_THAT(error_of([&] { sgd.load_state_dict({{"0.1.momentum_buffer", zeros({3})}}); }),
              HasSubstr("key '0.1.momentum_buffer' names no parameter of this optimizer"));
  EXPECT_THAT(error_of([&] { sgd.load_state_dict({{"momentum", zeros({3})}}); }),
              HasSubstr("key 'momentum' names no parameter"));
  EXPECT_THAT(error_of([&] { sgd.load_state_dict({{"0.0.exp_avg", zeros({3})}}); }),
              HasSubstr("'0.0.exp_avg' is not state this optimizer keeps for that parameter"));
  EXPECT_THAT(error_of([&] { sgd.load_state_dict({{"0.0.master", zeros({3})}}); }),
              HasSubstr("it has no fp32 master"));
  EXPECT_THAT(error_of([&] { sgd.load_state_dict({{"0.0.momentum_buffer", zeros({4})}}); }),
              HasSubstr("'momentum_buffer' has shape [4] but its parameter has shape [3]"));
  optim::AdamW adamw({w}, optim::AdamW::Options{});
  EXPECT_THAT(error_of([&] { adamw.load_state_dict({{"0.0.exp_avg", zeros({3})}}); }),
              HasSubstr("needs exp_avg, exp_avg_sq and step together"));
}

TEST(Optimizer, StateRoundTripsThroughLoadStateDict) {
  Tensor a = ones({3}, DType::BF16).requires_grad_(), b = ones({3}, DType::BF16).requires_grad_();
  optim::AdamW::Options o;
  optim::AdamW first({a}, o), second({b}, o);
  a.set_grad(full({3}, 0.5, DType::BF16));
  first.step();
  second.load_state_dict(first.state_dict());
  for (const auto& [key, t] : first.state_dict()) {
    EXPECT_EQ(second.state_dict().at(key).to_vector<double>(), t.to_vector<double>()) << key;
  }
  EXPECT_EQ(second.state_dict().keys(), first.state_dict().keys());
}

}  // namespace
}  // namespace demi
