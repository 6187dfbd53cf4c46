// The nets of models/ (SmallCNN, AirNet, through make_model): the parameter counts of
// models/README.md, their PyTorch twins' state_dict names, and their output shapes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/models.h"

namespace demi {
namespace {

int64_t parameter_count(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

TEST(Models, ParameterCountsAreTheReadmes) {
  EXPECT_EQ(parameter_count(*models::make_model("SmallCNN")), 141034);
  EXPECT_EQ(parameter_count(*models::make_model("AirNet")), 1972792);
}

// state_dict names as the PyTorch twins' modules have them (crosscheck/torch_nets.py), so that a
// demi checkpoint loads into its twin with load_state_dict, and the other way round.
std::vector<std::string> state_dict_keys(const std::string& name) {
  std::vector<std::string> keys;
  for (const auto& [key, t] : models::make_model(name)->state_dict()) keys.push_back(key);
  return keys;
}

std::vector<std::string> batch_norm_keys(const std::string& prefix) {
  std::vector<std::string> keys;
  for (const char* k : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}) {
    keys.push_back(prefix + k);
  }
  return keys;
}

TEST(Models, StateDictNamesAreTheTwins) {
  std::vector<std::string> small;
  for (const int conv : {0, 3, 7, 10, 14}) {
    small.push_back("features." + std::to_string(conv) + ".weight");
    for (const std::string& k : batch_norm_keys("features." + std::to_string(conv + 1) + ".")) small.push_back(k);
  }
  small.insert(small.end(), {"fc.weight", "fc.bias"});
  EXPECT_EQ(state_dict_keys("SmallCNN"), small);

  std::vector<std::string> air = {"whiten.weight", "whiten.bias"};
  for (int b = 0; b < 3; ++b) {
    const std::string block = "blocks." + std::to_string(b) + ".";
    for (const char* half : {"1", "2"}) {
      air.push_back(block + "conv" + half + ".weight");
      for (const std::string& k : batch_norm_keys(block + "bn" + half + ".")) air.push_back(k);
    }
  }
  air.push_back("fc.weight");
  EXPECT_EQ(state_dict_keys("AirNet"), air);
}

TEST(Models, ForwardShapes) {
  Generator gen(0);
  NoGradGuard no_grad;
  const Tensor x = randn({2, 3, 32, 32}, gen);
  for (const char* name : {"SmallCNN", "AirNet"}) {
    auto m = models::make_model(name, gen);
    EXPECT_EQ((*m)(x).shape(), (Shape{2, 10})) << name;
  }
}

TEST(Models, UnknownNameNamesTheChoices) {
  try {
    models::make_model("ResNet");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("choose SmallCNN, AirNet, cct7 or cct4"), std::string::npos);
  }
}

}  // namespace
}  // namespace demi
