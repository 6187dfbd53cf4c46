// DataLoader: every example once per epoch, order and augmentation fixed by (seed, epoch), exact
// normalisation, crop/flip/cutout geometry, batches in order from the background thread, worker
// errors surfacing in next(), and clean shutdown mid-epoch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "datasets/data_loader.h"
#include "support/error_of.h"

namespace demi::data {
namespace {

using testing::HasSubstr;

// n examples, label = index (no class list, so any label >= 0 is valid); random pixels in
// [1, 255], never 0, so that zero padding is recognisable.
Dataset indexed(int64_t n, uint64_t seed = 3) {
  Dataset d;
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::iota(labels.begin(), labels.end(), int64_t{0});
  d.labels = tensor(labels, {n});
  d.images = empty({n, 3, 32, 32}, DType::U8);
  uint8_t* p = d.images.data<uint8_t>();
  uint64_t s = seed;
  for (int64_t i = 0; i < d.images.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<uint8_t>(1 + (s >> 33) % 255);
  }
  return d;
}

float normalised(uint8_t v, int c, const Normalization& norm = kCifar10Normalization) {
  return (static_cast<float>(v) / 255.0f - norm.mean[c]) / norm.std[c];
}

struct Epoch {
  std::vector<std::vector<int64_t>> labels;
  std::vector<std::vector<float>> images;
};

Epoch run_epoch(DataLoader& loader, int64_t epoch) {
  Epoch out;
  loader.start_epoch(epoch);
  Batch b;
  while (loader.next(b)) {
    out.labels.push_back(b.labels.to_vector<int64_t>());
    out.images.push_back(b.images.to_vector<float>());
  }
  return out;
}

std::vector<int64_t> flat(const Epoch& e) {
  std::vector<int64_t> all;
  for (const auto& l : e.labels) all.insert(all.end(), l.begin(), l.end());
  return all;
}

// The first batch of epoch 0.
Batch first_batch(const Dataset& d, const DataLoader::Options& o) {
  DataLoader loader(d, o);
  loader.start_epoch(0);
  Batch b;
  EXPECT_TRUE(loader.next(b));
  return b;
}

TEST(DataLoader, EveryExampleOncePerEpoch) {
  DataLoader::Options o;
  o.batch_size = 64;
  o.augment = true;
  DataLoader loader(indexed(1000), o);
  EXPECT_EQ(loader.size(), 1000);
  EXPECT_EQ(loader.batches_per_epoch(), 16);
  for (int64_t epoch : {0, 1}) {
    const Epoch e = run_epoch(loader, epoch);
    ASSERT_EQ(e.labels.size(), 16u);
    EXPECT_EQ(e.labels.back().size(), 1000u - 15 * 64) << "the short last batch is kept";
    std::vector<int64_t> all = flat(e);
    EXPECT_NE(all, [] { std::vector<int64_t> v(1000); std::iota(v.begin(), v.end(), 0); return v; }()) << "shuffled";
    std::sort(all.begin(), all.end());
    for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(all[static_cast<size_t>(i)], i) << "epoch " << epoch;
  }
}

TEST(DataLoader, SameSeedAndEpochGiveIdenticalBatches) {
  DataLoader::Options o;
  o.batch_size = 50;
  o.augment = true;
  o.augmentation.cutout = 8;
  o.seed = 42;
  DataLoader a(indexed(300), o), b(indexed(300), o);
  const Epoch a2 = run_epoch(a, 2);
  run_epoch(b, 0);  // b reaches epoch 2 by another path: resuming must not matter
  const Epoch b2 = run_epoch(b, 2);
  EXPECT_EQ(a2.labels, b2.labels);
  EXPECT_EQ(a2.images, b2.images);

  const Epoch a3 = run_epoch(a, 3);
  EXPECT_NE(flat(a2), flat(a3)) << "a different epoch gives a different order";
  o.seed = 43;
  DataLoader c(indexed(300), o);
  EXPECT_NE(flat(run_epoch(c, 2)), flat(a2)) << "a different seed gives a different order";
}

// Data parallel: the shards of a batch, concatenated in rank order, are exactly the unsharded
// batch, augmentation and cutout included; they are disjoint and cover the epoch.
TEST(DataLoader, ShardsOfEveryBatchConcatenateToTheUnshardedBatch) {
  DataLoader::Options o;
  o.batch_size = 50;
  o.augment = true;
  o.augmentation.cutout = 8;
  o.seed = 7;
  for (int shards : {2, 3}) {
    DataLoader whole(indexed(230), o);  // the last batch (30 examples) is short
    const Epoch all = run_epoch(whole, 1);
    std::vector<Epoch> parts;
    for (int r = 0; r < shards; ++r) {
      DataLoader::Options so = o;
      so.num_shards = shards;
      so.shard = r;
      DataLoader loader(indexed(230), so);
      EXPECT_EQ(loader.batches_per_epoch(), whole.batches_per_epoch());
      parts.push_back(run_epoch(loader, 1));
    }
    for (size_t b = 0; b < all.labels.size(); ++b) {
      std::vector<int64_t> labels;
      std::vector<float> images;
      for (const Epoch& part : parts) {
        EXPECT_LE(std::abs(static_cast<long>(part.labels[b].size()) - static_cast<long>(all.labels[b].size() / shards)), 1);
        labels.insert(labels.end(), part.labels[b].begin(), part.labels[b].end());
        images.insert(images.end(), part.images[b].begin(), part.images[b].end());
      }
      EXPECT_EQ(labels, all.labels[b]) << shards << " shards, batch " << b;
      EXPECT_EQ(images, all.images[b]) << shards << " shards, batch " << b;
    }
  }
  o.num_shards = 2;
  o.shard = 2;
  EXPECT_THAT(test::error_of([&] { DataLoader(indexed(10), o); }), HasSubstr("shard 2 of num_shards 2 is not a shard"));
}

TEST(DataLoader, NormalisesExactlyWithoutAugmentation) {
  const Dataset d = indexed(10);
  DataLoader::Options o;
  o.batch_size = 4;
  o.shuffle = false;
  const Batch b = first_batch(d, o);
  EXPECT_EQ(b.images.shape(), (Shape{4, 3, 32, 32}));
  EXPECT_EQ(b.images.dtype(), DType::F32);
  EXPECT_EQ(b.labels.shape(), (Shape{4}));
  const std::vector<float> x = b.images.to_vector<float>();
  const uint8_t* src = d.images.data<uint8_t>();
  for (size_t k = 0; k < x.size(); ++k) ASSERT_FLOAT_EQ(x[k], normalised(src[k], static_cast<int>((k / 1024) % 3))) << k;
  // A known pixel: 255 in the red channel is (1 - 0.4914) / 0.2470.
  Dataset white = indexed(1);
  std::memset(white.images.data<uint8_t>(), 255, 3072);
  const std::vector<float> w = first_batch(white, o).images.to_vector<float>();
  EXPECT_NEAR(w[0], (1.0f - 0.4914f) / 0.2470f, 1e-6f);
  EXPECT_NEAR(w[2048], (1.0f - 0.4465f) / 0.2616f, 1e-6f);
}

// The (dy, dx, flip) that maps `src` onto `out` (one image), or nothing. `reflect`: the padding
// mirrors the image at its border instead of being black.
bool find_crop(const uint8_t* src, const float* out, int pad, bool* flipped, bool reflect = false) {
  const auto mirrored = [reflect](int i) { return !reflect ? i : (i < 0 ? -i : (i > 31 ? 62 - i : i)); };
  for (int flip = 0; flip < 2; ++flip)
    for (int dy = -pad; dy <= pad; ++dy)
      for (int dx = -pad; dx <= pad; ++dx) {
        bool match = true;
        for (int c = 0; c < 3 && match; ++c)
          for (int y = 0; y < 32 && match; ++y)
            for (int x = 0; x < 32 && match; ++x) {
              const int sy = mirrored(y + dy), sx = mirrored((flip ? 31 - x : x) + dx);
              const uint8_t v = sy >= 0 && sy < 32 && sx >= 0 && sx < 32 ? src[c * 1024 + sy * 32 + sx] : 0;
              match = out[c * 1024 + y * 32 + x] == normalised(v, c);
            }
        if (match) {
          *flipped = flip;
          return true;
        }
      }
  return false;
}

TEST(DataLoader, AugmentationIsACropOfThePaddedImageMaybeFlipped) {
  const Dataset d = indexed(64);
  DataLoader::Options o;
  o.batch_size = 64;
  o.augment = true;
  const Batch b = first_batch(d, o);
  EXPECT_EQ(b.images.shape(), (Shape{64, 3, 32, 32}));
  const std::vector<float> x = b.images.to_vector<float>();
  const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
  int flips = 0, padded = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    bool flipped = false;
    const float* out = x.data() + i * 3072;
    ASSERT_TRUE(find_crop(d.images.data<uint8_t>() + labels[i] * 3072, out, 4, &flipped)) << "image " << i;
    flips += flipped;
    padded += std::count(out, out + 1024, normalised(0, 0)) > 0;
  }
  EXPECT_GT(flips, 10);
  EXPECT_LT(flips, 54);
  EXPECT_GT(padded, 32) << "most crops reach into the zero padding";
}

TEST(DataLoader, ReflectPaddingMirrorsTheBorderInsteadOfBlack) {
  const Dataset d = indexed(64);
  DataLoader::Options o;
  o.batch_size = 64;
  o.augment = true;
  o.augmentation.crop_padding = 2;
  o.augmentation.padding = Padding::Reflect;
  const Batch b = first_batch(d, o);
  const std::vector<float> x = b.images.to_vector<float>();
  const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
  int shifted = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    bool flipped = false;
    const float* out = x.data() + i * 3072;
    const uint8_t* src = d.images.data<uint8_t>() + labels[i] * 3072;
    ASSERT_TRUE(find_crop(src, out, 2, &flipped, /*reflect=*/true)) << "image " << i;
    EXPECT_EQ(std::count(out, out + 1024, normalised(0, 0)), 0) << "no black padding";
    bool unshifted = false;
    shifted += !find_crop(src, out, 0, &unshifted, true);
  }
  EXPECT_GT(shifted, 40) << "most crops move the image (24 of 25 offsets do)";
}

TEST(DataLoader, AlternatingFlipShowsEachImageBothWaysEveryTwoEpochs) {
  const Dataset d = indexed(64);
  DataLoader::Options o;
  o.batch_size = 16;
  o.augment = true;
  o.augmentation.crop_padding = 0;
  o.augmentation.alternating_flip = true;
  DataLoader loader(d, o);
  // flipped[e][label]
  std::vector<std::vector<int>> flipped(4, std::vector<int>(64, -1));
  for (int e = 0; e < 4; ++e) {
    const Epoch epoch = run_epoch(loader, e);
    for (size_t b = 0; b < epoch.labels.size(); ++b)
      for (size_t i = 0; i < epoch.labels[b].size(); ++i) {
        bool f = false;
        const int64_t label = epoch.labels[b][i];
        ASSERT_TRUE(find_crop(d.images.data<uint8_t>() + label * 3072, epoch.images[b].data() + i * 3072, 0, &f));
        flipped[e][static_cast<size_t>(label)] = f;
      }
  }
  const int first = static_cast<int>(std::count(flipped[0].begin(), flipped[0].end(), 1));
  EXPECT_GT(first, 16);
  EXPECT_LT(first, 48);
  for (size_t k = 0; k < 64; ++k) {
    EXPECT_NE(flipped[1][k], flipped[0][k]) << "odd epochs flip exactly the others, example " << k;
    EXPECT_EQ(flipped[2][k], flipped[0][k]) << "even epochs repeat epoch 0, example " << k;
    EXPECT_EQ(flipped[3][k], flipped[1][k]) << k;
  }
}

TEST(DataLoader, CutoutZeroesOneSquare) {
  DataLoader::Options o;
  o.batch_size = 32;
  o.augment = true;
  o.augmentation = {0, false, 8};  // no crop, no flip: only cutout
  const Dataset d = indexed(32);
  const Batch b = first_batch(d, o);
  const std::vector<float> x = b.images.to_vector<float>();
  const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
  int full_squares = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const uint8_t* src = d.images.data<uint8_t>() + labels[i] * 3072;
    int y0 = 32, y1 = -1, x0 = 32, x1 = -1, zeros = 0;
    for (int y = 0; y < 32; ++y)
      for (int xx = 0; xx < 32; ++xx) {
        const float v = x[i * 3072 + static_cast<size_t>(y * 32 + xx)];
        if (v == 0.0f) {
          ++zeros;
          y0 = std::min(y0, y), y1 = std::max(y1, y), x0 = std::min(x0, xx), x1 = std::max(x1, xx);
        } else {
          ASSERT_EQ(v, normalised(src[y * 32 + xx], 0));
        }
      }
    ASSERT_GT(zeros, 0) << "image " << i;
    EXPECT_EQ(zeros, (y1 - y0 + 1) * (x1 - x0 + 1)) << "a rectangle (clipped square)";
    EXPECT_LE(y1 - y0 + 1, 8);
    EXPECT_LE(x1 - x0 + 1, 8);
    full_squares += zeros == 64;
  }
  EXPECT_GT(full_squares, 0);
}

TEST(DataLoader, HalfOutputsAreTheRoundedFloatOnes) {
  DataLoader::Options o;
  o.batch_size = 16;
  o.augment = true;
  DataLoader f32(indexed(16), o);
  o.dtype = DType::BF16;
  DataLoader bf16(indexed(16), o);
  o.dtype = DType::F16;
  DataLoader f16(indexed(16), o);
  Batch a, b, c;
  f32.start_epoch(1), bf16.start_epoch(1), f16.start_epoch(1);
  ASSERT_TRUE(f32.next(a) && bf16.next(b) && f16.next(c));
  EXPECT_EQ(b.images.dtype(), DType::BF16);
  EXPECT_EQ(c.images.dtype(), DType::F16);
  EXPECT_EQ(a.images.to(DType::BF16).to_vector<float>(), b.images.to_vector<float>());
  EXPECT_EQ(a.images.to(DType::F16).to_vector<float>(), c.images.to_vector<float>());
}

TEST(DataLoader, ChannelsLastBatchesHoldTheContiguousValues) {
  DataLoader::Options o;
  o.batch_size = 16;
  o.augment = true;
  o.augmentation.cutout = 8;
  o.dtype = DType::BF16;
  DataLoader nchw(indexed(16), o);
  o.memory_format = MemoryFormat::ChannelsLast;
  DataLoader nhwc(indexed(16), o);
  Batch a, b;
  nchw.start_epoch(2), nhwc.start_epoch(2);
  ASSERT_TRUE(nchw.next(a) && nhwc.next(b));
  EXPECT_TRUE(b.images.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(b.images.is_contiguous());
  EXPECT_EQ(b.images.shape(), a.images.shape());
  EXPECT_EQ(b.images.to_vector<float>(), a.images.to_vector<float>());  // read in shape order
  EXPECT_EQ(b.labels.to_vector<int64_t>(), a.labels.to_vector<int64_t>());
}

TEST(DataLoader, BackgroundThreadKeepsOrder) {
  const Dataset d = indexed(100);
  DataLoader::Options o;
  o.batch_size = 7;
  o.shuffle = false;
  o.prefetch_batches = 2;
  DataLoader loader(d, o);
  loader.start_epoch(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the queue fill up
  Batch b;
  int64_t next_label = 0, batches = 0;
  while (loader.next(b)) {
    ++batches;
    for (const int64_t l : b.labels.to_vector<int64_t>()) EXPECT_EQ(l, next_label++);
    const int64_t first = b.labels.to_vector<int64_t>()[0];
    EXPECT_EQ(b.images.to_vector<float>()[5], normalised(d.images.data<uint8_t>()[first * 3072 + 5], 0));
  }
  EXPECT_EQ(batches, 15);
  EXPECT_EQ(next_label, 100);
  EXPECT_FALSE(loader.next(b)) << "stays at the end until the next start_epoch";
}

TEST(DataLoader, DropLast) {
  DataLoader::Options o;
  o.batch_size = 32;
  o.drop_last = true;
  DataLoader loader(indexed(100), o);
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  const Epoch e = run_epoch(loader, 0);
  ASSERT_EQ(e.labels.size(), 3u);
  for (const auto& l : e.labels) EXPECT_EQ(l.size(), 32u);
  o.drop_last = false;
  EXPECT_EQ(DataLoader(indexed(100), o).batches_per_epoch(), 4);
  o.drop_last = true;
  o.batch_size = 128;
  DataLoader none(indexed(100), o);
  EXPECT_EQ(none.batches_per_epoch(), 0);
  EXPECT_TRUE(run_epoch(none, 0).labels.empty());
}

TEST(DataLoader, WorkerErrorsSurfaceInNextAfterTheGoodBatches) {
  Dataset d = indexed(500);
  d.classes = std::vector<std::string>(500, "x");
  d.classes.resize(400);  // labels 400..499 are out of range; 300 is the first in unshuffled order
  d.labels.data<int64_t>()[300] = 1000;
  for (int workers : {1, 0}) {
    DataLoader::Options o;
    o.batch_size = 100;
    o.shuffle = false;
    o.num_workers = workers;
    DataLoader loader(d, o);
    loader.start_epoch(0);
    Batch b;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader.next(b)) << "batch " << i << ", num_workers " << workers;
    try {
      loader.next(b);
      ADD_FAILURE() << "expected the error, num_workers " << workers;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("example 300 has label 1000"));
    }
    EXPECT_FALSE(loader.next(b));
  }
}

// num_workers 0 plans the epoch at start_epoch and renders slices of it (the path every device
// other than the CPU takes): the same batches as the worker's, shards and the short batch included.
TEST(DataLoader, WithoutAWorkerTheBatchesAreTheWorkersOnes) {
  const Dataset d = indexed(103);
  for (int shards : {1, 3}) {
    DataLoader::Options o;
    o.batch_size = 20;
    o.augment = true;
    o.augmentation.cutout = 6;
    o.num_shards = shards;
    o.shard = shards - 1;
    DataLoader threaded(d, o);
    o.num_workers = 0;
    DataLoader inline_loader(d, o);
    for (int64_t epoch : {0, 3}) {
      const Epoch a = run_epoch(threaded, epoch), b = run_epoch(inline_loader, epoch);
      EXPECT_EQ(a.labels.size(), 6u);
      EXPECT_EQ(a.labels, b.labels) << "epoch " << epoch << ", " << shards << " shards";
      EXPECT_EQ(a.images, b.images) << "epoch " << epoch << ", " << shards << " shards";
    }
  }
}

TEST(DataLoader, StopsCleanlyMidEpoch) {
  DataLoader::Options o;
  o.batch_size = 10;
  o.prefetch_batches = 1;
  for (int k = 0; k < 20; ++k) {
    DataLoader loader(indexed(200), o);
    loader.start_epoch(0);
    Batch b;
    ASSERT_TRUE(loader.next(b));
    if (k % 2) loader.start_epoch(1);  // restart while the worker waits on a full queue
  }  // destroyed with the worker blocked: must join, not hang
  DataLoader never_started(indexed(10), o);
}

TEST(DataLoader, MisuseIsAnError) {
  DataLoader::Options o;
  DataLoader loader(indexed(10), o);
  Batch b;
  EXPECT_THAT([&] { try { loader.next(b); } catch (const Error& e) { return std::string(e.what()); } return std::string(); }(),
              HasSubstr("call start_epoch"));
  o.batch_size = 0;
  EXPECT_THROW(DataLoader(indexed(10), o), Error);
  o.batch_size = 8;
  o.dtype = DType::I64;
  EXPECT_THROW(DataLoader(indexed(10), o), Error);
  o.dtype = DType::F32;
  o.memory_format = MemoryFormat::Preserve;
  EXPECT_THAT(test::error_of([&] { DataLoader(indexed(10), o); }), HasSubstr("memory_format"));
  o.memory_format = MemoryFormat::Contiguous;
  o.num_workers = 4;
  EXPECT_THAT(test::error_of([&] { DataLoader(indexed(10), o); }), HasSubstr("num_workers must be 0"));
  Dataset wrong = indexed(10);
  wrong.images = zeros({10, 3, 28, 28}, DType::U8);
  try {
    DataLoader bad(wrong, DataLoader::Options{});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[10, 3, 28, 28]"));
  }
}

}  // namespace
}  // namespace demi::data
