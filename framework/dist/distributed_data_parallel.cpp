// DDP's reducer: buckets, the gradient hooks that launch them in order, and the end-of-backward
// callback that waits for them and writes the averaged gradients back.
#include "framework/dist/distributed_data_parallel.h"

#include <algorithm>
#include <map>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/autograd/profiler.h"
#include "framework/tensor/factories.h"

namespace demi::dist {

namespace {

// Packs `tensors` (one dtype) into one flat tensor, or copies the flat tensor back into them.
void pack(const std::vector<Tensor>& tensors, const Tensor& flat) {
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    flat.slice(offset, offset + t.numel()).copy_(t.reshape({t.numel()}));
    offset += t.numel();
  }
}
void unpack(const Tensor& flat, const std::vector<Tensor>& tensors) {
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    t.copy_(flat.slice(offset, offset + t.numel()).reshape(t.shape()));
    offset += t.numel();
  }
}

}  // namespace

void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  std::map<std::pair<DType, std::string>, std::vector<Tensor>> by_kind;  // one flat buffer per dtype and device
  for (const Tensor& t : tensors) {
    if (t.defined() && t.numel() > 0) by_kind[{t.dtype(), t.device().str()}].push_back(t);
  }
  for (auto& [kind, list] : by_kind) {
    int64_t numel = 0;
    for (const Tensor& t : list) numel += t.numel();
    const Tensor flat = empty({numel}, kind.first, list.front().device());
    if (group.rank() == root) pack(list, flat);
    group.broadcast(flat, root);
    if (group.rank() != root) unpack(flat, list);
  }
}

void broadcast_buffers(ProcessGroup& group, nn::Module& module) {
  if (group.size() < 2) return;
  NoGradGuard no_grad;
  std::vector<Tensor> buffers;
  for (const auto& [name, b] : module.named_buffers()) buffers.push_back(b);
  broadcast_coalesced(group, buffers, 0);
}

// The state the gradient hooks work on. Buckets are launched strictly in index order, so every
// rank issues the same all-reduces in the same order whatever order its gradients arrive in.
struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<size_t> params;  // indices into Reducer::params
    Tensor flat;                 // the gradients packed, in their dtype
    size_t pending = 0;          // gradients not yet arrived in this backward
    std::shared_ptr<Work> work;  // the all-reduce in flight
  };
  ProcessGroup* group = nullptr;
  std::vector<Tensor> params;
  std::vector<size_t> bucket_of;   // param index -> bucket index
  std::vector<Bucket> buckets;
  std::vector<int> hook_handles;
  size_t next_to_launch = 0;
  bool in_pass = false;   // a backward pass has started reducing
  bool no_sync = false;

  void start_pass() {
    in_pass = true;
    next_to_launch = 0;
    for (Bucket& b : buckets) {
      b.pending = b.params.size();
      b.work.reset();
    }
    // weak: a reducer destroyed while a pass is queued has nothing left to finish
    std::weak_ptr<Reducer> self = self_;
    autograd::queue_callback([self] {
      if (auto r = self.lock()) r->finish_pass();
    });
  }

  void on_gradient(size_t index) {
    if (no_sync) return;
    if (!in_pass) start_pass();
    Bucket& b = buckets[bucket_of[index]];
    DEMI_INTERNAL_CHECK(b.pending > 0, "DistributedDataParallel: a gradient arrived twice in one backward pass");
    --b.pending;
    while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) launch(next_to_launch++);
  }

  void launch(size_t bucket_index) {
    profiler::Region region("ddp: pack + all_reduce");
    Bucket& b = buckets[bucket_index];
    std::vector<Tensor> grads;
    for (size_t i : b.params) {
      const Tensor& p = params[i];
      const Tensor g = p.grad();
      DEMI_CHECK(!g.defined() || g.dtype() == b.flat.dtype(), "DistributedDataParallel: the gradient of a ", p.dtype(),
                 " parameter is ", g.dtype(), "; gradients must have their parameter's dtype");
      // Not used in this forward on this rank: contributes zeros (another rank may have used it).
      grads.push_back(g.defined() ? g : zeros(p.shape(), b.flat.dtype(), p.device()));
    }
    pack(grads, b.flat);
    // Divide before summing, as PyTorch's default hook: a sum of N fp16 gradients could overflow.
    const double inv_world = 1.0 / static_cast<double>(group->size());
    b.flat.mul_(inv_world);
    b.work = group->all_reduce_async(b.flat, ReduceOp::Sum);
  }

  void finish_pass() {
    if (!in_pass) return;
    in_pass = false;
    // Parameters this rank did not use never sent their hook: launch what is left, in order.
    while (next_to_launch < buckets.size()) launch(next_to_launch++);
    profiler::Region region("ddp: wait + unpack");
    for (Bucket& b : buckets) {
      b.work->wait();
      std::vector<Tensor> grads;
      for (size_t i : b.params) {
        const Tensor& p = params[i];
        if (!p.grad().defined()) {
          const Tensor g = empty(p.shape(), p.dtype(), p.device());
          g.set_memory_category(MemoryCategory::Gradients);
          p.set_grad(g);
        }
        grads.push_back(p.grad());
      }
      unpack(b.flat, grads);
      b.work.reset();
    }
  }

  std::weak_ptr<Reducer> self_;
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, const Options& options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  DEMI_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  DEMI_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null; create one with "
             "dist::init_process_group()");
  DEMI_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0, "DistributedDataParallel: bucket caps "
             "must be positive, got bucket_cap_mb ", options.bucket_cap_mb, " and first_bucket_cap_mb ",
             options.first_bucket_cap_mb);
  register_module("module", module_);
  NoGradGuard no_grad;

  // Every rank starts from rank 0's weights and buffers.
  std::vector<Tensor> state;
  for (const auto& [name, p] : module_->named_parameters()) state.push_back(p);
  for (const auto& [name, b] : module_->named_buffers()) state.push_back(b);
  if (group_->size() > 1) broadcast_coalesced(*group_, state, 0);

  // Buckets: parameters in reverse order, one dtype per bucket, up to the cap.
  auto reducer = std::make_shared<Reducer>();
  reducer->self_ = reducer;
  reducer->group = group_.get();
  for (const Tensor& p : module_->parameters()) {
    if (p.requires_grad()) reducer->params.push_back(p);
  }
  reducer->bucket_of.resize(reducer->params.size());
  std::map<DType, size_t> open_bucket;  // dtype -> index of the bucket being filled
  std::map<size_t, size_t> bucket_bytes;
  for (size_t k = reducer->params.size(); k-- > 0;) {
    const Tensor& p = reducer->params[k];
    const double cap_mb = reducer->buckets.empty() ? options.first_bucket_cap_mb : options.bucket_cap_mb;
    const size_t cap = static_cast<size_t>(cap_mb * 1024.0 * 1024.0);
    auto it = open_bucket.find(p.dtype());
    if (it == open_bucket.end() || (bucket_bytes[it->second] > 0 && bucket_bytes[it->second] + p.nbytes() > cap)) {
      reducer->buckets.emplace_back();
      open_bucket[p.dtype()] = reducer->buckets.size() - 1;
      it = open_bucket.find(p.dtype());
    }
    reducer->buckets[it->second].params.push_back(k);
    bucket_bytes[it->second] += p.nbytes();
    reducer->bucket_of[k] = it->second;
  }
  for (size_t b = 0; b < reducer->buckets.size(); ++b) {
    Reducer::Bucket& bucket = reducer->buckets[b];
    const Tensor& first = reducer->params[bucket.params.front()];
    bucket.flat = empty({static_cast<int64_t>(bucket_bytes[b] / dtype_size(first.dtype()))}, first.dtype(),
                        first.device());
    bucket.flat.set_memory_category(MemoryCategory::Gradients);
  }
  if (group_->size() > 1) {
    std::weak_ptr<Reducer> weak = reducer;
    for (size_t k = 0; k < reducer->params.size(); ++k) {
      reducer->hook_handles.push_back(reducer->params[k].register_post_accumulate_grad_hook([weak, k](const Tensor&) {
        if (auto r = weak.lock()) r->on_gradient(k);
      }));
    }
  }
  reducer_ = std::move(reducer);
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t k = 0; k < reducer_->hook_handles.size(); ++k) {
    reducer_->params[k].remove_post_accumulate_grad_hook(reducer_->hook_handles[k]);
  }
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (is_training() && options_.broadcast_buffers) broadcast_buffers(*group_, *module_);
  return (*module_)(x);
}

size_t DistributedDataParallel::num_buckets() const { return reducer_->buckets.size(); }

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.reducer_->no_sync) {
  ddp_.reducer_->no_sync = true;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.reducer_->no_sync = previous_; }

}  // namespace demi::dist
