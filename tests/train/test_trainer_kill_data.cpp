// The main job survives SIGKILL: train_cifar killed at random instants and resumed each time ends
// with bit-identical weights and the same logged losses (each step once) as a run that was never
// interrupted. Needs the real CIFAR-10 ($DEMI_CIFAR10).
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/real_data.h"
#include "support/temp_dir.h"
#include "support/trainer_run.h"
#include "framework/serialize/safetensors.h"

extern char** environ;

namespace demi {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> train_args(const std::string& out) {
  return {DEMI_TRAIN_CIFAR, "--data-dir", test::real_data_dir(), "--epochs", "4", "--batch-size", "64",
          "--train-subset", "512", "--test-subset", "100", "--threads", "2", "--seed", "5", "--log-every", "1",
          "--out", out};
}

pid_t spawn(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

TEST(TrainerKill, KilledAndResumedRunsEndIdenticalToAnUninterruptedOne) {
  DEMI_REQUIRE_REAL_DATA();
  const test::TempDir whole("demi_kill_whole_"), killed("demi_kill_killed_");
  ASSERT_EQ(wait_exit_code(spawn(train_args(whole.path.string()))), 0);

  std::mt19937 rng(7);
  std::vector<std::string> args = train_args(killed.path.string());
  int kills = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const pid_t pid = spawn(args);
    // Kill once a checkpoint exists, at a random instant of the following epochs.
    for (int ms = 0; !fs::exists(killed.path / "state.json") && ms < 60000; ms += 5)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 1500)(rng)));
    ::kill(pid, SIGKILL);
    kills += wait_exit_code(pid) == -SIGKILL;  // it may have finished first: then there is nothing to resume
    if (attempt == 0) {
      args.push_back("--resume");
      args.push_back(killed.path.string());
    }
  }
  ASSERT_EQ(wait_exit_code(spawn(args)), 0);  // to the end
  EXPECT_GE(kills, 1);

  const auto a = load_safetensors((whole.path / "model.safetensors").string());
  const auto b = load_safetensors((killed.path / "model.safetensors").string());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_EQ(t.to_vector<float>(), b.at(name).to_vector<float>()) << name;

  // metrics.jsonl: each step once, with the same losses, whatever was logged before each kill.
  std::vector<std::pair<int64_t, double>> la, lb;
  for (const auto& r : test::read_jsonl((whole.path / "metrics.jsonl").string()))
    if (r.at("type") == "step") la.emplace_back(r.at("step"), r.at("loss"));
  for (const auto& r : test::read_jsonl((killed.path / "metrics.jsonl").string()))
    if (r.at("type") == "step") lb.emplace_back(r.at("step"), r.at("loss"));
  EXPECT_EQ(la, lb);
}

}  // namespace
}  // namespace demi
