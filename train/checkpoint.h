// Crash-safe training checkpoints. A checkpoint is a directory DIR/checkpoints/step-<N>/ holding
// model.safetensors, optimizer.safetensors and state.json (the training state plus the size and
// checksum of both tensor files). Every file is written to a temporary name, fsynced and renamed;
// the checkpoint becomes *the* checkpoint only when DIR/state.json, a copy of its state.json, is
// atomically replaced: that rename is the commit. A process killed at any instant therefore
// leaves DIR/state.json naming a complete, checksummed checkpoint, and a partial one is never
// taken for a good one. The previous checkpoint is kept until the next commit, so a checkpoint
// that fails verification (a bad disk, a hand-edited file) falls back to the one before it.
// DIR/model.safetensors is a hard link to the latest weights, for people who just want the model.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "framework/tensor/state_dict.h"
#include "framework/tensor/tensor.h"

namespace demi::train {

struct Checkpoint {
  StateDict model;      // model.state_dict()
  StateDict optimizer;  // optimizer.state_dict()
  nlohmann::json state;                     // epochs, step, scaler, RNG, ... (an object)
  std::string dir;                          // the step directory it was read from
};

// Writes a checkpoint of `step` into out_dir and commits it; removes checkpoints older than the
// previous one. Throws demi::Error (disk full, permissions) leaving the committed one intact.
void save_checkpoint(const std::string& out_dir, int64_t step, const Checkpoint& checkpoint);

// Loads the committed checkpoint of out_dir after verifying sizes and checksums; if it fails
// verification, warns and falls back to the newest older checkpoint that verifies. Throws
// demi::Error naming the directory and what is wrong when none does.
Checkpoint load_checkpoint(const std::string& out_dir);

// The commit record (state.json): validates its structure and returns it; throws demi::Error
// naming `name` on malformed input. Exposed for the fuzzer and for tools.
nlohmann::json parse_checkpoint_state(const std::string& text, const std::string& name);

// 64-bit FNV-1a of bytes: cheap, and enough to catch truncation and corruption (not an attacker).
uint64_t fnv1a64(const void* data, size_t size);

}  // namespace demi::train
