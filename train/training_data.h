// The run's data: CIFAR-10's train and test splits (or fixed class-balanced subsets of them) and
// their loaders, each rank reading its shard of every batch.
#pragma once

#include <memory>

#include "datasets/data_loader.h"
#include "train/config.h"
#include "train/environment.h"

namespace demi::train {

struct TrainingData {
  data::Dataset train_set;  // kept: airbench's whitening stem is fitted to it
  std::unique_ptr<data::DataLoader> train;  // shuffled, augmented as the recipe says, full batches only
  std::unique_ptr<data::DataLoader> test;   // in order, batches of 500
  double load_seconds = 0.0;                // load_training_data: reading, decoding, subsetting
};

// The subsets --train-subset and --test-subset ask for (class-balanced, seeded by --seed) and
// the loaders over them (shuffled by --seed), from datasets already in memory.
TrainingData make_training_data(const TrainerConfig& c, const Environment& env, data::Dataset train_set,
                                data::Dataset test_set);

// CIFAR-10 from --data-dir, through make_training_data.
TrainingData load_training_data(const TrainerConfig& c, const Environment& env);

}  // namespace demi::train
