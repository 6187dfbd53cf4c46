// SyncBatchNorm on 2 ranks: with DDP, a conv + batch-norm net trains exactly like one process on
// the concatenated batch (outputs, gradients, weights and running statistics); per-replica batch
// norm (DDP's default) does not, which is what the option is for.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "framework/demi/demi.h"
#include "support/dist_world.h"

namespace demi {
namespace {

using test::world;

std::shared_ptr<nn::Module> make_net() {
  Generator gen(11);
  auto net = std::make_shared<nn::Sequential>();
  net->emplace<nn::Conv2d>(nn::Conv2d::Options{3, 6, 3, 1, 1, false}, gen);
  net->emplace<nn::BatchNorm2d>(nn::BatchNorm2d::Options{6});
  net->emplace<nn::ReLU>();
  net->emplace<nn::Flatten>();
  net->emplace<nn::Linear>(nn::Linear::Options{6 * 6 * 6, 10, true}, gen);
  return net;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  return diff / scale;
}

// Trains 3 SGD steps on 2 ranks (each its half of a 12-example batch) and in one process on the
// whole batch; returns the largest relative difference over all weights and running statistics.
double ddp_vs_one_process(bool sync) {
  auto group = std::shared_ptr<dist::ProcessGroup>(&world(), [](auto*) {});
  std::shared_ptr<nn::Module> reference = make_net(), local = make_net();
  if (sync) local = dist::convert_sync_batch_norm(local, group);
  dist::DistributedDataParallel ddp(local, group);
  optim::SGD::Options o;
  o.lr = 0.2;
  optim::SGD ref_opt(reference->parameters(), o), opt(local->parameters(), o);
  double worst = 0.0;
  for (int step = 0; step < 3; ++step) {
    Generator gen(step);
    const Tensor x = randn({12, 3, 6, 6}, gen) * 2.0 + 1.0;
    std::vector<float> y(12);
    for (int i = 0; i < 12; ++i) y[i] = static_cast<float>((i * 3 + step) % 10);
    const Tensor labels = tensor(y, {12}).to(DType::I64);
    const int64_t r = world().rank();
    ref_opt.zero_grad();
    cross_entropy((*reference)(x), labels).backward();
    ref_opt.step();
    opt.zero_grad();
    cross_entropy(ddp(x.slice(6 * r, 6 * r + 6)), labels.slice(6 * r, 6 * r + 6)).backward();
    opt.step();
  }
  const auto a = reference->state_dict(), b = local->state_dict();
  for (const auto& [name, t] : a) {
    if (name.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(t.item<int64_t>(), b.at(name).item<int64_t>());
      continue;
    }
    worst = std::max(worst, max_rel_diff(b.at(name), t));
  }
  return worst;
}

TEST(SyncBatchNorm, TwoRanksTrainExactlyLikeOneProcessOnTheWholeBatch) {
  const double synced = ddp_vs_one_process(true);
  const double per_replica = ddp_vs_one_process(false);
  std::cout << "largest relative difference from one process: SyncBatchNorm " << synced << ", per-replica "
            << per_replica << "\n";
  EXPECT_LT(synced, 1e-5) << "SyncBatchNorm + DDP against one process";
  EXPECT_GT(per_replica, 1e-3) << "per-replica statistics should differ measurably (else this test proves nothing)";
}

TEST(SyncBatchNorm, ConvertReplacesEveryBatchNormAndKeepsItsTensors) {
  auto group = std::shared_ptr<dist::ProcessGroup>(&world(), [](auto*) {});
  auto net = make_net();
  const Tensor weight = net->named_parameters()[1].second;  // "1.weight", the batch norm's
  auto converted = dist::convert_sync_batch_norm(net, group);
  EXPECT_EQ(converted, net);
  auto& seq = static_cast<nn::Sequential&>(*converted);
  EXPECT_NE(dynamic_cast<dist::SyncBatchNorm*>(&seq[1]), nullptr);
  EXPECT_TRUE(converted->named_parameters()[1].second.is_same(weight));
  // Eval uses the running statistics, locally, exactly as BatchNorm2d.
  converted->eval();
  const Tensor x = randn({2, 3, 6, 6});
  const auto out_sync = (*converted)(x).to_vector<float>();
  auto plain = make_net();
  plain->eval();
  EXPECT_EQ(out_sync, (*plain)(x).to_vector<float>());
}

}  // namespace
}  // namespace demi
