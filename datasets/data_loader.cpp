// DataLoader: one worker thread fills a bounded queue with finished batches, in order. Batch b of
// epoch e is a pure function of (dataset, options, e, b), so timing never changes what is produced.
#include "datasets/data_loader.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "datasets/random.h"

namespace demi::data {

const Normalization kCifar10Normalization = {{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};

namespace {
constexpr int64_t kSide = 32;
constexpr int64_t kPlane = kSide * kSide;
constexpr int64_t kImage = 3 * kPlane;
constexpr uint64_t kOrderTag = 0x0bde4;    // stream of the epoch's permutation
constexpr uint64_t kAugmentTag = 0xa46e;  // stream of the batches' crops, flips and cutouts
constexpr uint64_t kFlipTag = 0xf11b;     // each example's epoch-0 flip under alternating flips

// Source index of padded coordinate i (in [-p, 32 + p)): the image mirrored at its border.
int64_t reflect(int64_t i) { return i < 0 ? -i : (i >= kSide ? 2 * (kSide - 1) - i : i); }
}  // namespace

struct DataLoader::State {
  Dataset data;
  Options options;
  float lut[3][256];  // (pixel / 255 - mean) / std per channel: exact and branch-free

  // The epoch being served; written only while no worker runs.
  std::vector<int64_t> order;
  int64_t epoch = -1;
  int64_t batches = 0;

  std::thread worker;
  std::mutex mutex;
  std::condition_variable changed;  // queue, done or stop changed
  std::deque<Batch> queue;
  std::exception_ptr error;
  bool done = true;   // the worker has produced its last batch (or failed)
  bool stop = false;  // asks the worker to quit

  void stop_worker() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    changed.notify_all();
    if (worker.joinable()) worker.join();
    stop = false;
    queue.clear();
    error = nullptr;
  }

  void run() {
    try {
      for (int64_t b = 0; b < batches; ++b) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (stop) break;
        }
        Batch batch = make_batch(b);
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return stop || static_cast<int64_t>(queue.size()) < options.prefetch_batches; });
        if (stop) break;
        queue.push_back(std::move(batch));
        lock.unlock();
        changed.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    changed.notify_all();
  }

  // Alternating flips: whether `example` is flipped in epoch 0 (a fixed coin per example).
  bool epoch_zero_flip(int64_t example) const {
    return detail::derive_seed(detail::derive_seed(options.seed, kFlipTag), static_cast<uint64_t>(example)) >> 63;
  }

  Batch make_batch(int64_t b) const {
    const int64_t n = data.size();
    const int64_t begin = b * options.batch_size;
    const int64_t count = std::min(options.batch_size, n - begin);
    // This shard's rows [lo, hi) of the batch; every row's random draws are still made, in order,
    // so that a row is augmented the same whichever shard serves it.
    const int64_t lo = count * options.shard / options.num_shards;
    const int64_t hi = count * (options.shard + 1) / options.num_shards;
    const uint8_t* images = data.images.data<uint8_t>();
    const int64_t* labels = data.labels.data<int64_t>();
    const int64_t num_classes = static_cast<int64_t>(data.classes.size());

    Batch out;
    out.labels = empty({hi - lo}, DType::I64);
    int64_t* out_labels = out.labels.data<int64_t>();
    Tensor f32 = empty({hi - lo, 3, kSide, kSide}, DType::F32);
    float* dst = f32.data<float>();
    detail::Rng rng(detail::derive_seed(detail::derive_seed(detail::derive_seed(options.seed, kAugmentTag), epoch), b));
    const AugmentOptions& aug = options.augmentation;
    for (int64_t i = 0; i < count; ++i) {
      // Crop offsets are drawn in the padded image: (dy, dx) in [0, 2p]; source = out + offset - p.
      const int64_t p = options.augment ? aug.crop_padding : 0;
      const int64_t dy = p ? static_cast<int64_t>(rng.below(2 * p + 1)) - p : 0;
      const int64_t dx = p ? static_cast<int64_t>(rng.below(2 * p + 1)) - p : 0;
      const bool random_flip = rng.next() >> 63;
      // Cutout's centre: anywhere in the image, the square clipped at the border (DeVries & Taylor, 2017).
      const bool cut = options.augment && aug.cutout > 0;
      const int64_t cy = cut ? static_cast<int64_t>(rng.below(kSide)) : 0;
      const int64_t cx = cut ? static_cast<int64_t>(rng.below(kSide)) : 0;
      if (i < lo || i >= hi) continue;  // another shard's row

      const int64_t index = order[static_cast<size_t>(begin + i)];
      const bool flip = options.augment && aug.flip &&
                        (aug.alternating_flip ? epoch_zero_flip(index) != (epoch % 2 == 1) : random_flip);
      const int64_t label = labels[index];
      DEMI_CHECK(label >= 0 && (num_classes == 0 || label < num_classes), "DataLoader: example ", index, " has label ",
                 label, ", outside [0, ", num_classes, "); fix the dataset's labels or its class list");
      out_labels[i - lo] = label;
      const uint8_t* src = images + index * kImage;
      float* out_image = dst + (i - lo) * kImage;
      if (!options.augment) {
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t k = 0; k < kPlane; ++k) out_image[c * kPlane + k] = lut[c][src[c * kPlane + k]];
        continue;
      }
      const bool mirror_border = aug.padding == Padding::Reflect;
      for (int64_t c = 0; c < 3; ++c) {
        for (int64_t y = 0; y < kSide; ++y) {
          const int64_t sy = mirror_border ? reflect(y + dy) : y + dy;
          for (int64_t x = 0; x < kSide; ++x) {
            int64_t sx = (flip ? kSide - 1 - x : x) + dx;  // flip after the crop, as torchvision
            if (mirror_border) sx = reflect(sx);
            const bool inside = sy >= 0 && sy < kSide && sx >= 0 && sx < kSide;
            out_image[c * kPlane + y * kSide + x] = lut[c][inside ? src[c * kPlane + sy * kSide + sx] : 0];
          }
        }
      }
      if (cut) {
        const int64_t y0 = std::max<int64_t>(0, cy - aug.cutout / 2), y1 = std::min(kSide, cy - aug.cutout / 2 + aug.cutout);
        const int64_t x0 = std::max<int64_t>(0, cx - aug.cutout / 2), x1 = std::min(kSide, cx - aug.cutout / 2 + aug.cutout);
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t y = y0; y < y1; ++y)
            std::fill(out_image + c * kPlane + y * kSide + x0, out_image + c * kPlane + y * kSide + x1, 0.0f);
      }
    }
    out.images = f32;
    if (options.dtype == DType::F16) {
      out.images = empty(f32.shape(), DType::F16);
      Half* h = out.images.data<Half>();
      for (int64_t k = 0; k < f32.numel(); ++k) h[k] = Half(dst[k]);
    } else if (options.dtype == DType::BF16) {
      out.images = empty(f32.shape(), DType::BF16);
      BFloat16* h = out.images.data<BFloat16>();
      for (int64_t k = 0; k < f32.numel(); ++k) h[k] = BFloat16(dst[k]);
    }
    return out;
  }
};

DataLoader::DataLoader(Dataset data, const Options& options) : state_(std::make_unique<State>()) {
  const Options& o = options;
  DEMI_CHECK(data.labels.defined() && data.labels.dim() == 1 && data.labels.dtype() == DType::I64,
             "DataLoader: labels must be int64 [N], got ",
             data.labels.defined() ? data.labels.shape() : Shape{}, data.labels.defined() ? "" : " (undefined)");
  const int64_t n = data.size();
  DEMI_CHECK(data.images.defined() && data.images.dtype() == DType::U8 &&
                 data.images.shape() == (Shape{n, 3, kSide, kSide}) && data.images.device() == Device::cpu(),
             "DataLoader: images must be uint8 [", n, ", 3, 32, 32] on the CPU (N = labels.size(0)); got ",
             data.images.defined() ? data.images.shape() : Shape{});
  DEMI_CHECK(o.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", o.batch_size);
  DEMI_CHECK(o.num_shards >= 1 && o.shard >= 0 && o.shard < o.num_shards, "DataLoader: shard ", o.shard,
             " of num_shards ", o.num_shards, " is not a shard; need 0 <= shard < num_shards");
  DEMI_CHECK(o.num_shards <= o.batch_size, "DataLoader: batch_size ", o.batch_size, " cannot be cut into ",
             o.num_shards, " shards; use a batch of at least one example per rank");
  DEMI_CHECK(o.prefetch_batches >= 1, "DataLoader: prefetch_batches must be >= 1, got ", o.prefetch_batches);
  DEMI_CHECK(o.augmentation.crop_padding >= 0 && o.augmentation.crop_padding <= kSide,
             "DataLoader: augmentation.crop_padding must be in [0, 32], got ", o.augmentation.crop_padding);
  DEMI_CHECK(o.augmentation.padding == Padding::Zero || o.augmentation.crop_padding < kSide,
             "DataLoader: reflect padding mirrors at most 31 pixels, got crop_padding ", o.augmentation.crop_padding);
  DEMI_CHECK(o.augmentation.cutout >= 0 && o.augmentation.cutout <= kSide,
             "DataLoader: augmentation.cutout must be in [0, 32] (0 = off), got ", o.augmentation.cutout);
  DEMI_CHECK(o.dtype == DType::F32 || o.dtype == DType::F16 || o.dtype == DType::BF16,
             "DataLoader: dtype must be float32, float16 or bfloat16, got ", o.dtype);
  for (int c = 0; c < 3; ++c) {
    DEMI_CHECK(o.normalization.std[c] > 0.0f, "DataLoader: normalization.std[", c, "] must be > 0, got ",
               o.normalization.std[c]);
    for (int v = 0; v < 256; ++v)
      state_->lut[c][v] = (static_cast<float>(v) / 255.0f - o.normalization.mean[c]) / o.normalization.std[c];
  }
  state_->data = std::move(data);
  state_->options = options;
  state_->batches = batches_per_epoch();
}

DataLoader::~DataLoader() {
  if (state_) state_->stop_worker();
}

void DataLoader::start_epoch(int64_t epoch) {
  DEMI_CHECK(epoch >= 0, "DataLoader::start_epoch: epoch must be >= 0, got ", epoch);
  State& s = *state_;
  s.stop_worker();
  s.epoch = epoch;
  s.order.resize(static_cast<size_t>(size()));
  std::iota(s.order.begin(), s.order.end(), int64_t{0});
  if (s.options.shuffle) {
    detail::Rng rng(detail::derive_seed(detail::derive_seed(s.options.seed, kOrderTag), static_cast<uint64_t>(epoch)));
    detail::shuffle(s.order, rng);
  }
  s.done = false;
  s.worker = std::thread([&s] { s.run(); });
}

bool DataLoader::next(Batch& out) {
  State& s = *state_;
  DEMI_CHECK(s.epoch >= 0, "DataLoader::next: no epoch started; call start_epoch(epoch) first");
  std::unique_lock<std::mutex> lock(s.mutex);
  s.changed.wait(lock, [&] { return !s.queue.empty() || s.done; });
  if (!s.queue.empty()) {
    out = std::move(s.queue.front());
    s.queue.pop_front();
    lock.unlock();
    s.changed.notify_all();
    return true;
  }
  if (s.error) {
    std::exception_ptr error = s.error;
    s.error = nullptr;  // reported once; the epoch is over
    std::rethrow_exception(error);
  }
  return false;
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = size(), b = state_->options.batch_size;
  return state_->options.drop_last ? n / b : (n + b - 1) / b;
}

int64_t DataLoader::size() const { return state_->data.size(); }

const Dataset& DataLoader::dataset() const { return state_->data; }

}  // namespace demi::data
