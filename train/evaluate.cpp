// Evaluation: plain and test-time-augmented accuracy, sharded over the ranks of a run.
#include "train/evaluate.h"

#include <algorithm>
#include <optional>

#include "datasets/transforms.h"
#include "framework/dist/distributed_data_parallel.h"

namespace demi::train {
namespace {

// Logits of a test batch averaged over test-time augmentations as airbench does, given the
// plain logits of the batch: level 1 adds the mirror image; level 2 also the images moved one
// pixel down-right and up-left (reflected borders), each with its mirror: 0.5 * mirrored pair +
// 0.25 * each translated pair.
Tensor tta_logits(nn::Module& model, const Tensor& images, const Tensor& plain, const Device& device, int tta,
                  MemoryFormat format) {
  auto logits = [&](const Tensor& x) { return model(x.to(device).contiguous(format)).to(DType::F32); };
  auto with_mirror = [&](const Tensor& x) { return (logits(x) + logits(data::mirror(x))) * 0.5; };
  const Tensor mirrored_pair = (plain + logits(data::mirror(images))) * 0.5;
  if (tta == 1) return mirrored_pair;
  return mirrored_pair * 0.5 +
         (with_mirror(data::translate(images, 1, 1)) + with_mirror(data::translate(images, -1, -1))) * 0.25;
}

}  // namespace

int64_t count_correct(const Tensor& logits, const std::vector<int64_t>& labels) {
  const std::vector<float> l = logits.to_vector<float>();
  const int64_t k = logits.size(1);
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const float* row = l.data() + i * static_cast<size_t>(k);
    correct += (std::max_element(row, row + k) - row) == labels[i];
  }
  return correct;
}

Accuracy evaluate(nn::Module& model, data::DataLoader& loader, const Device& device, DType dtype,
                  dist::ProcessGroup* group, int tta, MemoryFormat format) {
  NoGradGuard no_grad;
  // Every rank evaluates rank 0's running statistics: the model the checkpoint holds.
  if (group) dist::broadcast_buffers(*group, model);
  model.eval();
  std::optional<amp::AutocastGuard> autocast;
  if (dtype != DType::F32) autocast.emplace(device.kind(), dtype);
  loader.start_epoch(0);
  data::Batch batch;
  int64_t correct = 0, correct_augmented = 0, total = 0;
  while (loader.next(batch)) {
    const Tensor plain = model(batch.images.to(device).contiguous(format)).to(DType::F32);
    const std::vector<int64_t> y = batch.labels.to_vector<int64_t>();
    const int64_t right = count_correct(plain, y);
    correct += right;
    correct_augmented += tta > 0 ? count_correct(tta_logits(model, batch.images, plain, device, tta, format), y) : right;
    total += static_cast<int64_t>(y.size());
  }
  model.train();
  if (group) {
    const Tensor counts = tensor(std::vector<int64_t>{correct, correct_augmented, total}, {3});
    group->all_reduce(counts);
    const std::vector<int64_t> summed = counts.to_vector<int64_t>();
    correct = summed[0], correct_augmented = summed[1], total = summed[2];
  }
  const double n = static_cast<double>(std::max<int64_t>(total, 1));
  return {static_cast<double>(correct) / n, static_cast<double>(correct_augmented) / n};
}

}  // namespace demi::train
