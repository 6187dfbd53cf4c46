// Dataset helpers: split names and balanced_subset.
#include "datasets/dataset.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "datasets/random.h"

namespace demi::data {

const char* split_name(Split split) { return split == Split::Train ? "train" : "test"; }

Dataset balanced_subset(const Dataset& d, int64_t n, uint64_t seed) {
  DEMI_CHECK(n >= 0, "balanced_subset: n must be >= 0, got ", n);
  const int64_t size = d.size();
  if (n >= size) return d;
  DEMI_CHECK(d.images.defined() && d.images.dim() == 4 && d.images.size(0) == size && d.images.dtype() == DType::U8,
             "balanced_subset: images must be uint8 [N, C, H, W] with N = labels.size(0) = ", size);
  const int64_t* labels = d.labels.data<int64_t>();
  int64_t num_classes = static_cast<int64_t>(d.classes.size());
  if (num_classes == 0) num_classes = *std::max_element(labels, labels + size) + 1;
  std::vector<int64_t> available(static_cast<size_t>(num_classes), 0);
  for (int64_t i = 0; i < size; ++i) {
    DEMI_CHECK(labels[i] >= 0 && labels[i] < num_classes, "balanced_subset: label ", labels[i], " of example ", i,
               " is outside [0, ", num_classes, ")");
    ++available[static_cast<size_t>(labels[i])];
  }
  std::vector<int64_t> quota(static_cast<size_t>(num_classes), n / num_classes);
  for (int64_t c = 0; c < n % num_classes; ++c) ++quota[static_cast<size_t>(c)];
  for (int64_t c = 0; c < num_classes; ++c) {
    DEMI_CHECK(available[static_cast<size_t>(c)] >= quota[static_cast<size_t>(c)], "balanced_subset: class ", c,
               d.classes.empty() ? "" : " (" + d.classes[static_cast<size_t>(c)] + ")", " has ",
               available[static_cast<size_t>(c)], " examples, fewer than the ", quota[static_cast<size_t>(c)],
               " a balanced subset of ", n, " needs; ask for a smaller n");
  }

  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  detail::Rng rng(detail::derive_seed(seed, 0x5ab5e7));
  detail::shuffle(order, rng);
  std::vector<int64_t> chosen;
  chosen.reserve(static_cast<size_t>(n));
  for (const int64_t i : order) {
    int64_t& left = quota[static_cast<size_t>(labels[i])];
    if (left > 0) {
      --left;
      chosen.push_back(i);
    }
  }
  std::sort(chosen.begin(), chosen.end());

  const Shape& shape = d.images.shape();
  const size_t example_bytes = static_cast<size_t>(d.images.numel() / size);
  Dataset out;
  out.images = empty({n, shape[1], shape[2], shape[3]}, DType::U8);
  out.labels = empty({n}, DType::I64);
  out.classes = d.classes;
  const uint8_t* src = d.images.data<uint8_t>();
  uint8_t* dst = out.images.data<uint8_t>();
  int64_t* dst_labels = out.labels.data<int64_t>();
  for (size_t k = 0; k < chosen.size(); ++k) {
    std::memcpy(dst + k * example_bytes, src + static_cast<size_t>(chosen[k]) * example_bytes, example_bytes);
    dst_labels[k] = labels[chosen[k]];
  }
  return out;
}

}  // namespace demi::data
