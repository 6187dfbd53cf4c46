// bench_memory_plan: amp::plan_memory beside memory_report() on one real training step, for SmallCNN,
// AirNet and a 100M-parameter MLP, in fp32, bf16 autocast, bf16 weights with fp32 masters and bf16
// weights with stochastic rounding (no masters). Prints a markdown table (MB, planned / measured
// peak) for docs/amp.md. Usage: bench_memory_plan [batch] [--no-mlp]
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "framework/demi/demi.h"
#include "models/models.h"

namespace {

using namespace demi;

struct Setting {
  const char* name;
  DType autocast;
  bool half_params;
  optim::MasterWeights masters;
};

struct Net {
  std::string name;
  Shape input;          // one batch
  int64_t classes;
  int optimizer_state;  // SGD with momentum 1, AdamW 2
};

std::shared_ptr<nn::Module> make(const std::string& name, Generator& gen) {
  if (name == "SmallCNN") return std::make_shared<models::SmallCNN>(gen);
  if (name == "AirNet") return std::make_shared<models::AirNet>(gen);
  // 2048 -> 8192 -> 8192 -> 2048: 100.7M parameters
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->emplace<nn::Linear>(2048, 8192, gen).emplace<nn::ReLU>().emplace<nn::Linear>(8192, 8192, gen)
      .emplace<nn::ReLU>().emplace<nn::Linear>(8192, 2048, gen);
  return mlp;
}

std::string mb(int64_t planned, int64_t measured) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(planned >= 100'000'000 ? 0 : 2) << planned / 1e6 << " / " << measured / 1e6;
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 && argv[1][0] != '-' ? std::atoll(argv[1]) : 128;
  bool mlp = true;
  for (int i = 1; i < argc; ++i) mlp = mlp && std::string(argv[i]) != "--no-mlp";
  const Setting settings[] = {
      {"fp32", DType::F32, false, optim::MasterWeights::Fp32},
      {"bf16 autocast", DType::BF16, false, optim::MasterWeights::Fp32},
      {"bf16 weights + fp32 masters", DType::BF16, true, optim::MasterWeights::Fp32},
      {"bf16 weights + stochastic rounding", DType::BF16, true, optim::MasterWeights::None},
  };
  std::vector<Net> nets = {{"SmallCNN", {batch, 3, 32, 32}, 10, 1}, {"AirNet", {batch, 3, 32, 32}, 10, 1}};
  if (mlp) nets.push_back({"MLP 100M (AdamW)", {std::min<int64_t>(batch, 64), 2048}, 2048, 2});

  std::cout << "| net | setting | parameters | gradients | optimizer state | master weights | saved activations |\n"
            << "|---|---|---:|---:|---:|---:|---:|\n";
  for (const Net& net : nets) {
    for (const Setting& s : settings) {
      Generator gen(0);
      std::shared_ptr<nn::Module> model = make(net.name.substr(0, net.name.find(' ')), gen);
      if (s.half_params) model->to(s.autocast);
      amp::MemoryPlanOptions po;
      po.input_shape = net.input;
      po.autocast = s.autocast;
      po.optimizer_state_tensors = net.optimizer_state;
      po.masters = s.masters;
      po.loss = [](const Tensor& logits) { return cross_entropy(logits, zeros({logits.size(0)}, DType::I64)); };
      const amp::MemoryPlan plan = amp::plan_memory(*model, po);

      std::unique_ptr<optim::Optimizer> opt;
      const optim::Rounding rounding =
          s.masters == optim::MasterWeights::None ? optim::Rounding::Stochastic : optim::Rounding::Nearest;
      if (net.optimizer_state == 2) {
        optim::AdamW::Options o;
        o.master_weights = s.masters;
        o.rounding = rounding;
        opt = std::make_unique<optim::AdamW>(model->parameters(), o);
      } else {
        optim::SGD::Options o;
        o.lr = 0.01;
        o.momentum = 0.9;
        o.master_weights = s.masters;
        o.rounding = rounding;
        opt = std::make_unique<optim::SGD>(model->parameters(), o);
      }
      amp::GradScaler::Options so;
      so.enabled = false;  // bf16: no loss scaling
      amp::GradScaler scaler(so);
      const Tensor inputs = randn(net.input, gen);
      std::vector<int64_t> classes(static_cast<size_t>(net.input[0]));
      for (size_t i = 0; i < classes.size(); ++i) classes[i] = static_cast<int64_t>(i) % net.classes;
      const Tensor labels = tensor(classes, {net.input[0]});
      training::TrainStep step(*opt, scaler, {Device::Kind::CPU, s.autocast, 0.0, 1});
      reset_peak_memory_stats(Device::cpu());
      step.run([&](int) { return cross_entropy((*model)(inputs), labels); });
      const MemoryReport m = memory_report();
      std::cout << "| " << net.name << " | " << s.name << " | "
                << mb(plan.parameters, m[MemoryCategory::Parameters].peak) << " | "
                << mb(plan.gradients, m[MemoryCategory::Gradients].peak) << " | "
                << mb(plan.optimizer_state, m[MemoryCategory::OptimizerState].peak) << " | "
                << mb(plan.master_weights, m[MemoryCategory::MasterWeights].peak) << " | "
                << mb(plan.saved_activations, m[MemoryCategory::SavedActivations].peak) << " |\n"
                << std::flush;
    }
  }
  std::cout << "\nMB planned / measured peak (memory_report() over one training step, batch " << batch
            << "; the MLP at batch " << std::min<int64_t>(batch, 64) << ")\n";
  return 0;
}
