// Test accuracy of a model: one pass over a loader under the run's autocast, optionally with
// airbench's test-time augmentation, the counts summed over the ranks of a data-parallel run.
#pragma once

#include <cstdint>
#include <vector>

#include "datasets/data_loader.h"
#include "framework/demi/demi.h"
#include "framework/dist/process_group.h"

namespace demi::train {

// Test accuracy without and with test-time augmentation (the same when tta is 0).
struct Accuracy {
  double plain = 0.0;
  double augmented = 0.0;
};

// Accuracy of `model` on `loader` (one pass; with tta > 0 the augmented views are scored beside
// the plain ones: 1 adds the mirror image, 2 also the one-pixel translations). Data parallel: each
// rank scores its shard with rank 0's buffers and the counts are summed over `group`.
// `format`: how the images reach the model (ChannelsLast for a model converted with to(ChannelsLast)).
Accuracy evaluate(nn::Module& model, data::DataLoader& loader, const Device& device, DType dtype,
                  dist::ProcessGroup* group, int tta = 0, MemoryFormat format = MemoryFormat::Contiguous);

// How many of a batch's rows have their largest logit at the label.
int64_t count_correct(const Tensor& logits, const std::vector<int64_t>& labels);

}  // namespace demi::train
