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

#include "backends/kernels.h"
#include "datasets/random.h"

namespace demi::data {

const Normalization kCifar10Normalization = {{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};

namespace {
constexpr int64_t kSide = 32;
constexpr uint64_t kOrderTag = 0x0bde4;    // stream of the epoch's permutation
constexpr uint64_t kAugmentTag = 0xa46e;  // stream of the batches' crops, flips and cutouts
constexpr uint64_t kFlipTag = 0xf11b;     // each example's epoch-0 flip under alternating flips
}  // namespace

struct DataLoader::State {
  Dataset data;
  Options options;
  Tensor images;  // the dataset's images on the loader's device (data.images itself on the CPU)
  Tensor lut;     // F32 [3, 256] on that device: (pixel / 255 - mean) / std per channel

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

  // Without a worker (off the CPU, or num_workers 0) start_epoch draws the whole epoch's plan and
  // labels and uploads them once, so that making a batch copies nothing from the host (a copy would
  // wait for the device to finish the previous step). Batch b's rows are [batch_rows[b],
  // batch_rows[b + 1]).
  Tensor epoch_plan, epoch_labels;  // I64 [rows, 6] and [rows], on the device
  std::vector<int64_t> batch_rows;
  int64_t next_batch = 0;  // the batch next() makes next

  bool threaded() const { return images.device().is_cpu() && options.num_workers > 0; }

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

  // Batch b's rows of this shard as augment_images' plan (source, dy, dx, flip, cutout centre) and
  // their labels. Every row's random draws are made, in order, so that a row is augmented the same
  // whichever shard serves it.
  void plan_batch(int64_t b, std::vector<int64_t>& plan, std::vector<int64_t>& row_labels) const {
    const int64_t n = data.size();
    const int64_t begin = b * options.batch_size;
    const int64_t count = std::min(options.batch_size, n - begin);
    const int64_t lo = count * options.shard / options.num_shards;
    const int64_t hi = count * (options.shard + 1) / options.num_shards;
    const int64_t* labels = data.labels.data<int64_t>();
    const int64_t num_classes = static_cast<int64_t>(data.classes.size());
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
      const int64_t cy = cut ? static_cast<int64_t>(rng.below(kSide)) : -1;
      const int64_t cx = cut ? static_cast<int64_t>(rng.below(kSide)) : -1;
      if (i < lo || i >= hi) continue;  // another shard's row

      const int64_t index = order[static_cast<size_t>(begin + i)];
      const bool flip = options.augment && aug.flip &&
                        (aug.alternating_flip ? epoch_zero_flip(index) != (epoch % 2 == 1) : random_flip);
      const int64_t label = labels[index];
      DEMI_CHECK(label >= 0 && (num_classes == 0 || label < num_classes), "DataLoader: example ", index, " has label ",
                 label, ", outside [0, ", num_classes, "); fix the dataset's labels or its class list");
      row_labels.push_back(label);
      plan.insert(plan.end(), {index, dy, dx, flip ? 1 : 0, cy, cx});
    }
  }

  // Every batch of the epoch planned on the host and uploaded to the device. A bad label ends the
  // plan there: the batches before it are served, then next() reports the error, as the worker does.
  void plan_epoch() {
    std::vector<int64_t> plan, row_labels;
    batch_rows.assign(1, 0);
    try {
      for (int64_t b = 0; b < batches; ++b) {
        plan_batch(b, plan, row_labels);
        batch_rows.push_back(static_cast<int64_t>(row_labels.size()));
      }
    } catch (...) {
      error = std::current_exception();
    }
    const int64_t rows = batch_rows.back();
    plan.resize(static_cast<size_t>(rows * 6)), row_labels.resize(static_cast<size_t>(rows));
    epoch_plan = tensor(plan, {rows, 6}).to(images.device());
    epoch_labels = tensor(row_labels, {rows}).to(images.device());
  }

  // With a worker: batch b planned and rendered on the worker thread.
  Batch make_batch(int64_t b) const {
    std::vector<int64_t> plan, row_labels;
    plan_batch(b, plan, row_labels);
    const int64_t rows = static_cast<int64_t>(row_labels.size());
    return render(tensor(plan, {rows, 6}), tensor(row_labels, {rows}));
  }

  // The images of a plan, rendered by augment_images on the loader's device from its copy of the
  // dataset.
  Batch render(const Tensor& plan, Tensor labels) const {
    const int64_t rows = plan.size(0);
    Batch out;
    out.labels = std::move(labels);
    out.images = empty({rows, 3, kSide, kSide}, options.dtype, images.device(), options.memory_format);
    backend::AugmentArgs a;
    a.images = images.ref();
    a.lut = lut.ref();
    a.plan = plan.ref();
    a.output = backend::TensorRef{out.images.data_ptr(), out.images.shape(), out.images.dtype()};
    a.cutout = options.augment ? options.augmentation.cutout : 0;
    a.reflect = options.augment && options.augmentation.padding == Padding::Reflect;
    a.channels_last = out.images.suggest_memory_format() == MemoryFormat::ChannelsLast;
    kernels(out.images).augment_images(a);
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
  DEMI_CHECK(o.num_workers == 0 || o.num_workers == 1, "DataLoader: num_workers must be 0 (batches made in next()) or ",
             "1 (one background thread), got ", o.num_workers);
  DEMI_CHECK(o.prefetch_batches >= 1, "DataLoader: prefetch_batches must be >= 1, got ", o.prefetch_batches);
  DEMI_CHECK(o.augmentation.crop_padding >= 0 && o.augmentation.crop_padding <= kSide,
             "DataLoader: augmentation.crop_padding must be in [0, 32], got ", o.augmentation.crop_padding);
  DEMI_CHECK(o.augmentation.padding == Padding::Zero || o.augmentation.crop_padding < kSide,
             "DataLoader: reflect padding mirrors at most 31 pixels, got crop_padding ", o.augmentation.crop_padding);
  DEMI_CHECK(o.augmentation.cutout >= 0 && o.augmentation.cutout <= kSide,
             "DataLoader: augmentation.cutout must be in [0, 32] (0 = off), got ", o.augmentation.cutout);
  DEMI_CHECK(o.dtype == DType::F32 || o.dtype == DType::F16 || o.dtype == DType::BF16,
             "DataLoader: dtype must be float32, float16 or bfloat16, got ", o.dtype);
  DEMI_CHECK(o.memory_format == MemoryFormat::Contiguous || o.memory_format == MemoryFormat::ChannelsLast,
             "DataLoader: memory_format must be Contiguous or ChannelsLast, got ", o.memory_format);
  std::vector<float> lut(3 * 256);
  for (int c = 0; c < 3; ++c) {
    DEMI_CHECK(o.normalization.std[c] > 0.0f, "DataLoader: normalization.std[", c, "] must be > 0, got ",
               o.normalization.std[c]);
    for (int v = 0; v < 256; ++v)
      lut[c * 256 + v] = (static_cast<float>(v) / 255.0f - o.normalization.mean[c]) / o.normalization.std[c];
  }
  state_->lut = tensor(lut, {3, 256}).to(o.device);
  state_->images = data.images.to(o.device);
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
  if (s.threaded()) {
    s.worker = std::thread([&s] { s.run(); });
  } else {
    s.plan_epoch();
    s.next_batch = 0;
  }
}

bool DataLoader::next(Batch& out) {
  State& s = *state_;
  DEMI_CHECK(s.epoch >= 0, "DataLoader::next: no epoch started; call start_epoch(epoch) first");
  if (!s.threaded()) {  // made now, on the calling thread (off the CPU: one kernel launch)
    if (s.next_batch + 1 < static_cast<int64_t>(s.batch_rows.size())) {
      const int64_t lo = s.batch_rows[s.next_batch], hi = s.batch_rows[s.next_batch + 1];
      ++s.next_batch;
      out = s.render(s.epoch_plan.slice(lo, hi), s.epoch_labels.slice(lo, hi).clone());
      return true;
    }
  } else {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.changed.wait(lock, [&] { return !s.queue.empty() || s.done; });
    if (!s.queue.empty()) {
      out = std::move(s.queue.front());
      s.queue.pop_front();
      lock.unlock();
      s.changed.notify_all();
      return true;
    }
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
