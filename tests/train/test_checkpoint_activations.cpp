// --checkpoint-activations on the models train_cifar builds: SmallCNN, AirNet and CCT with each top-level
// block checkpointed take bit for bit the plain run's steps (fp32, bf16 autocast, fp16 autocast with
// a GradScaler, two micro-batches), batch-norm statistics included; the memory planner predicts
// what memory_report() measures over a checkpointed step within 5%, and less than without it.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "models/cct.h"
#include "train/components.h"

namespace demi {
namespace {

struct Setting {
  std::string name;
  DType dtype;  // F32: no autocast
  int micro_batches;
};

const Setting kSettings[] = {
    {"fp32", DType::F32, 1},
    {"bf16 autocast", DType::BF16, 1},
    {"fp16 autocast + GradScaler", DType::F16, 1},
    {"fp16 autocast + GradScaler, 2 micro-batches", DType::F16, 2},
};

std::shared_ptr<nn::Module> model_for(train::ModelKind kind, bool checkpointed) {
  train::TrainerConfig c;
  c.model = kind;
  c.seed = 3;
  c.checkpoint_activations = checkpointed;
  return train::make_model(c, Device::cpu(), nullptr);
}

Tensor labels_for(int64_t batch) {
  std::vector<int64_t> classes;
  for (int64_t i = 0; i < batch; ++i) classes.push_back(i % 10);
  return tensor(classes, {batch});
}

// Parameters and buffers after two SGD steps of `setting` on fixed images.
std::vector<std::vector<double>> after_two_steps(nn::Module& model, const Setting& setting, int64_t batch) {
  optim::SGD::Options so;
  so.lr = 0.05;
  so.momentum = 0.9;
  optim::SGD opt(model.parameters(), so);
  amp::GradScaler::Options gso;
  gso.enabled = setting.dtype == DType::F16;
  amp::GradScaler scaler(gso);
  training::TrainStep step(opt, scaler, {Device::Kind::CPU, setting.dtype, 0.0, setting.micro_batches});
  Generator gen(7);
  const Tensor images = randn({batch, 3, 32, 32}, gen);
  const Tensor labels = labels_for(batch);
  const int64_t micro = batch / setting.micro_batches;
  for (int s = 0; s < 2; ++s) {
    step.run([&](int i) {
      const Tensor x = images.slice(i * micro, (i + 1) * micro);
      return cross_entropy(model(x), labels.slice(i * micro, (i + 1) * micro));
    });
  }
  std::vector<std::vector<double>> state;
  for (const auto& [name, t] : model.state_dict()) state.push_back(t.to_vector<double>());
  return state;
}

TEST(CheckpointActivations, SmallCnnTakesThePlainStepsBitForBit) {
  for (const Setting& setting : kSettings) {
    SCOPED_TRACE(setting.name);
    auto plain = model_for(train::ModelKind::SmallCNN, false);
    auto checkpointed = model_for(train::ModelKind::SmallCNN, true);
    EXPECT_EQ(after_two_steps(*plain, setting, 8), after_two_steps(*checkpointed, setting, 8));
  }
}

TEST(CheckpointActivations, AirNetTakesThePlainStepsBitForBit) {
  const Setting setting{"bf16 autocast, 2 micro-batches", DType::BF16, 2};
  auto plain = model_for(train::ModelKind::AirNet, false);
  auto checkpointed = model_for(train::ModelKind::AirNet, true);
  EXPECT_EQ(after_two_steps(*plain, setting, 4), after_two_steps(*checkpointed, setting, 4));
}

TEST(CheckpointActivations, CctTakesThePlainStepsBitForBit) {
  for (const Setting& setting : {kSettings[0], kSettings[3]}) {
    SCOPED_TRACE(setting.name);
    auto plain = model_for(train::ModelKind::Cct4, false);
    auto checkpointed = model_for(train::ModelKind::Cct4, true);
    EXPECT_EQ(after_two_steps(*plain, setting, 4), after_two_steps(*checkpointed, setting, 4));
  }
}

TEST(CheckpointActivations, TheBlocksAreTheTopLevelOnes) {
  auto small = model_for(train::ModelKind::SmallCNN, true);
  auto& features = dynamic_cast<nn::Sequential&>(*small->named_children()[0].second);
  EXPECT_EQ(features.checkpointed_blocks(), (std::vector<size_t>{0, 3, 7, 10, 14}));
  auto air = model_for(train::ModelKind::AirNet, true);
  auto& blocks = dynamic_cast<nn::Sequential&>(*air->named_children()[1].second);
  EXPECT_EQ(blocks.checkpointed_blocks(), (std::vector<size_t>{0, 1, 2}));
  // A CCT's: its tokenizer's conv stages (conv, ReLU, pool) and each encoder layer.
  for (const auto& [kind, stages, layers] : {std::tuple{train::ModelKind::Cct4, std::vector<size_t>{0, 3}, 4u},
                                             std::tuple{train::ModelKind::Cct7, std::vector<size_t>{0}, 7u}}) {
    auto model = model_for(kind, true);
    auto& cct = dynamic_cast<models::Cct&>(*model);
    EXPECT_EQ(cct.tokenizer().checkpointed_blocks(), stages);
    std::vector<size_t> each_layer(layers);
    for (size_t i = 0; i < layers; ++i) each_layer[i] = i;
    EXPECT_EQ(cct.encoder().layers().checkpointed_blocks(), each_layer);
  }
}

void expect_within(int64_t planned, int64_t measured) {
  EXPECT_LE(std::abs(static_cast<double>(planned - measured)), 0.05 * static_cast<double>(measured))
      << "planned " << planned << " bytes, measured " << measured;
}

// One checkpointed training step of `kind` against the plan for it; with micro-batches, sliced from
// one batch as train_cifar's --accum slices them (the saved input keeps the whole batch's storage).
void expect_planned_step(train::ModelKind kind, const Setting& setting) {
  const int64_t batch = 16, micro = batch / setting.micro_batches;
  amp::MemoryPlanOptions po;
  po.input_shape = {micro, 3, 32, 32};
  po.micro_batches = setting.micro_batches;
  po.autocast = setting.dtype;
  po.loss_scaling = setting.dtype == DType::F16;
  po.loss = [](const Tensor& logits) { return cross_entropy(logits, zeros({logits.size(0)}, DType::I64)); };
  const amp::MemoryPlan plain_plan = amp::plan_memory(*model_for(kind, false), po);
  auto model = model_for(kind, true);
  const amp::MemoryPlan plan = amp::plan_memory(*model, po);
  EXPECT_EQ(plain_plan.recompute_fixed + plain_plan.recompute_per_sample, 0);
  EXPECT_LT(plan.saved_activations, plain_plan.saved_activations * 2 / 3);

  optim::SGD opt(model->parameters(), optim::SGD::Options{0.01, 0.9});
  amp::GradScaler::Options gso;
  gso.enabled = setting.dtype == DType::F16;
  amp::GradScaler scaler(gso);
  training::TrainStep step(opt, scaler, {Device::Kind::CPU, setting.dtype, 0.0, setting.micro_batches});
  const Tensor images = randn({batch, 3, 32, 32});
  const Tensor labels = labels_for(batch);
  reset_peak_memory_stats(Device::cpu());
  autograd::reset_saved_tensor_peak();
  step.run([&](int i) {
    return cross_entropy((*model)(images.slice(i * micro, (i + 1) * micro)), labels.slice(i * micro, (i + 1) * micro));
  });
  const MemoryReport measured = memory_report();
  std::cout << setting.name << ":\n" << plan.str() << measured.str();
  expect_within(plan.saved_activations, measured[MemoryCategory::SavedActivations].peak);
}

TEST(CheckpointActivations, ThePlannerPredictsTheCheckpointedStepWithinFivePercent) {
  for (const Setting& setting : kSettings) {
    SCOPED_TRACE("SmallCNN, " + setting.name);
    expect_planned_step(train::ModelKind::SmallCNN, setting);
  }
  SCOPED_TRACE("AirNet, bf16 autocast");
  expect_planned_step(train::ModelKind::AirNet, kSettings[1]);
  SCOPED_TRACE("cct4, fp32 and bf16 autocast");
  expect_planned_step(train::ModelKind::Cct4, kSettings[0]);
  expect_planned_step(train::ModelKind::Cct4, kSettings[1]);
  // The three pillars at once: bf16 autocast, 4 micro-batches, checkpointing.
  SCOPED_TRACE("cct4, bf16 autocast, 4 micro-batches");
  expect_planned_step(train::ModelKind::Cct4, {"bf16 autocast, 4 micro-batches", DType::BF16, 4});
}

}  // namespace
}  // namespace demi
