// The backend contract holds by construction: a backend whose kernels do nothing still refuses every
// bad input, with the CPU backend's exact message (the entry points of backends/kernels.h check,
// then call the device's *_impl), and never sees the bad arguments; good arguments reach it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backends/kernels.h"
#include "framework/core/error.h"

namespace {

using namespace demi;
using namespace demi::backend;

// A device whose kernels only count their calls.
class NullKernels final : public Kernels {
 public:
  int calls = 0;
  Device device() const override { return Device::cpu(); }
  void* raw_allocate(size_t bytes) override { return std::malloc(bytes); }
  void raw_free(void* ptr) override { std::free(ptr); }
  void copy_from_host(const void*, void*, size_t) override {}
  void copy_to_host(const void*, void*, size_t) override {}
  void copy(const void*, void*, size_t) override {}
  void synchronize() override {}

 private:
  void fill_impl(const TensorRef&, double) override { ++calls; }
  void cast_impl(const TensorRef&, const TensorRef&) override { ++calls; }
  void unary_impl(UnaryKind, const TensorRef&, const TensorRef&, double, double) override { ++calls; }
  void binary_impl(BinaryKind, const TensorRef&, const TensorRef&, const TensorRef&) override { ++calls; }
  void reduce_impl(ReduceKind, const TensorRef&, const TensorRef&, const ReduceDims&) override { ++calls; }
  void argmax_impl(const TensorRef&, const TensorRef&) override { ++calls; }
  void permute_impl(const TensorRef&, const TensorRef&, const std::vector<int64_t>&) override { ++calls; }
  void gemm_impl(const GemmArgs&) override { ++calls; }
  void conv2d_forward_impl(const Conv2dArgs&, const ConvGeom&) override { ++calls; }
  void conv2d_backward_data_impl(const Conv2dArgs&, const ConvGeom&) override { ++calls; }
  void conv2d_backward_weight_impl(const Conv2dArgs&, const ConvGeom&) override { ++calls; }
  void pool2d_forward_impl(const Pool2dArgs&, const PoolGeom&) override { ++calls; }
  void pool2d_backward_impl(const Pool2dArgs&, const PoolGeom&) override { ++calls; }
  void batch_norm_forward_impl(const BatchNormArgs&, const BnGeom&) override { ++calls; }
  void batch_norm_backward_impl(const BatchNormArgs&, const BnGeom&) override { ++calls; }
  void softmax_forward_impl(SoftmaxKind, const TensorRef&, const TensorRef&) override { ++calls; }
  void softmax_backward_impl(SoftmaxKind, const TensorRef&, const TensorRef&, const TensorRef&) override { ++calls; }
  void cross_entropy_forward_impl(const CrossEntropyArgs&) override { ++calls; }
  void cross_entropy_backward_impl(const CrossEntropyArgs&) override { ++calls; }
  void random_impl(const RandomArgs&) override { ++calls; }
  void sgd_step_impl(const SgdArgs&) override { ++calls; }
  void adamw_step_impl(const AdamWArgs&) override { ++calls; }
  void unscale_check_finite_impl(const UnscaleArgs&) override { ++calls; }
  void update_scale_impl(const ScaleUpdateArgs&) override { ++calls; }
  void dropout_impl(const DropoutArgs&, const DropoutMask&) override { ++calls; }
  void embedding_forward_impl(const EmbeddingArgs&) override { ++calls; }
  void embedding_backward_impl(const EmbeddingArgs&) override { ++calls; }
  void argmin_impl(const TensorRef&, const TensorRef&) override { ++calls; }
  void where_impl(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&) override { ++calls; }
  void attention_forward_impl(const AttentionArgs&, const AttnGeom&) override { ++calls; }
  void attention_backward_impl(const AttentionArgs&, const AttnGeom&) override { ++calls; }
  void layer_norm_forward_impl(const LayerNormArgs&) override { ++calls; }
  void layer_norm_backward_impl(const LayerNormArgs&) override { ++calls; }
  void augment_images_impl(const AugmentArgs&) override { ++calls; }
};

// Host memory the refs point at (the checks read shapes and dtypes, never the values).
double g_memory[4096];
TensorRef ref(Shape shape, DType dtype = DType::F32) { return TensorRef{g_memory, std::move(shape), dtype}; }
TensorRef ref_at(int slot, Shape shape, DType dtype = DType::F32) {
  return TensorRef{g_memory + 512 * slot, std::move(shape), dtype};
}

struct BadCase {
  const char* name;
  std::function<void(Kernels&)> call;
};

std::vector<BadCase> bad_cases() {
  return {
      {"cast numel", [](Kernels& k) { k.cast(ref({3}), ref_at(1, {4})); }},
      {"unary dtype", [](Kernels& k) { k.unary(UnaryKind::Relu, ref({3}), ref_at(1, {3}, DType::F16)); }},
      {"unary integer", [](Kernels& k) { k.unary(UnaryKind::Neg, ref({3}, DType::I64), ref_at(1, {3}, DType::I64)); }},
      {"binary dtype", [](Kernels& k) { k.binary(BinaryKind::Add, ref({3}), ref_at(1, {3}, DType::F64), ref_at(2, {3})); }},
      {"binary alias of a broadcast operand",
       [](Kernels& k) { k.binary(BinaryKind::Add, ref({1, 3}), ref_at(1, {2, 3}), ref({2, 3})); }},
      {"reduce shape", [](Kernels& k) { k.reduce(ReduceKind::Sum, ref({2, 3}), ref_at(1, {3, 1})); }},
      {"argmax dtype", [](Kernels& k) { k.argmax(ref({2, 3, 1}), ref_at(1, {2, 1, 1})); }},
      {"argmin empty", [](Kernels& k) { k.argmin(ref({2, 0, 1}), ref_at(1, {2, 1, 1}, DType::I64)); }},
      {"reduce min empty", [](Kernels& k) { k.reduce(ReduceKind::Min, ref({2, 0}), ref_at(1, {2, 1})); }},
      {"where cond dtype", [](Kernels& k) { k.where(ref({3}), ref_at(1, {3}), ref_at(2, {3}), ref_at(3, {3})); }},
      {"where broadcast",
       [](Kernels& k) { k.where(ref({3}, DType::U8), ref_at(1, {2}), ref_at(2, {3}), ref_at(3, {3})); }},
      {"permute dims", [](Kernels& k) { k.permute(ref({2, 3}), ref_at(1, {3, 2}), {0, 0}); }},
      {"gemm dtypes",
       [](Kernels& k) {
         GemmArgs g;
         g.a = ref({2, 3});
         g.b = ref_at(1, {3, 4}, DType::F16);
         g.c = ref_at(2, {2, 4});
         g.m = 2, g.k = 3, g.n = 4;
         k.gemm(g);
       }},
      {"conv2d rank",
       [](Kernels& k) {
         Conv2dArgs a;
         a.input = ref({1, 3, 5});
         a.weight = ref_at(1, {2, 3, 3, 3});
         a.output = ref_at(2, {1, 2, 3, 3});
         k.conv2d_forward(a);
       }},
      {"pool2d window",
       [](Kernels& k) {
         Pool2dArgs a;
         a.kind = PoolKind::Avg;
         a.input = ref({1, 1, 4, 4});
         a.output = ref_at(1, {1, 1, 2, 2});
         a.kernel_h = a.kernel_w = 0;
         k.pool2d_forward(a);
       }},
      {"batch_norm weight dtype",
       [](Kernels& k) {
         BatchNormArgs a;
         a.input = ref({2, 3});
         a.output = ref_at(1, {2, 3});
         a.weight = ref_at(2, {3}, DType::F16);
         a.save_mean = ref_at(3, {3});
         a.save_invstd = ref_at(4, {3});
         k.batch_norm_forward(a);
       }},
      {"softmax shapes", [](Kernels& k) { k.softmax_forward(SoftmaxKind::Softmax, ref({2, 3}), ref_at(1, {3, 2})); }},
      {"cross_entropy target dtype",
       [](Kernels& k) {
         CrossEntropyArgs a;
         a.logits = ref({2, 3});
         a.target = ref_at(1, {2}, DType::F32);
         a.loss = ref_at(2, {});
         k.cross_entropy_forward(a);
       }},
      {"random dtype",
       [](Kernels& k) {
         RandomArgs a;
         a.output = ref({4}, DType::I64);
         k.random(a);
       }},
      {"sgd grad size",
       [](Kernels& k) {
         SgdArgs a;
         a.param = ref({3});
         a.grad = ref_at(1, {4});
         k.sgd_step(a);
       }},
      {"adamw moments",
       [](Kernels& k) {
         AdamWArgs a;
         a.param = ref({3});
         a.grad = ref_at(1, {3});
         k.adamw_step(a);
       }},
      {"unscale targets",
       [](Kernels& k) {
         UnscaleArgs a;
         a.in = {ref({3})};
         a.inv_scale = ref_at(1, {});
         a.found_inf = ref_at(2, {});
         k.unscale_check_finite(a);
       }},
      {"update_scale dtypes",
       [](Kernels& k) {
         ScaleUpdateArgs a;
         a.scale = ref({});
         a.growth_tracker = ref_at(1, {}, DType::F32);
         a.found_inf = ref_at(2, {});
         k.update_scale(a);
       }},
      {"attention embedding sizes",
       [](Kernels& k) {
         AttentionArgs a;
         a.q = ref({2, 4, 3});
         a.k = ref_at(1, {2, 5, 4});
         a.v = ref_at(2, {2, 5, 6});
         a.out = ref_at(3, {2, 4, 6});
         a.logsumexp = ref_at(4, {2, 4});
         k.attention_forward(a);
       }},
      {"augment_images plan width",
       [](Kernels& k) {
         AugmentArgs a;
         a.images = ref({4, 3, 8, 8}, DType::U8);
         a.lut = ref_at(1, {3, 256});
         a.plan = ref_at(2, {2, 5}, DType::I64);
         a.output = ref_at(3, {2, 3, 8, 8});
         k.augment_images(a);
       }},
  };
}

// dropout and embedding.
std::vector<BadCase> dropout_embedding_bad_cases() {
  return {
      {"dropout p",
       [](Kernels& k) {
         DropoutArgs a;
         a.input = ref({4});
         a.output = ref_at(1, {4});
         a.p = 1.5;
         k.dropout(a);
       }},
      {"embedding indices dtype",
       [](Kernels& k) {
         EmbeddingArgs a;
         a.weight = ref({5, 3});
         a.indices = ref_at(1, {2}, DType::F32);
         a.output = ref_at(2, {2, 3});
         k.embedding_forward(a);
       }},
      {"embedding_backward padding_idx",
       [](Kernels& k) {
         EmbeddingArgs a;
         a.indices = ref({2}, DType::I64);
         a.grad_output = ref_at(1, {2, 3});
         a.grad_weight = ref_at(2, {5, 3});
         a.padding_idx = 5;
         k.embedding_backward(a);
       }},
  };
}

// layer_norm.
std::vector<BadCase> layer_norm_bad_cases() {
  return {
      {"layer_norm weight size",
       [](Kernels& k) {
         LayerNormArgs a;
         a.input = ref({4, 6});
         a.output = ref_at(1, {4, 6});
         a.mean = ref_at(2, {4});
         a.rstd = ref_at(3, {4});
         a.weight = ref_at(4, {5});
         a.cols = 6;
         k.layer_norm_forward(a);
       }},
      {"layer_norm_backward half statistics",
       [](Kernels& k) {
         LayerNormArgs a;
         a.input = ref({4, 6}, DType::BF16);
         a.grad_output = ref_at(1, {4, 6}, DType::BF16);
         a.mean = ref_at(2, {4}, DType::BF16);
         a.rstd = ref_at(3, {4}, DType::BF16);
         a.cols = 6;
         k.layer_norm_backward(a);
       }},
  };
}

std::string message_of(const std::function<void(Kernels&)>& call, Kernels& k) {
  try {
    call(k);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(KernelContract, ABackendThatDoesNothingRejectsEveryBadInputWithTheCpusMessage) {
  NullKernels null;
  Kernels& cpu = kernels_for(Device::cpu());
  std::vector<BadCase> cases = bad_cases();
  for (BadCase& c : dropout_embedding_bad_cases()) cases.push_back(std::move(c));
  for (BadCase& c : layer_norm_bad_cases()) cases.push_back(std::move(c));
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string expected = message_of(c.call, cpu);
    EXPECT_NE(expected, "(no error)");
    EXPECT_EQ(message_of(c.call, null), expected);
  }
  EXPECT_EQ(null.calls, 0) << "a bad argument reached the backend";
}

TEST(KernelContract, GoodArgumentsReachTheBackend) {
  NullKernels null;
  null.unary(UnaryKind::Relu, ref({3}), ref_at(1, {3}));
  null.reduce(ReduceKind::Sum, ref({2, 3}), ref_at(1, {2, 1}));
  null.permute(ref({2, 3}), ref_at(1, {3, 2}), {1, 0});
  null.where(ref({3}, DType::U8), ref_at(1, {2, 3}), ref_at(2, {}), ref_at(3, {2, 3}));
  EXPECT_EQ(null.calls, 4);
}

TEST(KernelContract, TheCpuSupportsEveryFamily) {
  Kernels& cpu = kernels_for(Device::cpu());
  for (const KernelFamily f : {KernelFamily::Elementwise, KernelFamily::Reduce, KernelFamily::Gemm,
                               KernelFamily::Conv2d, KernelFamily::Pool2d, KernelFamily::BatchNorm,
                               KernelFamily::Softmax, KernelFamily::CrossEntropy, KernelFamily::Random,
                               KernelFamily::Optimizer, KernelFamily::LossScaling, KernelFamily::Attention}) {
    EXPECT_TRUE(cpu.supports(f)) << "family " << static_cast<int>(f);
  }
}

}  // namespace
