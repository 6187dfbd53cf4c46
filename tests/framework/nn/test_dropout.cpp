// nn::Dropout: drops in training mode, is the identity after eval() (its own or a parent's), draws
// from the default generator of the input's device, has no parameters, and refuses a bad p.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

TEST(DropoutModule, DropsInTrainingAndIsTheIdentityInEval) {
  manual_seed(3);
  nn::Dropout drop(0.5);
  EXPECT_EQ(drop.p(), 0.5);
  const Tensor x = ones({2000});
  const Tensor y = drop(x);
  EXPECT_EQ(default_generator().offset(), 2000u);
  Generator same(3);
  EXPECT_EQ(y.to_vector<float>(), dropout(x, 0.5, true, same).to_vector<float>());
  drop.eval();
  EXPECT_TRUE(drop(x).is_same(x));
  drop.train();
  EXPECT_FALSE(drop(x).is_same(x));
  manual_seed(0);
}

TEST(DropoutModule, FollowsItsParentsModeAndHasNoState) {
  nn::Sequential net;
  net.emplace<nn::Linear>(4, 4).emplace<nn::Dropout>(0.1);
  EXPECT_EQ(net.named_parameters().size(), 2u);  // the Linear's only
  EXPECT_EQ(net.state_dict().size(), 2u);
  net.eval();
  const Tensor x = ones({3, 4});
  const Tensor linear_only = (*net.named_children()[0].second)(x);
  EXPECT_EQ(net(x).to_vector<float>(), linear_only.to_vector<float>());
}

TEST(DropoutModule, RefusesPOutsideZeroOne) {
  EXPECT_THAT(error_of([] { nn::Dropout(1.5); }), HasSubstr("nn::Dropout: p is the probability of zeroing an element "
                                                            "and must be in [0, 1], got p = 1.5"));
  EXPECT_NO_THROW(nn::Dropout(0.0));
  EXPECT_NO_THROW(nn::Dropout(1.0));
}

}  // namespace
}  // namespace demi
