// DistributedDataParallel and the GradScaler in a process group, on 2 ranks: DDP equals one process
// training on the concatenated batch, checkpointed or not; every rank skips together when one rank
// alone sees an inf; parameters stay bitwise identical across ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "framework/demi/demi.h"
#include "models/models.h"
#include "support/dist_world.h"
#include "support/tolerance.h"

namespace demi {
namespace {

using test::identical_to_rank0;
using test::world;

// conv -> relu -> flatten -> linear: no batch norm, so a batch split across ranks has exactly the
// gradient of the whole batch (batch norm's per-replica statistics would differ, by design).
std::shared_ptr<nn::Sequential> make_net(uint64_t seed) {
  Generator gen(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->emplace<nn::Conv2d>(nn::Conv2d::Options{3, 8, 3, 1, 1, true}, gen);
  net->emplace<nn::ReLU>();
  net->emplace<nn::Flatten>();
  net->emplace<nn::Linear>(nn::Linear::Options{8 * 8 * 8, 10, true}, gen);
  return net;
}

struct Data {
  Tensor images, labels;
};
// The same 16-example batch on every rank (rank r trains on rows [8r, 8r + 8)).
Data global_batch(uint64_t seed) {
  Generator gen(seed);
  std::vector<float> labels(16);
  for (int i = 0; i < 16; ++i) labels[i] = static_cast<float>((i * 7 + seed) % 10);
  return {randn({16, 3, 8, 8}, gen), tensor(labels, {16}).to(DType::I64)};
}
Data my_half(const Data& d) {
  const int64_t r = world().rank();
  return {d.images.slice(8 * r, 8 * r + 8), d.labels.slice(8 * r, 8 * r + 8)};
}

// a is b within rel of b's largest magnitude: DDP averages the ranks' gradients in another order
// than one process summing the whole batch, so the error scales with the largest term.
void expect_close(const Tensor& a, const Tensor& b, double rel, const std::string& what) {
  const std::vector<double> want = b.to_vector<double>();
  double max_abs = 0.0;
  for (double v : want) max_abs = std::max(max_abs, std::fabs(v));
  test::expect_close(a.to_vector<double>(), want, test::Tolerance{0.0, rel * max_abs + 1e-12}, what);
}

// The reference: one process, the whole batch, plain SGD; and the same run as DDP on 2 ranks.
void check_ddp_matches_one_process(const dist::DistributedDataParallel::Options& options, int micro_batches) {
  auto reference = make_net(1);
  auto local = make_net(100 + world().rank());  // different on each rank: DDP must broadcast rank 0's
  dist::DistributedDataParallel ddp(local, std::shared_ptr<dist::ProcessGroup>(&world(), [](auto*) {}), options);
  for (const auto& [name, p] : local->named_parameters()) ASSERT_TRUE(identical_to_rank0(p)) << name;
  // The reference starts from rank 0's initial weights too (net 100).
  reference->load_state_dict(make_net(100)->state_dict());

  optim::SGD::Options o;
  o.lr = 0.1;
  o.momentum = 0.9;
  optim::SGD ref_opt(reference->parameters(), o), ddp_opt(local->parameters(), o);
  amp::GradScaler::Options disabled;
  disabled.enabled = false;
  amp::GradScaler no_scaler(disabled);
  training::TrainStep::Options step_options{Device::Kind::CPU, DType::F32, 0.0, micro_batches};
  training::TrainStep ref_step(ref_opt, no_scaler, step_options);
  step_options.ddp = &ddp;
  training::TrainStep ddp_step(ddp_opt, no_scaler, step_options);
  for (int step = 0; step < 3; ++step) {
    const Data all = global_batch(step), mine = my_half(all);
    // Micro-batch i of the reference is rows [i*16/m, (i+1)*16/m); of a rank, its half of those.
    ref_step.run([&](int i) {
      const int64_t n = 16 / micro_batches;
      return cross_entropy((*reference)(all.images.slice(i * n, (i + 1) * n)), all.labels.slice(i * n, (i + 1) * n));
    });
    ddp_step.run([&](int i) {
      const int64_t n = 8 / micro_batches;
      return cross_entropy(ddp(mine.images.slice(i * n, (i + 1) * n)), mine.labels.slice(i * n, (i + 1) * n));
    });
    const auto ref_params = reference->named_parameters(), ddp_params = local->named_parameters();
    for (size_t k = 0; k < ref_params.size(); ++k) {
      expect_close(ddp_params[k].second.grad(), ref_params[k].second.grad(), 1e-5,
                   "step " + std::to_string(step) + " gradient of " + ref_params[k].first);
      expect_close(ddp_params[k].second, ref_params[k].second, 1e-5,
                   "step " + std::to_string(step) + " " + ref_params[k].first);
      EXPECT_TRUE(identical_to_rank0(ddp_params[k].second)) << ddp_params[k].first;
    }
  }
}

TEST(DistributedDataParallel, TwoRanksEqualOneProcessOnTheConcatenatedBatch) {
  check_ddp_matches_one_process({}, 1);
}

TEST(DistributedDataParallel, OneBucketPerParameterGivesTheSameResult) {
  dist::DistributedDataParallel::Options tiny;
  tiny.bucket_cap_mb = tiny.first_bucket_cap_mb = 1e-6;  // every parameter alone: 4 all-reduces in flight
  check_ddp_matches_one_process(tiny, 1);
}

TEST(DistributedDataParallel, GradientAccumulationSynchronisesOnlyTheSum) {
  check_ddp_matches_one_process({}, 2);
}

// Activation checkpointing keeps the graph's edges, so DDP's hooks fire as usual: with two
// micro-batches (NoSync on the first), the checkpointed net's steps are the plain net's, bit for bit.
TEST(DistributedDataParallel, ACheckpointedNetTakesThePlainStepsWithAccumulation) {
  std::vector<std::vector<float>> after[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    auto local = make_net(100);
    if (checkpointed) local->checkpoint_blocks({0, 2});
    dist::DistributedDataParallel ddp(local, std::shared_ptr<dist::ProcessGroup>(&world(), [](auto*) {}));
    optim::SGD opt(local->parameters(), optim::SGD::Options{0.1, 0.9});
    amp::GradScaler::Options disabled;
    disabled.enabled = false;
    amp::GradScaler no_scaler(disabled);
    training::TrainStep::Options step_options{Device::Kind::CPU, DType::F32, 0.0, 2};
    step_options.ddp = &ddp;
    training::TrainStep step(opt, no_scaler, step_options);
    for (int s = 0; s < 3; ++s) {
      const Data mine = my_half(global_batch(s));
      step.run([&](int i) { return cross_entropy(ddp(mine.images.slice(i * 4, i * 4 + 4)), mine.labels.slice(i * 4, i * 4 + 4)); });
    }
    for (const Tensor& p : local->parameters()) after[checkpointed].push_back(p.to_vector<float>());
  }
  EXPECT_EQ(after[0], after[1]);
}

TEST(DistributedDataParallel, BucketsFollowTheCaps) {
  auto net = make_net(0);
  auto group = std::shared_ptr<dist::ProcessGroup>(&world(), [](auto*) {});
  EXPECT_EQ(dist::DistributedDataParallel(net, group).num_buckets(), 1u);  // 5,418 parameters: one bucket
  dist::DistributedDataParallel::Options tiny;
  tiny.bucket_cap_mb = tiny.first_bucket_cap_mb = 1e-6;
  EXPECT_EQ(dist::DistributedDataParallel(net, group, tiny).num_buckets(), 4u);
}

// The rule from our story: one rank's inf must make every rank skip, or the replicas diverge.
// No DDP here (it would spread the inf through the gradient sum): the scaler alone must do it.
TEST(GradScalerInAProcessGroup, AnInfOnOneRankMakesEveryRankSkip) {
  for (bool share_found_inf : {true, false}) {
    SCOPED_TRACE(share_found_inf ? "found_inf all-reduced" : "found_inf local (the failure, shown)");
    auto net = make_net(5);
    optim::SGD opt(net->parameters(), {});
    amp::GradScaler::Options so;
    if (share_found_inf) so.reduce_found_inf = dist::found_inf_reduction(std::shared_ptr<dist::ProcessGroup>(&world(), [](auto*) {}));
    amp::GradScaler scaler(so);
    const Data d = my_half(global_batch(0));
    std::vector<Tensor> before;
    for (const Tensor& p : net->parameters()) before.push_back(p.clone());
    scaler.scale(cross_entropy((*net)(d.images), d.labels)).backward();
    if (world().rank() == 1) {
      const Tensor g = net->parameters()[0].grad();
      g.data<float>()[3] = std::numeric_limits<float>::infinity();  // an overflow on rank 1 only
    }
    scaler.step(opt);
    const bool stepped = !scaler.last_step_skipped();
    scaler.update();
    bool unchanged = true;
    for (size_t k = 0; k < before.size(); ++k) {
      unchanged &= std::memcmp(before[k].data_ptr(), net->parameters()[k].data_ptr(), before[k].nbytes()) == 0;
    }
    if (share_found_inf) {
      EXPECT_FALSE(stepped) << "rank " << world().rank();
      EXPECT_TRUE(unchanged) << "rank " << world().rank();
      EXPECT_EQ(scaler.get_scale(), 32768.0) << "rank " << world().rank();
      EXPECT_EQ(scaler.steps_skipped(), 1);
    } else {  // without the all-reduce rank 0 steps and halves nothing: the replicas part ways
      EXPECT_EQ(stepped, world().rank() == 0);
      EXPECT_EQ(scaler.get_scale(), world().rank() == 0 ? 65536.0 : 32768.0);
    }
  }
}

TEST(DistributedDataParallel, Fp16TrainingKeepsEveryRankBitwiseIdentical) {
  // SmallCNN (batch norm per replica, broadcast running statistics), fp16 autocast, dynamic scaler
  // sharing found_inf, different data on each rank: after each step all ranks hold the same bits.
  Generator gen(world().rank());
  auto model = models::make_model("SmallCNN", gen);
  auto group = std::shared_ptr<dist::ProcessGroup>(&world(), [](auto*) {});
  dist::DistributedDataParallel ddp(model, group);
  optim::SGD::Options o;
  o.lr = 0.05;
  o.momentum = 0.9;
  optim::SGD opt(model->parameters(), o);
  amp::GradScaler::Options so;
  so.reduce_found_inf = dist::found_inf_reduction(group);
  amp::GradScaler scaler(so);
  training::TrainStep::Options step_options{Device::Kind::CPU, DType::F16, 0.0, 1};
  step_options.ddp = &ddp;
  training::TrainStep step(opt, scaler, step_options);
  Generator data_gen(1000 + world().rank());
  for (int s = 0; s < 4; ++s) {
    const Tensor x = randn({8, 3, 32, 32}, data_gen);
    std::vector<float> y(8);
    for (int i = 0; i < 8; ++i) y[i] = static_cast<float>((i + s + world().rank()) % 10);
    const auto r = step.run([&](int) { return cross_entropy(ddp(x), tensor(y, {8}).to(DType::I64)); });
    EXPECT_TRUE(identical_to_rank0(full({2}, r.stepped() ? 1.0 : 0.0, DType::F64))) << "step " << s;
    for (const auto& [name, p] : model->named_parameters()) EXPECT_TRUE(identical_to_rank0(p)) << name;
    EXPECT_TRUE(identical_to_rank0(full({1}, scaler.get_scale(), DType::F64))) << "step " << s;
  }
}

}  // namespace
}  // namespace demi
