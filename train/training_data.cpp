// CIFAR-10 for a run: both splits, the subsets --train-subset and --test-subset ask for, loaders
// that make the batches on the run's device in its input memory format.
#include "train/training_data.h"

#include <chrono>
#include <utility>

#include "datasets/cifar10.h"
#include "train/recipe.h"

namespace demi::train {

TrainingData make_training_data(const TrainerConfig& c, const Environment& env, data::Dataset train_set,
                                data::Dataset test_set) {
  TrainingData d;
  d.train_set = c.train_subset > 0 ? data::balanced_subset(train_set, c.train_subset, c.seed) : std::move(train_set);
  if (c.test_subset > 0) test_set = data::balanced_subset(test_set, c.test_subset, c.seed + 1);
  data::DataLoader::Options train;
  train.batch_size = c.batch_size;
  train.shuffle = true;
  train.augment = true;
  train.augmentation = train_augmentation(c);
  train.drop_last = true;
  train.seed = c.seed;
  train.num_shards = env.world;
  train.shard = env.rank;
  train.device = env.device;  // the images uploaded once, each batch made there
  train.memory_format = input_format(c);
  d.train = std::make_unique<data::DataLoader>(d.train_set, train);
  data::DataLoader::Options test;
  test.batch_size = 500;
  test.shuffle = false;
  test.num_shards = env.world;
  test.shard = env.rank;
  test.device = env.device;
  test.memory_format = input_format(c);
  d.test = std::make_unique<data::DataLoader>(std::move(test_set), test);
  return d;
}

TrainingData load_training_data(const TrainerConfig& c, const Environment& env) {
  const auto start = std::chrono::steady_clock::now();
  data::Dataset train_set = data::load_cifar10(c.data_dir, data::Split::Train);
  data::Dataset test_set = data::load_cifar10(c.data_dir, data::Split::Test);
  TrainingData d = make_training_data(c, env, std::move(train_set), std::move(test_set));
  d.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return d;
}

}  // namespace demi::train
