// TrainerConfig's option names and checks: every enum value has one name that reads back, an
// unknown name is refused with the choices, --loss-scale's text, and the cross-flag rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/error_of.h"
#include "train/config.h"

namespace demi {
namespace {

using testing::HasSubstr;

// Each value's name reads back as the value, and the names are what the command line accepts.
template <typename E>
void expect_round_trip(const std::vector<std::string>& names) {
  EXPECT_EQ(train::names_of<E>(), names);
  for (const std::string& name : names) EXPECT_EQ(train::name_of(train::from_name<E>(name)), name);
}

TEST(Config, EveryOptionNameReadsBackAsItsValue) {
  expect_round_trip<train::Precision>({"fp16", "bf16", "fp32"});
  expect_round_trip<train::ModelKind>({"SmallCNN", "AirNet", "cct7", "cct4"});
  expect_round_trip<train::OptimizerKind>({"sgd", "adamw", "muon"});
  expect_round_trip<train::ScheduleKind>({"onecycle", "cosine", "linear", "linear-decay", "step", "none"});
  expect_round_trip<train::Recipe>({"standard", "airbench", "airbench-muon", "cct"});
  expect_round_trip<optim::MasterWeights>({"fp32", "none"});
  expect_round_trip<optim::Rounding>({"nearest", "stochastic"});
  EXPECT_EQ(train::from_name<train::Recipe>("airbench-muon"), train::Recipe::AirbenchMuon);
  EXPECT_EQ(train::name_of(train::Precision::Bf16), "bf16");
}

TEST(Config, AnUnknownNameIsRefusedWithTheFlagAndItsChoices) {
  EXPECT_THAT(test::error_of([] { train::from_name<train::Recipe>("fast"); }),
              HasSubstr("--recipe: 'fast' is not one of standard, airbench, airbench-muon"));
  EXPECT_THAT(test::error_of([] { train::from_name<train::Precision>("fp8"); }),
              HasSubstr("--precision: 'fp8' is not one of fp16, bf16, fp32"));
  EXPECT_THAT(test::error_of([] { train::from_name<train::ModelKind>("smallcnn"); }), HasSubstr("SmallCNN, AirNet"));
}

TEST(Config, LossScaleIsDynamicNoneOrAPositiveNumber) {
  EXPECT_EQ(train::parse_loss_scale("dynamic")->kind, train::LossScale::Kind::Dynamic);
  EXPECT_EQ(train::parse_loss_scale("none")->kind, train::LossScale::Kind::None);
  const auto fixed = train::parse_loss_scale("1024");
  ASSERT_TRUE(fixed.has_value());
  EXPECT_EQ(fixed->kind, train::LossScale::Kind::Fixed);
  EXPECT_EQ(fixed->value, 1024.0);
  EXPECT_EQ(train::name_of(*fixed), "1024");
  for (const char* bad : {"", "0", "-8", "inf", "nan", "12x", "Dynamic"}) EXPECT_FALSE(train::parse_loss_scale(bad)) << bad;
  EXPECT_EQ(train::name_of(train::LossScale{}), "dynamic");
}

TEST(Config, PrecisionsComputeInTheirDtype) {
  EXPECT_EQ(train::compute_dtype(train::Precision::Fp32), DType::F32);
  EXPECT_EQ(train::compute_dtype(train::Precision::Bf16), DType::BF16);
  EXPECT_EQ(train::compute_dtype(train::Precision::Fp16), DType::F16);
}

TEST(Config, CrossFlagRulesNameTheFlags) {
  train::TrainerConfig c;
  EXPECT_EQ(test::error_of([&] { train::check_config(c); }), "(no error)");
  c.accum = 3;  // 128 images do not split into 3 micro-batches
  EXPECT_THAT(test::error_of([&] { train::check_config(c); }), HasSubstr("--batch-size divisible by --accum (got 128 and 3)"));
  c.accum = 1;
  c.half_params = true;
  EXPECT_THAT(test::error_of([&] { train::check_config(c); }), HasSubstr("--half-params needs --precision fp16 or bf16"));
  c.half_params = false;
  c.rounding = optim::Rounding::Stochastic;
  EXPECT_THAT(test::error_of([&] { train::check_config(c); }), HasSubstr("add --half-params"));
  c.precision = train::Precision::Bf16;
  c.half_params = true;
  EXPECT_EQ(test::error_of([&] { train::check_config(c); }), "(no error)");
  c.optimizer = train::OptimizerKind::Muon;
  EXPECT_THAT(test::error_of([&] { train::check_config(c); }), HasSubstr("Muon writes its matrices"));
}

TEST(Config, CudaGraphNeedsCudaAndAStepMadeOnTheDevice) {
  train::TrainerConfig c;
  c.cuda_graph = true;
  EXPECT_THAT(test::error_of([&] { train::check_config(c); }), HasSubstr("--cuda-graph captures the training step's "
                                                                          "CUDA kernels: add --device cuda"));
  c.device = Device::cuda(0);  // checking the flags needs no GPU
  EXPECT_EQ(test::error_of([&] { train::check_config(c); }), "(no error)");
  c.optimizer = train::OptimizerKind::Muon;
  EXPECT_THAT(test::error_of([&] { train::check_config(c); }), HasSubstr("--cuda-graph: Muon computes its step"));
  c.optimizer = train::OptimizerKind::Sgd;
  c.precision = train::Precision::Bf16;
  c.half_params = true;
  c.rounding = optim::Rounding::Stochastic;
  EXPECT_THAT(test::error_of([&] { train::check_config(c); }), HasSubstr("use --rounding nearest"));
}

}  // namespace
}  // namespace demi
