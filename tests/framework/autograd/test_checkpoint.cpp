// demi::checkpoint against the same computation without it: bit-identical gradients for inputs and
// parameters in fp32, under bf16 autocast, under fp16 autocast with a GradScaler, with dropout, and
// over two micro-batches of TrainStep; the default generators end where the plain run leaves them;
// outputs used twice, vector outputs, nested checkpoints; clear errors for a second backward and
// an input changed in place; and the saved bytes of a chain of checkpointed blocks are its inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

// A chain of `depth` blocks y = dropout(gelu(linear(x))) of width `width`, its parameters leaves.
struct Chain {
  std::vector<Tensor> weights, biases;
  double dropout_p = 0.0;

  Chain(int depth, int64_t width, uint64_t seed) {
    Generator gen(seed);
    for (int i = 0; i < depth; ++i) {
      weights.push_back((randn({width, width}, gen) * (1.0 / 8.0)).requires_grad_());
      biases.push_back((randn({width}, gen) * 0.1).requires_grad_());
    }
  }
  Tensor block(size_t i, const Tensor& x) const {
    const Tensor y = gelu(linear(x, weights[i], biases[i]));
    return dropout_p > 0.0 ? dropout(y, dropout_p, true) : y;
  }
  Tensor forward(const Tensor& x, bool checkpointed) const {
    Tensor y = x;
    for (size_t i = 0; i < weights.size(); ++i) {
      y = checkpointed ? checkpoint([this, i](const Tensor& in) { return block(i, in); }, y) : block(i, y);
    }
    return y;
  }
  std::vector<Tensor> parameters() const {
    std::vector<Tensor> all = weights;
    all.insert(all.end(), biases.begin(), biases.end());
    return all;
  }
  void zero_grad() const {
    for (const Tensor& p : parameters()) p.set_grad(Tensor());
  }
};

// Every gradient (of the parameters, then of x when it has one), as float vectors.
std::vector<std::vector<float>> grads_of(const Chain& chain, const Tensor& x) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : chain.parameters()) {
    EXPECT_TRUE(p.grad().defined());
    out.push_back(p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>{});
  }
  if (x.requires_grad()) out.push_back(x.grad().to_vector<float>());
  return out;
}

// One forward and backward of `chain` on a fresh copy of `input`, under autocast to `dtype` (F32:
// none) with the loss scaled by `scaler` when given; the gradients, and the CPU generator's state
// after backward.
struct Outcome {
  std::vector<std::vector<float>> grads;
  GeneratorState rng;
};
Outcome run(const Chain& chain, const Tensor& input, bool checkpointed, DType dtype = DType::F32,
        amp::GradScaler* scaler = nullptr) {
  chain.zero_grad();
  manual_seed(11);
  Tensor x = input.clone();
  if (input.requires_grad()) x.requires_grad_();
  Tensor loss;
  {
    std::optional<amp::AutocastGuard> autocast;
    if (dtype != DType::F32) autocast.emplace(Device::Kind::CPU, dtype);
    loss = chain.forward(x, checkpointed).to(DType::F32).pow(2.0).mean();
  }
  (scaler ? scaler->scale(loss) : loss).backward();
  return {grads_of(chain, x), default_generator().state()};
}

void expect_same_run(const Outcome& plain, const Outcome& checkpointed) {
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) EXPECT_EQ(plain.grads[i], checkpointed.grads[i]) << "gradient " << i;
  EXPECT_EQ(plain.rng, checkpointed.rng);
}

Tensor inputs(bool requires_grad) {
  Generator gen(5);
  Tensor x = randn({6, 16}, gen);
  if (requires_grad) x.requires_grad_();
  return x;
}

TEST(Checkpoint, GradientsAreBitIdenticalInFp32ForInputsAndParameters) {
  const Chain chain(3, 16, 1);
  for (bool x_requires_grad : {true, false}) {
    SCOPED_TRACE(x_requires_grad ? "input requires grad" : "input does not require grad");
    expect_same_run(run(chain, inputs(x_requires_grad), false), run(chain, inputs(x_requires_grad), true));
  }
}

TEST(Checkpoint, GradientsAreBitIdenticalUnderAutocastAndWithAGradScaler) {
  const Chain chain(3, 16, 2);
  expect_same_run(run(chain, inputs(true), false, DType::BF16), run(chain, inputs(true), true, DType::BF16));
  amp::GradScaler scaler;
  expect_same_run(run(chain, inputs(true), false, DType::F16, &scaler),
                  run(chain, inputs(true), true, DType::F16, &scaler));
}

TEST(Checkpoint, DropoutDrawsTheSameMaskAndTheGeneratorEndsWhereThePlainRunLeavesIt) {
  Chain chain(3, 16, 3);
  chain.dropout_p = 0.3;
  const Outcome plain = run(chain, inputs(true), false);
  const Outcome checkpointed = run(chain, inputs(true), true);
  expect_same_run(plain, checkpointed);
  EXPECT_EQ(checkpointed.rng.offset, 3u * 6u * 16u);  // the three masks, drawn once each
  expect_same_run(run(chain, inputs(true), false, DType::BF16), run(chain, inputs(true), true, DType::BF16));
}

TEST(Checkpoint, TwoMicroBatchesOfFp16TrainStepWithAGradScalerTakeTheSameStep) {
  std::vector<std::vector<float>> after[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    Chain chain(3, 16, 4);
    chain.dropout_p = 0.1;
    manual_seed(9);
    optim::SGD opt(chain.parameters(), optim::SGD::Options{0.1, 0.9});
    amp::GradScaler scaler;
    training::TrainStep step(opt, scaler, {Device::Kind::CPU, DType::F16, 0.0, 2});
    const Tensor x = inputs(false);
    for (int s = 0; s < 2; ++s) {
      step.run([&](int micro) { return chain.forward(x.slice(micro * 3, micro * 3 + 3), checkpointed).pow(2.0).mean(); });
    }
    for (const Tensor& p : chain.parameters()) after[checkpointed].push_back(p.to_vector<float>());
    EXPECT_EQ(default_generator().offset(), 2u * 2u * 3u * 3u * 16u);  // steps, micro-batches, masks of 3 x 16
  }
  EXPECT_EQ(after[0], after[1]);
}

TEST(Checkpoint, PostAccumulateHooksFireForParametersInsideTheFunction) {
  const Chain chain(2, 8, 6);
  int fired = 0;
  const int handle = chain.weights[0].register_post_accumulate_grad_hook([&](const Tensor&) { ++fired; });
  const Tensor x = randn({3, 8});
  chain.forward(x, true).sum().backward();
  EXPECT_EQ(fired, 1);
  chain.weights[0].remove_post_accumulate_grad_hook(handle);
}

TEST(Checkpoint, AnOutputUsedTwiceAndVectorOutputs) {
  const Chain chain(1, 8, 7);
  const Tensor x0 = randn({4, 8});
  std::vector<std::vector<float>> grads[2];
  int calls = 0;
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    chain.zero_grad();
    calls = 0;
    auto two = [&](const Tensor& x) {
      ++calls;
      const Tensor h = linear(x, chain.weights[0], chain.biases[0]);
      return std::vector<Tensor>{gelu(h), h * h};
    };
    const std::vector<Tensor> out = checkpointed ? checkpoint(two, x0) : two(x0);
    ASSERT_EQ(out.size(), 2u);
    ((out[0] * out[0]).sum() + out[0].mean() + out[1].sum()).backward();
    grads[checkpointed] = grads_of(chain, x0);
  }
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_EQ(calls, 2);  // forward, and one rerun for every saved tensor of both outputs
}

TEST(Checkpoint, NestedCheckpointsGiveThePlainGradients) {
  const Chain chain(4, 8, 8);
  const Tensor x = randn({4, 8});
  chain.forward(x, false).sum().backward();
  const std::vector<std::vector<float>> plain = grads_of(chain, x);
  chain.zero_grad();
  auto inner = [&](const Tensor& t) { return chain.block(1, chain.block(0, t)); };
  auto outer = [&](const Tensor& t) { return chain.block(3, chain.block(2, checkpoint(inner, t))); };
  checkpoint(outer, x).sum().backward();
  EXPECT_EQ(grads_of(chain, x), plain);
}

TEST(Checkpoint, ASecondBackwardIsRefusedAsWithoutCheckpointing) {
  const Chain chain(2, 8, 9);
  for (bool checkpointed : {false, true}) {
    const Tensor loss = chain.forward(randn({2, 8}), checkpointed).sum();
    loss.backward();
    EXPECT_THAT(error_of([&] { loss.backward(); }), HasSubstr("were freed by an earlier backward()"));
  }
}

TEST(Checkpoint, AnInputChangedInPlaceBeforeBackwardIsAnError) {
  const Chain chain(1, 8, 10);
  const Tensor x = randn({2, 8});
  const Tensor loss = chain.forward(x, true).sum();
  {
    NoGradGuard no_grad;
    x.add_(1.0);
  }
  EXPECT_THAT(error_of([&] { loss.backward(); }),
              HasSubstr("checkpoint: input 0 of the checkpointed function (shape [2, 8], float32) was modified in "
                        "place after the forward pass"));
}

TEST(Checkpoint, AFunctionThatChangesBetweenRunsIsAnError) {
  const Tensor w = randn({8, 8}).requires_grad_();
  int calls = 0;
  auto fickle = [&](const Tensor& x) { return ++calls == 1 ? gelu(linear(x, w)) : linear(x, w); };
  const Tensor loss = checkpoint(fickle, randn({2, 8})).sum();
  EXPECT_THAT(error_of([&] { loss.backward(); }), HasSubstr("must do the same work on every call"));
}

TEST(Checkpoint, WithoutGradModeTheFunctionJustRuns) {
  const Chain chain(2, 8, 12);
  const int64_t before = autograd::saved_tensor_stats().current_bytes;
  NoGradGuard no_grad;
  const Tensor y = chain.forward(randn({2, 8}), true);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(autograd::saved_tensor_stats().current_bytes, before);
  EXPECT_FALSE(autograd::is_recomputing());
}

// Eight Linear + GELU blocks: the plain graph keeps each block's input, linear output and the
// casts; checkpointed, only the eight inputs, and backward's reruns hold one block more at a time,
// as predicted in forward.
TEST(Checkpoint, SavedBytesOfACheckpointedChainAreItsBlocksInputs) {
  const int64_t batch = 32, width = 64, depth = 8;
  const Chain chain(depth, width, 13);
  const int64_t block_input = batch * width * 4;
  int64_t saved[2], peak[2], predicted[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    chain.zero_grad();
    autograd::reset_saved_tensor_peak();
    const int64_t before = autograd::saved_tensor_stats().current_bytes;
    autograd::RecomputeTrace trace;
    const Tensor loss = chain.forward(randn({batch, width}), checkpointed).sum();
    saved[checkpointed] = autograd::saved_tensor_stats().current_bytes - before;
    ASSERT_EQ(trace.peaks().size(), checkpointed ? static_cast<size_t>(depth) : 0u);
    predicted[checkpointed] = 0;
    for (int64_t bytes : trace.peaks()) predicted[checkpointed] = std::max(predicted[checkpointed], bytes - before);
    loss.backward();
    peak[checkpointed] = autograd::saved_tensor_stats().peak_bytes - before;
    EXPECT_EQ(autograd::saved_tensor_stats().current_bytes, before);
  }
  EXPECT_EQ(saved[0], 2 * depth * block_input);  // linear's input and gelu's input, per block
  EXPECT_EQ(saved[1], depth * block_input);      // the blocks' inputs
  EXPECT_EQ(peak[0], saved[0]);
  EXPECT_EQ(predicted[0], 0);
  EXPECT_EQ(predicted[1], (depth + 1) * block_input);  // every input, and the last block's linear output
  EXPECT_EQ(peak[1], predicted[1]);
}

}  // namespace
}  // namespace demi
