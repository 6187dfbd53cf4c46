// demi::data::Dataset: a whole split held in memory as uint8 images and int64 labels (CIFAR-10 is
// 150 MB), and balanced_subset for the quick runs and tests that train on a fixed slice of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/demi/demi.h"

namespace demi::data {

enum class Split { Train, Test };
// "train" or "test": the folder name and the word used in messages.
const char* split_name(Split split);

struct Dataset {
  Tensor images;                     // U8 [N, 3, 32, 32], CHW, pixel values 0..255
  Tensor labels;                     // I64 [N], indices into classes
  std::vector<std::string> classes;  // class names, index = label

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// A fixed, class-balanced subset of n examples: n / classes per class (the first n % classes
// classes take one more), chosen as the first of each class in a shuffle seeded by `seed`, and
// returned in their original order. n >= size returns the dataset unchanged.
Dataset balanced_subset(const Dataset& d, int64_t n, uint64_t seed);

}  // namespace demi::data
