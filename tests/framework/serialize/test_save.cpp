// demi::save / demi::load: a module's and an optimizer's state round-trip through a safetensors
// file in registration order (PyTorch's state_dict order), in the installed library; a file of
// another model is refused with the key that does not fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/demi/demi.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace demi {
namespace {

using test::error_of;
using testing::ElementsAre;
using testing::HasSubstr;

// conv -> bn -> relu -> pool -> flatten -> linear, as a user writes it.
nn::Sequential small_net(Generator& gen) {
  nn::Sequential net;
  net.emplace<nn::Conv2d>(nn::Conv2d::Options{3, 4, 3, 1, 1, false}, gen)
      .emplace<nn::BatchNorm2d>(4)
      .emplace<nn::ReLU>()
      .emplace<nn::GlobalAvgPool2d>()
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(4, 2, gen);
  return net;
}

TEST(Save, StateDictKeysComeInRegistrationOrder) {
  Generator gen(0);
  nn::Sequential net = small_net(gen);
  // PyTorch's order for the same nn.Sequential: each module's parameters, then its buffers.
  EXPECT_THAT(net.state_dict().keys(), ElementsAre("0.weight", "1.weight", "1.bias", "1.running_mean",
                                                   "1.running_var", "1.num_batches_tracked", "5.weight", "5.bias"));
}

TEST(Save, ModuleRoundTripsThroughAFile) {
  test::TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  Generator gen(1);
  nn::Sequential net = small_net(gen);
  net.train();
  net(randn({2, 3, 5, 5}, gen));  // moves the running statistics off their initial values
  save(net, path);
  EXPECT_EQ(load_safetensors(path).keys(), net.state_dict().keys());  // the file keeps the order

  Generator other(2);
  nn::Sequential copy = small_net(other);
  load(copy, path);
  for (const auto& [name, t] : net.state_dict()) {
    EXPECT_EQ(copy.state_dict().at(name).to_vector<double>(), t.to_vector<double>()) << name;
  }
}

TEST(Save, OptimizerStateRoundTripsInParameterOrder) {
  test::TempDir dir;
  const std::string path = (dir.path / "optimizer.safetensors").string();
  Generator gen(3);
  nn::Linear fc(3, 2, gen);
  fc.to(DType::BF16);  // bf16 weights: AdamW keeps fp32 masters, saved with the moments
  optim::AdamW opt(fc.parameters(), 0.01);
  sum(fc(randn({4, 3}, gen).to(DType::BF16))).backward();
  opt.step();
  EXPECT_EQ(opt.state_dict().keys(), (std::vector<std::string>{"0.0.exp_avg", "0.0.exp_avg_sq", "0.0.step",
                                                                "0.0.master", "0.1.exp_avg", "0.1.exp_avg_sq",
                                                                "0.1.step", "0.1.master"}));
  save(opt, path);

  optim::AdamW fresh(fc.parameters(), 0.01);
  load(fresh, path);
  for (const auto& [name, t] : opt.state_dict()) {
    EXPECT_EQ(fresh.state_dict().at(name).to_vector<double>(), t.to_vector<double>()) << name;
  }
}

TEST(Save, AFileOfAnotherModelIsRefusedByName) {
  test::TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  nn::Linear fc(4, 2);
  save(fc, path);
  nn::Linear wider(5, 2);
  EXPECT_THAT(error_of([&] { load(wider, path); }), HasSubstr("'weight' has shape [2, 4] in the state but [2, 5]"));
  nn::Conv2d conv(3, 2, 3);
  EXPECT_THAT(error_of([&] { load(conv, path); }), HasSubstr("has shape"));
  EXPECT_THAT(error_of([&] { load(fc, (dir.path / "missing.safetensors").string()); }), HasSubstr("cannot open"));
}

}  // namespace
}  // namespace demi
