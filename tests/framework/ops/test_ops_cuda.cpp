// Every op of the op table on cuda:0 against the same op on the CPU: the forward result and the
// gradient of every input, in float32 and in both half formats, from the same random inputs and
// the same random output gradient. Skips (one line) without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"
#include "framework/demi/demi.h"
#include "framework/ops/op.h"

namespace demi {
namespace {

using backend::cuda_test::kNoDevice;
using test::accumulated;
using test::epsilon;
using test::expect_close;
using test::Tolerance;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct OpCase {
  std::string op;  // the op-table name
  std::vector<Shape> shapes;
  Fn fn;
  bool positive = false;  // inputs in (0.3, 3): log, sqrt, pow
  size_t fp32_from = SIZE_MAX;  // inputs from this index on stay fp32 (BatchNorm's weight and bias)
};

// A batch norm op (batch_norm or a fused form) in training, without running statistics: in[0]
// normalised with weight in[1] and bias in[2].
using BatchNormFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const BatchNormOptions&);
Fn training_batch_norm(BatchNormFn op) {
  return [op](const std::vector<Tensor>& in) {
    BatchNormOptions o;
    o.training = true;
    return op(in[0], Tensor(), Tensor(), in[1], in[2], o);
  };
}

Tensor nhwc(const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }

std::vector<OpCase> cases() {
  // Labels live on the device of the logits: the case moves them.
  auto labels_like = [](const Tensor& logits) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < logits.size(0); ++i) v.push_back((i * 7 + 3) % logits.size(1));
    return tensor(v, {logits.size(0)}).to(logits.device());
  };
  BatchNormOptions train;
  train.training = true;
  return {
      {"add", {{37, 19}, {19}}, [](auto& in) { return in[0] + in[1]; }},
      {"sub", {{5, 1, 7}, {3, 7}}, [](auto& in) { return in[0] - in[1]; }},
      {"mul", {{64, 33}, {64, 33}}, [](auto& in) { return in[0] * in[1]; }},
      {"div", {{8, 9}, {9}}, [](auto& in) { return in[0] / in[1]; }, true},
      {"neg", {{1000}}, [](auto& in) { return -in[0]; }},
      {"affine", {{3, 333}}, [](auto& in) { return in[0] * 0.75 + 2.0; }},
      {"exp", {{17, 17}}, [](auto& in) { return exp(in[0]); }},
      {"log", {{17, 17}}, [](auto& in) { return log(in[0]); }, true},
      {"sqrt", {{17, 17}}, [](auto& in) { return sqrt(in[0]); }, true},
      {"pow", {{17, 17}}, [](auto& in) { return pow(in[0], 1.5); }, true},
      {"relu", {{4, 8, 9, 9}}, [](auto& in) { return relu(in[0]); }},
      {"gelu", {{4, 8, 9, 9}}, [](auto& in) { return gelu(in[0]); }},
      {"sum", {{6, 5, 7}}, [](auto& in) { return sum(in[0], {0, 2}); }},
      {"mean", {{6, 5, 7}}, [](auto& in) { return mean(in[0], {1}, true); }},
      {"reshape", {{6, 5, 7}}, [](auto& in) { return in[0].reshape({30, 7}) * 2.0; }},
      {"cast", {{6, 5}}, [](auto& in) { return in[0].to(DType::F64).to(in[0].dtype()); }},
      {"to_device", {{6, 5}}, [](auto& in) { return in[0].to(Device::cpu()).to(in[0].device()); }},
      {"matmul", {{3, 33, 65}, {65, 17}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"linear", {{31, 48}, {20, 48}, {20}}, [](auto& in) { return linear(in[0], in[1], in[2]); }},
      {"conv2d", {{4, 5, 11, 11}, {7, 5, 3, 3}, {7}}, [](auto& in) { return conv2d(in[0], in[1], in[2], 2, 1); }},
      {"max_pool2d", {{3, 4, 9, 9}}, [](auto& in) { return max_pool2d(in[0], 3, 2, 1); }},
      {"avg_pool2d", {{3, 4, 8, 8}}, [](auto& in) { return avg_pool2d(in[0], 2); }},
      {"batch_norm", {{8, 6, 5, 5}, {6}, {6}}, training_batch_norm(batch_norm), false, 1},
      // Fused on the CPU, relu(batch_norm) on CUDA: the same values either way.
      {"batch_norm_relu", {{8, 6, 5, 5}, {6}, {6}}, training_batch_norm(batch_norm_relu), false, 1},
      // Fused on the CPU, gelu(batch_norm) on CUDA.
      {"batch_norm_gelu", {{8, 6, 5, 5}, {6}, {6}}, training_batch_norm(batch_norm_gelu), false, 1},
      {"softmax", {{9, 1000}}, [](auto& in) { return softmax(in[0]); }},
      {"log_softmax", {{9, 10}}, [](auto& in) { return log_softmax(in[0]); }},
      {"cross_entropy", {{33, 10}},
       [labels_like](auto& in) {
         CrossEntropyOptions o;
         o.label_smoothing = 0.1;
         return cross_entropy(in[0], labels_like(in[0]), o);
       }},
      {"transpose", {{4, 6, 5}}, [](auto& in) { return transpose(in[0], 0, 2) * 2.0; }},
      {"clamp", {{6, 33}}, [](auto& in) { return clamp(in[0], -0.5, 0.7); }},
      {"select", {{5, 4, 3}}, [](auto& in) { return select(in[0], 0, 2) * in[0][-1]; }},
      {"cat", {{2, 5, 3}, {3, 5, 3}}, [](auto& in) { return cat({in[0], in[1]}, 0); }},
      // One generator state on both devices: the same mask.
      {"dropout", {{64, 33}}, [](auto& in) { Generator g(5); return dropout(in[0], 0.3, true, g); }},
      {"embedding", {{10, 7}}, [](auto& in) {
         return embedding(in[0], tensor(std::vector<int64_t>{3, 9, 3, 0, 3, 5}, {2, 3}).to(in[0].device()));
       }},
      {"abs", {{33, 17}}, [](auto& in) { return abs(in[0]); }},
      {"amax", {{6, 5, 7}}, [](auto& in) { return amax(in[0], {0, 2}) + max(in[0]); }},
      {"amin", {{6, 5, 7}}, [](auto& in) { return amin(in[0], {-1}, true) + min(in[0]); }},
      {"max_dim", {{6, 5, 7}}, [](auto& in) { return std::get<0>(max(in[0], 1)); }},
      {"min_dim", {{6, 5, 7}}, [](auto& in) { return std::get<0>(min(in[0], 2, true)); }},
      // the mask comes from the input, so it is on the input's device
      {"where", {{5, 1, 7}, {3, 7}}, [](auto& in) { return where(in[1] > 0.0, in[0], in[1]) + masked_fill(in[1], in[1] < -0.5, 0.0); }},
      {"permute", {{4, 6, 5, 3}}, [](auto& in) { return permute(in[0], {3, 1, 0, 2}) * 2.0; }},
      {"expand", {{5, 1, 3}}, [](auto& in) { return expand(in[0], {2, 5, 4, 3}) * 2.0; }},
      {"matmul", {{2, 1, 9, 33}, {3, 33, 17}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"matmul", {{9, 33}, {3, 33, 17}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"scaled_dot_product_attention", {{2, 3, 70, 17}, {2, 3, 130, 17}, {2, 3, 130, 9}},
       [](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); }},
      {"scaled_dot_product_attention", {{2, 2, 40, 16}, {2, 2, 50, 16}, {2, 2, 50, 8}, {40, 50}},
       [](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2], in[3]); }},
      // fp32 weight and bias beside half inputs (torch's mixed layer_norm); rows of 1100: a block each
      {"layer_norm", {{64, 33}, {33}, {33}}, [](auto& in) { return layer_norm(in[0], {33}, in[1], in[2]); }, false, 1},
      {"layer_norm", {{2, 4, 1100}, {4, 1100}}, [](auto& in) { return layer_norm(in[0], {4, 1100}, in[1]); }},
      // channels_last on the device: conversions both ways, element-wise ops beside row-major operands
      {"contiguous", {{2, 5, 6, 7}, {5, 1, 1}},
       [](auto& in) {
         const Tensor x = in[0].contiguous(MemoryFormat::ChannelsLast);
         return (relu(x * in[1]) + in[0]).contiguous();
       }},
      // channels_last inputs: NHWC kernels on CUDA (cuDNN's NHWC descriptors, batch norm and pooling
      // kernels of their own), contiguous copies on the CPU. 70 channels: two full blocks of 32 and
      // a partial one in the NHWC batch norm sums; [64, 40, 16, 16]: many chunks per channel.
      {"conv2d", {{4, 5, 11, 11}, {7, 5, 3, 3}, {7}}, [](auto& in) { return conv2d(nhwc(in[0]), nhwc(in[1]), in[2], 2, 1); }},
      {"conv2d", {{4, 8, 6, 6}, {16, 8, 1, 1}}, [](auto& in) { return conv2d(nhwc(in[0]), in[1]); }},
      {"max_pool2d", {{3, 40, 9, 9}}, [](auto& in) { return max_pool2d(nhwc(in[0]), 3, 2, 1); }},
      {"avg_pool2d", {{3, 36, 8, 8}}, [](auto& in) { return avg_pool2d(nhwc(in[0]), 2); }},
      {"batch_norm", {{8, 70, 5, 5}, {70}, {70}},
       [train](auto& in) { return batch_norm(nhwc(in[0]), Tensor(), Tensor(), in[1], in[2], train); }, false, 1},
      {"batch_norm", {{64, 40, 16, 16}, {40}, {40}},
       [train](auto& in) { return batch_norm(nhwc(in[0]), Tensor(), Tensor(), in[1], in[2], train); }, false, 1},
      {"batch_norm", {{6, 3, 4, 4}, {3}, {3}},  // eval: running statistics, a backward built from ops
       [](auto& in) {
         const Device d = in[0].device();
         return batch_norm(nhwc(in[0]), full({3}, 0.25, DType::F32, d), full({3}, 1.5, DType::F32, d), in[1], in[2],
                           BatchNormOptions{});
       }, false, 1},
      {"conv2d", {{8, 3, 12, 12}, {16, 3, 3, 3}, {16}, {16}},  // a SmallCNN block, NHWC from end to end
       [train](auto& in) {
         const Tensor y = conv2d(nhwc(in[0]), nhwc(in[1]), Tensor(), 1, 1);
         return max_pool2d(relu(batch_norm(y, Tensor(), Tensor(), in[2], in[3], train)), 2);
       }, false, 2},
  };
}

// A tensor's values as doubles, on the host.
std::vector<double> values(const Tensor& t) { return t.to(DType::F64).to(Device::cpu()).to_vector<double>(); }

// |got - want| <= rate * (max |want| over the tensor), Tolerance{0, rate max|want|}: summation
// orders differ between the backends (cuBLASLt, cuDNN, tree reductions), so errors scale with the
// tensor's magnitude, not each element's. fp32: accumulated(F32).rtol = 1e-5; halves: 1.5 epsilon,
// since each backend rounds its (differently ordered) fp32 result once into the format.
Tolerance of_magnitude(DType dtype, const std::vector<double>& want) {
  const double rate = dtype == DType::F32 ? accumulated(DType::F32, 1).rtol : 1.5 * epsilon(dtype);
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  return {0.0, rate * std::max(scale, 1e-30)};
}

void expect_tensor_close(const Tensor& got, const Tensor& want, DType dtype, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> w = values(want);
  expect_close(values(got), w, of_magnitude(dtype, w), what);
}

TEST(OpsCuda, EveryOpMatchesTheCpuForwardAndBackward) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (const OpCase& c : cases()) {
      SCOPED_TRACE(c.op + " in " + dtype_name(dtype));
      Generator gen(17);
      std::vector<Tensor> on_cpu, on_gpu;
      for (const Shape& s : c.shapes) {
        Tensor x = randn(s, gen);
        if (c.positive) x = exp(x * 0.3);
        x = x.to(on_cpu.size() >= c.fp32_from ? DType::F32 : dtype);
        on_cpu.push_back(x.clone().requires_grad_());
        on_gpu.push_back(x.to(gpu).requires_grad_());
      }
      const Tensor y_cpu = c.fn(on_cpu), y_gpu = c.fn(on_gpu);
      ASSERT_EQ(y_gpu.device(), gpu);
      ASSERT_EQ(y_gpu.dtype(), y_cpu.dtype());
      expect_tensor_close(y_gpu, y_cpu, dtype, "forward");
      const Tensor grad_y = randn(y_cpu.shape(), gen).to(y_cpu.dtype());
      y_cpu.backward(grad_y);
      y_gpu.backward(grad_y.to(gpu));
      for (size_t i = 0; i < on_cpu.size(); ++i) {
        ASSERT_TRUE(on_gpu[i].grad().defined()) << "input " << i << " got no gradient on CUDA";
        EXPECT_EQ(on_gpu[i].grad().device(), gpu);
        expect_tensor_close(on_gpu[i].grad(), on_cpu[i].grad(), dtype, "gradient of input " + std::to_string(i));
      }
    }
  }
}

// On CUDA a channels_last block stays NHWC from end to end, gradients included.
TEST(OpsCuda, ChannelsLastStaysNhwcThroughConvBatchNormAndPooling) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Device gpu = Device::cuda(0);
  Generator gen(3);
  Tensor x = nhwc(randn({8, 3, 12, 12}, gen).to(gpu)).requires_grad_();
  Tensor w = nhwc(randn({16, 3, 3, 3}, gen).to(gpu)).requires_grad_();
  BatchNormOptions train;
  train.training = true;
  const Tensor c = conv2d(x, w, Tensor(), 1, 1);
  const Tensor b = batch_norm(c, Tensor(), Tensor(), ones({16}, DType::F32, gpu), zeros({16}, DType::F32, gpu), train);
  const Tensor y = max_pool2d(relu(b), 2);
  for (const Tensor* t : {&c, &b, &y}) EXPECT_EQ(t->suggest_memory_format(), MemoryFormat::ChannelsLast);
  y.backward(nhwc(randn(y.shape(), gen).to(gpu)));
  EXPECT_EQ(x.grad().suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_EQ(w.grad().suggest_memory_format(), MemoryFormat::ChannelsLast);
}

TEST(OpsCuda, EveryOpOfTheTableHasACase) {
  std::set<std::string> covered;
  for (const OpCase& c : cases()) covered.insert(c.op);
  for (const ops::OpInfo& op : ops::all_ops())
    EXPECT_TRUE(covered.count(op.name)) << op.name << " has no CUDA-vs-CPU case in " << __FILE__;
}

}  // namespace
}  // namespace demi
