// The memory planner against memory_report(): one real training step of SmallCNN and AirNet in
// every precision (fp32, bf16 and fp16 autocast, bf16 weights with and without fp32 masters) peaks
// within 5% of the plan in every planned category; and planning leaves the model as it was.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <string>

#include "framework/demi/demi.h"
#include "models/models.h"

namespace demi {
namespace {

struct Config {
  std::string name;
  DType autocast;       // F32: none
  bool half_params;     // weights in the autocast dtype (BatchNorm stays fp32)
  optim::MasterWeights masters;
};

std::shared_ptr<nn::Module> make(const std::string& model, Generator& gen) {
  if (model == "SmallCNN") return std::make_shared<models::SmallCNN>(gen);
  return std::make_shared<models::AirNet>(gen);
}

void expect_within(const char* category, int64_t planned, int64_t measured) {
  const double tolerance = 0.05 * static_cast<double>(std::max<int64_t>(measured, 1));
  EXPECT_LE(std::abs(static_cast<double>(planned - measured)), tolerance)
      << category << ": planned " << planned << " bytes, measured " << measured;
}

TEST(MemoryPlan, MatchesMemoryReportOnATrainingStep) {
  const Config configs[] = {
      {"fp32", DType::F32, false, optim::MasterWeights::Fp32},
      {"bf16 autocast", DType::BF16, false, optim::MasterWeights::Fp32},
      {"fp16 autocast", DType::F16, false, optim::MasterWeights::Fp32},
      {"bf16 weights + fp32 masters", DType::BF16, true, optim::MasterWeights::Fp32},
      {"bf16 weights, no masters", DType::BF16, true, optim::MasterWeights::None},
      {"fp16 weights + fp32 masters + GradScaler", DType::F16, true, optim::MasterWeights::Fp32},
  };
  for (const std::string model_name : {"SmallCNN", "AirNet"}) {
    for (const Config& c : configs) {
      SCOPED_TRACE(model_name + ", " + c.name);
      Generator gen(0);
      std::shared_ptr<nn::Module> model = make(model_name, gen);
      if (c.half_params) model->to(c.autocast);
      const int64_t batch = 16;
      amp::MemoryPlanOptions po;
      po.input_shape = {batch, 3, 32, 32};
      po.autocast = c.autocast;
      po.optimizer_state_tensors = 1;  // SGD with momentum
      po.masters = c.masters;
      po.loss_scaling = c.autocast == DType::F16;  // as TrainStep's GradScaler below
      po.loss = [](const Tensor& logits) { return cross_entropy(logits, zeros({logits.size(0)}, DType::I64)); };
      const std::vector<float> before = model->parameters()[0].to_vector<float>();
      const amp::MemoryPlan plan = amp::plan_memory(*model, po);
      EXPECT_EQ(model->parameters()[0].to_vector<float>(), before);
      for (const auto& [name, p] : model->named_parameters()) EXPECT_FALSE(p.grad().defined()) << name;

      optim::SGD::Options so;
      so.lr = 0.01;
      so.momentum = 0.9;
      so.master_weights = c.masters;
      so.rounding = c.masters == optim::MasterWeights::None ? optim::Rounding::Stochastic : optim::Rounding::Nearest;
      optim::SGD opt(model->parameters(), so);
      amp::GradScaler::Options gso;
      gso.enabled = c.autocast == DType::F16;
      amp::GradScaler scaler(gso);
      const Tensor images = randn({batch, 3, 32, 32}, gen);
      std::vector<int64_t> classes(static_cast<size_t>(batch));
      for (int64_t i = 0; i < batch; ++i) classes[static_cast<size_t>(i)] = i % 10;
      const Tensor labels = tensor(classes, {batch});
      training::TrainStep step(opt, scaler, {Device::Kind::CPU, c.autocast, 0.0, 1});
      reset_peak_memory_stats(Device::cpu());
      autograd::reset_saved_tensor_peak();
      step.run([&](int) { return cross_entropy((*model)(images), labels); });
      const MemoryReport measured = memory_report();
      std::cout << model_name << ", " << c.name << ":\n" << plan.str() << measured.str();
      expect_within("parameters", plan.parameters, measured[MemoryCategory::Parameters].peak);
      expect_within("gradients", plan.gradients, measured[MemoryCategory::Gradients].peak);
      expect_within("optimizer state", plan.optimizer_state, measured[MemoryCategory::OptimizerState].peak);
      expect_within("master weights", plan.master_weights, measured[MemoryCategory::MasterWeights].peak);
      expect_within("saved activations", plan.saved_activations, measured[MemoryCategory::SavedActivations].peak);
    }
  }
}

}  // namespace
}  // namespace demi
