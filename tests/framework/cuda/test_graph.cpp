// cuda::CUDAGraph and TrainStep's cuda_graph where no GPU is needed: the CPU has no graphs and says
// so (leaving the graph reusable and no pool in use), misuse names the missing call, and a
// TrainStep asked to capture off CUDA, or with an optimizer that steps on the host, refuses at
// construction. The captures themselves are tested on a GPU (test_graph_cuda.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

TEST(CUDAGraph, TheCpuHasNoGraphsAndSaysSo) {
  cuda::CUDAGraph graph;
  for (int attempt = 0; attempt < 2; ++attempt) {  // a failed begin leaves nothing behind
    EXPECT_THAT(error_of([&] { graph.capture_begin(Device::cpu()); }),
                HasSubstr("cpu has no graphs (CUDA graphs need a CUDA device)"));
    EXPECT_FALSE(graph.capturing());
    EXPECT_FALSE(graph.has_graph());
  }
  // No pool was left in use: a new one can begin on this thread.
  const uint64_t pool = detail::create_pool(Device::cpu());
  EXPECT_EQ(error_of([&] { detail::begin_pool(Device::cpu(), pool); }), "(no error)");
  detail::end_pool(Device::cpu());
  detail::release_pool(Device::cpu(), pool);
}

TEST(CUDAGraph, MisuseNamesTheMissingCall) {
  cuda::CUDAGraph graph;
  EXPECT_THAT(error_of([&] { graph.capture_end(); }), HasSubstr("no capture in progress; call capture_begin first"));
  EXPECT_THAT(error_of([&] { graph.replay(); }), HasSubstr("CUDAGraph::replay: nothing recorded"));
  EXPECT_EQ(error_of([&] { graph.reset(); }), "(no error)");
}

TEST(TrainStepGraph, RefusedOffCudaAndForHostSideOptimizers) {
  Tensor w = ones({4, 4}).requires_grad_();
  optim::SGD sgd({w}, 0.1);
  amp::GradScaler::Options off;
  off.enabled = false;
  amp::GradScaler scaler(off);
  training::TrainStep::Options o;
  o.dtype = DType::F32;
  o.cuda_graph = true;
  EXPECT_THAT(error_of([&] { training::TrainStep(sgd, scaler, o); }),
              HasSubstr("cuda_graph records CUDA kernels, but the step runs on cpu"));
  o.device = Device::Kind::CUDA;  // constructing needs no GPU
  o.graph_warmup_steps = 0;
  EXPECT_THAT(error_of([&] { training::TrainStep(sgd, scaler, o); }), HasSubstr("graph_warmup_steps must be >= 1"));
  o.graph_warmup_steps = 3;
  optim::Muon muon({w}, optim::Muon::Options{});
  EXPECT_THAT(error_of([&] { training::TrainStep(muon, scaler, o); }),
              HasSubstr("this optimizer computes its step on the host"));
  training::TrainStep step(sgd, scaler, o);
  EXPECT_TRUE(sgd.capturable());
  EXPECT_THAT(error_of([&] { step.run([&](int) { return w.sum(); }); }),
              HasSubstr("with cuda_graph, call run(inputs, loss_fn)"));
}

// run(inputs, loss_fn) is run(loss_fn) with the batch passed through: the same steps, bit for bit.
TEST(TrainStepGraph, RunWithInputsStepsAsRunWithAClosure) {
  auto train = [](bool with_inputs) {
    Generator gen(3);
    nn::Linear net(nn::Linear::Options{6, 3}, gen);
    optim::AdamW opt(net.parameters(), 0.01);
    amp::GradScaler scaler;
    training::TrainStep step(opt, scaler, {Device::Kind::CPU, DType::BF16, 1.0, 2});
    for (int k = 0; k < 4; ++k) {
      const Tensor x = randn({4, 6}, gen), y = tensor(std::vector<int64_t>{0, 1, 2, 1}, {4});
      auto loss = [&](int i, const std::vector<Tensor>& b) {
        return cross_entropy(net(b[0].slice(2 * i, 2 * i + 2)), b[1].slice(2 * i, 2 * i + 2));
      };
      if (with_inputs) step.run({x, y}, loss);
      else step.run([&](int i) { return loss(i, {x, y}); });
    }
    return net.weight.to_vector<float>();
  };
  EXPECT_EQ(train(true), train(false));
}

}  // namespace
}  // namespace demi
