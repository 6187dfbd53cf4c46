// Save and restore of a training run: the only file that names the checkpoint's training keys.
#include "train/training_checkpoint.h"

#include "train/checkpoint.h"

namespace demi::train {
namespace {

using nlohmann::json;

// optimizer.safetensors holds the optimizer's state and, under this prefix, lookahead's averages.
constexpr char kLookaheadPrefix[] = "lookahead.";

// The checkpoint of `dir`, its training fields validated (a checkpoint that fails falls back to
// the previous one), checked to be of this run's model, precision and recipe.
Checkpoint load_matching(const std::string& dir, const TrainerConfig& c, TrainingState& state) {
  Checkpoint checkpoint = load_checkpoint(dir, [](const json& s, const std::string& name) { parse_training_state(s, name); });
  state = parse_training_state(checkpoint.state, checkpoint.dir + "/state.json");
  const std::string model = name_of(c.model), precision = name_of(c.precision), recipe = name_of(c.recipe);
  DEMI_CHECK(state.model == model && state.precision == precision && state.recipe == recipe,
             "--resume: the checkpoint is ", state.model, "/", state.precision, " (recipe ", state.recipe,
             ") but this run is ", model, "/", precision, " (recipe ", recipe,
             "); pass the same --model, --precision and --recipe");
  return checkpoint;
}

// The optimizer's state and lookahead's, as save_training wrote them into one file.
void split_optimizer_state(const StateDict& saved, StateDict& optimizer, StateDict& lookahead) {
  const std::string prefix = kLookaheadPrefix;
  for (const auto& [key, value] : saved) {
    if (key.rfind(prefix, 0) == 0) lookahead[key.substr(prefix.size())] = value;
    else optimizer[key] = value;
  }
}

}  // namespace

TrainingState parse_training_state(const json& s, const std::string& name) {
  DEMI_CHECK(s.is_object(), name, ": expected a JSON object, got ", s.type_name());
  TrainingState t;
  t.model = read_field<std::string>(s, "model", name);
  t.precision = read_field<std::string>(s, "precision", name);
  t.progress.epochs_done = read_field<int>(s, "epochs_done", name);
  DEMI_CHECK(t.progress.epochs_done >= 0, name, ": \"epochs_done\" is negative");
  t.progress.step = read_field<int64_t>(s, "step", name);
  DEMI_CHECK(t.progress.step >= 0, name, ": \"step\" is negative");
  if (s.contains("batches_done_in_epoch")) {
    t.progress.batches_done_in_epoch = read_field<int64_t>(s, "batches_done_in_epoch", name);
    DEMI_CHECK(t.progress.batches_done_in_epoch >= 0, name, ": \"batches_done_in_epoch\" is negative");
  }
  if (s.contains("best_accuracy")) t.progress.best_accuracy = read_field<double>(s, "best_accuracy", name);
  if (s.contains("scaler")) {
    DEMI_CHECK(s.at("scaler").is_object(), name, ": \"scaler\" must be an object");
    for (const auto& [key, value] : s.at("scaler").items()) t.scaler[key] = read_field<double>(s.at("scaler"), key.c_str(), name);
  }
  t.recipe = s.contains("recipe") ? read_field<std::string>(s, "recipe", name) : name_of(Recipe::Standard);
  return t;
}

void save_training(const TrainerConfig& c, const Components& parts, const Progress& p) {
  const json state = {{"model", name_of(c.model)},
                      {"precision", name_of(c.precision)},
                      {"recipe", name_of(c.recipe)},
                      {"epochs_done", p.epochs_done},
                      {"step", p.step},
                      {"batches_done_in_epoch", p.batches_done_in_epoch},
                      {"best_accuracy", p.best_accuracy},
                      {"seed", c.seed},
                      {"scaler", parts.scaler->state_dict()},
                      {"lr", parts.optimizer->lr(0)}};
  StateDict optimizer = parts.optimizer->state_dict();
  if (parts.lookahead) {
    for (const auto& [key, value] : parts.lookahead->state_dict()) optimizer[kLookaheadPrefix + key] = value;
  }
  save_checkpoint(c.out_dir, p.step, {parts.model->state_dict(), optimizer, state, ""});
}

Progress restore_training(const std::string& dir, const TrainerConfig& c, Components& parts) {
  TrainingState state;
  const Checkpoint checkpoint = load_matching(dir, c, state);
  parts.model->load_state_dict(checkpoint.model);
  StateDict optimizer, lookahead;
  split_optimizer_state(checkpoint.optimizer, optimizer, lookahead);
  parts.optimizer->load_state_dict(optimizer);
  DEMI_CHECK(lookahead.empty() == !parts.lookahead, "--resume: the checkpoint was written ",
             parts.lookahead ? "without" : "with", " --lookahead; resume with the same setting");
  if (parts.lookahead) parts.lookahead->load_state_dict(lookahead);
  if (parts.scaler->is_enabled()) parts.scaler->load_state_dict(state.scaler);
  if (parts.schedule) {
    for (int64_t i = 0; i < state.progress.step; ++i) parts.schedule->step();
  }
  return state.progress;
}

Progress restore_weights(const std::string& dir, const TrainerConfig& c, nn::Module& model) {
  TrainingState state;
  const Checkpoint checkpoint = load_matching(dir, c, state);
  model.load_state_dict(checkpoint.model);
  return state.progress;
}

}  // namespace demi::train
