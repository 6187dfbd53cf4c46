// DataLoader: shuffles, gathers, augments (random crop with zero padding, horizontal flip, cutout)
// and normalises batches on a background thread, a bounded queue ahead of the training loop.
// Every random choice derives from (seed, epoch, batch index), never from timing. With a device
// other than the CPU, the dataset is copied there once and each batch is made there by one kernel
// (augment_images) when next() asks for it: the host only draws the batch's random choices.
#pragma once

#include <cstdint>
#include <memory>

#include "datasets/dataset.h"

namespace demi::data {

// Per-channel (R, G, B) statistics of pixel / 255.
struct Normalization {
  float mean[3];
  float std[3];
};
// CIFAR-10 train-set statistics: mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616).
extern const Normalization kCifar10Normalization;

// What a crop sees beyond the image's border: black (torchvision's RandomCrop(padding=4)) or the
// image mirrored at its border, edge pixel not repeated (airbench's reflect-padded translate).
enum class Padding { Zero, Reflect };

struct AugmentOptions {
  int crop_padding = 4;  // random 32x32 crop of the image padded by this many pixels
  bool flip = true;      // horizontal flip with probability 1/2
  int cutout = 0;        // side of a square set to 0 after normalisation (the mean colour); 0 = off
  Padding padding = Padding::Zero;
  // airbench's alternating flip (with flip): epoch 0 flips a fixed random half of the examples,
  // odd epochs flip exactly the other half and even epochs repeat epoch 0, so every two epochs
  // show each image both ways (random flips leave a quarter of them one way only).
  bool alternating_flip = false;
};

struct Batch {
  Tensor images;  // [B, 3, 32, 32] normalised, dtype Options::dtype, on Options::device
  Tensor labels;  // I64 [B]
};

class DataLoader {
 public:
  struct Options {
    int64_t batch_size = 128;
    bool shuffle = true;
    bool augment = false;
    AugmentOptions augmentation;
    bool drop_last = false;  // drop the final short batch
    uint64_t seed = 0;
    // 1: batches are made on a background thread, up to prefetch_batches ahead of next(); 0: each
    // in next(), on the calling thread (PyTorch's num_workers = 0). Off the CPU batches are always
    // made in next(): making one is a kernel launch.
    int num_workers = 1;
    int prefetch_batches = 4;  // queue bound: batches prepared ahead of next()
    Normalization normalization = kCifar10Normalization;
    DType dtype = DType::F32;  // of Batch::images: F32, F16 or BF16
    Device device = Device::cpu();  // where batches are made and returned (labels too)
    MemoryFormat memory_format = MemoryFormat::Contiguous;  // of Batch::images: ChannelsLast stores NHWC
    // Data parallel: each batch of batch_size examples is cut into num_shards parts (sizes differ
    // by at most one) and this loader yields part `shard`; rank r of N passes shard = r and
    // num_shards = N. Every rank uses the same seed, so the parts are disjoint and together are
    // exactly the batch one process would see, augmentation included.
    int num_shards = 1;
    int shard = 0;
  };

  DataLoader(Dataset data, const Options& options);
  ~DataLoader();  // stops and joins the worker, mid-epoch included
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts (or restarts) an epoch: its order and augmentation derive from (seed, epoch), so a run
  // resumed at epoch e sees the same batches as one that never stopped.
  void start_epoch(int64_t epoch);
  // The next batch of the epoch, or false at its end. Rethrows an error raised making a batch (a bad
  // label) after the batches before it.
  bool next(Batch& out);
  int64_t batches_per_epoch() const;
  int64_t size() const;  // examples in the dataset (all shards)
  const Dataset& dataset() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace demi::data
