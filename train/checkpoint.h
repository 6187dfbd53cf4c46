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
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/tensor/state_dict.h"
#include "framework/tensor/tensor.h"

namespace demi::train {

struct Checkpoint {
  StateDict model;      // model.state_dict()
  StateDict optimizer;  // optimizer.state_dict()
  nlohmann::json state;  // the caller's fields (an object; training_checkpoint.h says which)
  std::string dir;       // the step directory it was read from
};

// Checks the caller's fields of a state.json read from `name`; throws demi::Error when they are
// not what the caller wrote.
using StateCheck = std::function<void(const nlohmann::json& state, const std::string& name)>;

// Writes a checkpoint of `step` into out_dir and commits it; removes checkpoints older than the
// previous one. Throws demi::Error (disk full, permissions) leaving the committed one intact.
void save_checkpoint(const std::string& out_dir, int64_t step, const Checkpoint& checkpoint);

// Loads the committed checkpoint of out_dir after verifying sizes, checksums and `check` (when
// given); if it fails, warns and falls back to the newest older checkpoint that passes. Throws
// demi::Error naming the directory and what is wrong when none does.
Checkpoint load_checkpoint(const std::string& out_dir, const StateCheck& check = nullptr);

// The commit record (state.json): validates that it is an object and its "checkpoint" record (the
// step directory and its files' sizes and checksums) and returns it; throws demi::Error naming
// `name` on malformed input. The caller's fields are its own to check. Exposed for the fuzzer and
// for tools.
nlohmann::json parse_checkpoint_state(const std::string& text, const std::string& name);

// object[key] as a T, checked before it is converted (1e33 into an integer is undefined
// behaviour, not an exception): throws demi::Error naming `name` when the key is missing or the
// value is of the wrong type or out of T's range.
template <typename T>
T read_field(const nlohmann::json& object, const char* key, const std::string& name) {
  DEMI_CHECK(object.contains(key), name, ": missing \"", key, "\"");
  const nlohmann::json& v = object.at(key);
  if constexpr (std::is_integral_v<T>) {
    DEMI_CHECK(std::is_signed_v<T> ? v.is_number_integer() : v.is_number_unsigned(), name, ": \"", key,
               "\" must be a", std::is_signed_v<T> ? "n integer" : " non-negative integer", ", got ", v.dump());
    if constexpr (std::is_signed_v<T>) {
      DEMI_CHECK(v.get<int64_t>() >= std::numeric_limits<T>::min() && v.get<int64_t>() <= std::numeric_limits<T>::max(),
                 name, ": \"", key, "\" is out of range: ", v.dump());
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    DEMI_CHECK(v.is_number(), name, ": \"", key, "\" must be a number, got ", v.type_name());
  }
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    DEMI_THROW(name, ": \"", key, "\" has the wrong type (", v.type_name(), ")");
  }
}

// 64-bit FNV-1a of bytes: cheap, and enough to catch truncation and corruption (not an attacker).
uint64_t fnv1a64(const void* data, size_t size);

}  // namespace demi::train
