// Test helper for test_checkpoint_crash: writes checkpoints of a known content in a loop until it
// is killed. Step k's tensors are all equal to k, so a reader can tell a consistent checkpoint from
// a mix of two. Resumes from the committed checkpoint so steps keep increasing across kills.
// Usage: checkpoint_writer DIR
#include <iostream>

#include "framework/demi/demi.h"
#include "train/checkpoint.h"

int main(int argc, char** argv) {
  using namespace demi;
  if (argc != 2) {
    std::cerr << "usage: checkpoint_writer DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  int64_t step = 0;
  try {
    step = train::load_checkpoint(dir).state.at("step").get<int64_t>();
  } catch (const Error&) {
    // nothing committed yet
  }
  for (;;) {
    ++step;
    const auto k = static_cast<double>(step);
    train::Checkpoint c;
    // ~1.5 MB in all, so a kill often lands inside a write
    c.model = {{"conv.weight", full({256, 1024}, k)}, {"fc.weight", full({64, 1024}, k)}};
    c.optimizer = {{"momentum.conv.weight", full({256, 1024}, k)}};
    c.state = {{"model", "test"}, {"precision", "fp32"}, {"epochs_done", 0}, {"step", step}};
    train::save_checkpoint(dir, step, c);
  }
}
