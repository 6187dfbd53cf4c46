// train_cifar's command line as a person meets it: out-of-range values are refused with a sentence
// that names the flag, the rule and the value (not CLI11's "0.000000 to 1797693134862315..."),
// exit status 2, before any data is read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

using testing::HasSubstr;
using testing::Not;

struct CliRun {
  std::string output;  // stdout and stderr
  int status = -1;
};

CliRun run_train_cifar(const std::string& args) {
  const std::string command = std::string(DEMI_TRAIN_CIFAR) + " --data-dir /nonexistent " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  CliRun run;
  std::array<char, 4096> buffer;
  while (pipe && std::fgets(buffer.data(), buffer.size(), pipe)) run.output += buffer.data();
  const int status = pipe ? ::pclose(pipe) : -1;
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST(TrainCifarCli, RangeErrorsReadAsAPersonWouldWriteThem) {
  const CliRun zero = run_train_cifar("--batch-size 0");
  EXPECT_EQ(zero.status, 2);
  EXPECT_THAT(zero.output, HasSubstr("--batch-size: must be positive, got 0"));
  EXPECT_THAT(zero.output, Not(HasSubstr("000000")));

  const CliRun negative = run_train_cifar("--epochs -1");
  EXPECT_EQ(negative.status, 2);
  EXPECT_THAT(negative.output, HasSubstr("--epochs: must be >= 0, got -1"));

  const CliRun momentum = run_train_cifar("--momentum 2");
  EXPECT_EQ(momentum.status, 2);
  EXPECT_THAT(momentum.output, HasSubstr("--momentum: must be between 0 and 0.999, got 2"));

  const CliRun word = run_train_cifar("--lr fast");
  EXPECT_EQ(word.status, 2);
  EXPECT_THAT(word.output, HasSubstr("--lr: 'fast' is not a number"));
}

// --plan needs no data (the data dir here does not exist) and trains nothing.
TEST(TrainCifarCli, PlanPrintsTheMemoryTableAndExits) {
  const CliRun plan = run_train_cifar("--plan --precision bf16 --half-params --master-weights none");
  EXPECT_EQ(plan.status, 0) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("memory plan: SmallCNN bf16 (half params, master weights none)"));
  EXPECT_THAT(plan.output, HasSubstr("master weights                        0.00"));
  EXPECT_THAT(plan.output, HasSubstr("saved activations, traced at batch 1 and 2"));
}

// --checkpoint-activations plans the inputs of each block, and the recomputation of one of them.
TEST(TrainCifarCli, PlanWithCheckpointedActivations) {
  const CliRun plan = run_train_cifar("--plan --precision fp16 --accum 2 --checkpoint-activations");
  EXPECT_EQ(plan.status, 0) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("batch 128 in 2 micro-batches, activations checkpointed, on "));
  EXPECT_THAT(plan.output, HasSubstr("MB per image after the forward pass (checkpointed blocks keep their inputs)"));
  EXPECT_THAT(plan.output, HasSubstr("while backward recomputes one block at a time: at most "));
}

// A CCT plans like the CNNs, with its recipe's AdamW (two moments per parameter).
TEST(TrainCifarCli, PlanForACctWithCheckpointedLayers) {
  const CliRun plan = run_train_cifar("--plan --model cct4 --precision bf16 --checkpoint-activations");
  EXPECT_EQ(plan.status, 0) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("memory plan: cct4 bf16 (master weights fp32), adamw, batch 128, activations "
                                     "checkpointed"));
  EXPECT_THAT(plan.output, HasSubstr("while backward recomputes one block at a time: at most "));
  const CliRun wrong = run_train_cifar("--plan --recipe cct --model SmallCNN");
  EXPECT_EQ(wrong.status, 2);
  EXPECT_THAT(wrong.output, HasSubstr("--recipe cct trains a CCT (cct4 or cct7), not SmallCNN"));
}

}  // namespace
