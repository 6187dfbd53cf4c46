// CudaKernels::conv2d_*: NCHW and NHWC convolution on cuDNN 9's legacy API (cudnnConvolutionForward /
// BackwardData / BackwardFilter): deprecated in 9 but supported, it covers the three passes for fp32,
// fp16, bf16 (fp32 compute) and fp64 with per-shape algorithm search. The graph API is the path to
// fused conv + bias + activation, the next step. Each (pass, shape, dtype, TF32, alignment) gets
// one cudnnFind*AlgorithmEx run on the real buffers (cudnn.benchmark=True) and keeps the fastest
// deterministic algorithm that is accurate (no non-fused Winograd), so repeats reproduce bit for
// bit. The bias is two kernels of ours: the interface allows a bias of any floating dtype (as the
// CPU does), which cudnnAddTensor and cudnnConvolutionBackwardBias are not documented to take.
// channels_last: the same calls on NHWC descriptors (cuDNN's tensor-core kernels read NHWC natively;
// NCHW costs them a transpose). Built without cuDNN, every entry throws.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

#if DEMI_HAVE_CUDNN

// Types held by CudaKernels::ConvPlans (so not in an anonymous namespace).
namespace conv2d_detail {

// Owns one cuDNN descriptor. Created empty, set by the plan builder, destroyed with the plan.
template <typename Desc, cudnnStatus_t (*Create)(Desc*), cudnnStatus_t (*Destroy)(Desc)>
class CudnnDesc {
 public:
  CudnnDesc() { DEMI_CUDNN_CHECK(Create(&desc_)); }
  ~CudnnDesc() { (void)Destroy(desc_); }  // a destructor must not throw; destroy cannot fail here
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
  Desc get() const { return desc_; }

 private:
  Desc desc_ = nullptr;
};
using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDesc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnDesc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

enum class Pass { Forward, BackwardData, BackwardWeight };

// One pass of one convolution shape: its descriptors and the algorithm Find chose.
struct Plan {
  TensorDesc input;   // x or grad_x [N, C, H, W] (stored NHWC for channels_last)
  TensorDesc output;  // y or grad_y [N, O, OH, OW]
  FilterDesc weight;  // w or grad_w [O, C, KH, KW] ([O, KH, KW, C])
  ConvDesc conv;      // padding, stride, compute type and the chosen algorithm's math type
  int algo = 0;       // the pass's cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t workspace_bytes = 0;
};

// pass, dtype, N, C, H, W, O, KH, KW, stride_h, stride_w, pad_h, pad_w, tf32, channels_last, and
// the alignment of the three data pointers (an algorithm chosen on 256-byte aligned buffers may need it).
using PlanKey = std::array<int64_t, 18>;

}  // namespace conv2d_detail

struct CudaKernels::ConvPlans {
  std::mutex mutex;  // guards `plans`; held while a new plan runs Find
  std::map<conv2d_detail::PlanKey, std::unique_ptr<conv2d_detail::Plan>> plans;
};

namespace {

using conv2d_detail::Pass;
using conv2d_detail::Plan;

constexpr int kThreads = 256;
// The most scratch memory Find may give an algorithm; those that want more are not considered.
constexpr size_t kFindWorkspaceLimit = size_t{256} << 20;

// cuDNN's 32-bit limit, on top of the shared checks the entry point ran (backends/kernel_checks.h).
void check_cudnn_limits(const Conv2dArgs& a, const char* op) {
  // cuDNN's legacy descriptors take int extents and strides (pads and strides are int already).
  for (const TensorRef* t : {&a.input, &a.weight, &a.output})
    DEMI_CHECK(t->numel() <= INT_MAX, op, ": ", t->shape, " has more than 2^31 - 1 elements, beyond cuDNN's ",
               "32-bit descriptors; split the batch");
}

// --- Bias kernels --------------------------------------------------------------------------------

// y[i, o, p] += bias[o] over y [N, O, plane] (n elements; [N, plane, O] when nhwc): in T's
// arithmetic type (fp32 for the half types, with the bias widened as the CPU does), rounded once on
// store. The convolution was already rounded to T by cuDNN, so half types round twice, as PyTorch's
// conv-then-add_ does.
template <typename T, typename B>
__global__ void add_bias_kernel(T* y, const B* bias, int64_t channels, int64_t plane, int64_t n, bool nhwc) {
  using A = acc_t<T>;
  for (int64_t i = thread_index(); i < n; i += grid_width()) {
    const int64_t o = nhwc ? i % channels : (i / plane) % channels;
    y[i] = Narrow<T>::from(widen(y[i]) + static_cast<A>(widen(bias[o])));
  }
}

// grad_b[o] = sum of grad_y[i, o, p] over images i and positions p, grad_y [N, O, plane] ([N,
// plane, O] when nhwc): one kThreads-wide block per channel o, summed in double (as the CPU does) and
// rounded once into B. Both layouts add the same terms in the same order.
template <typename T, typename B>
__global__ void bias_grad_kernel(const T* grad_y, B* grad_b, int64_t images, int64_t channels, int64_t plane,
                                 bool nhwc) {
  const int64_t o = blockIdx.x;
  const int64_t count = images * plane;
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t i = j / plane, p = j - i * plane;
    sum += static_cast<double>(widen(grad_y[nhwc ? j * channels + o : (i * channels + o) * plane + p]));
  }
  sum = block_reduce(sum, Sum{}, 0.0);
  if (threadIdx.x == 0) grad_b[o] = Narrow<B>::from(sum);
}

// output [N, O, OH, OW] += bias [O], any floating dtypes.
void add_bias(CudaKernels& k, const Conv2dArgs& a, const ConvGeom& g, const char* op) {
  const int64_t n = a.output.numel();
  dispatch_floating(a.output.dtype, op, [&](auto data_tag) {
    using T = typename decltype(data_tag)::type;
    dispatch_floating(a.bias.dtype, op, [&](auto bias_tag) {
      using B = typename decltype(bias_tag)::type;
      add_bias_kernel<T, B><<<k.blocks_for(n, kThreads), kThreads, 0, k.stream()>>>(
          a.output.as<T>(), a.bias.as<const B>(), g.o, g.plane(), n, a.channels_last);
      DEMI_CUDA_LAUNCH_CHECK("add_bias_kernel");
    });
  });
}

// bias [O] = sum of output (= grad_y) [N, O, OH, OW] over N, OH, OW; zeros when N is 0. Needs O > 0.
void bias_grad(CudaKernels& k, const Conv2dArgs& a, const ConvGeom& g, const char* op) {
  dispatch_floating(a.output.dtype, op, [&](auto data_tag) {
    using T = typename decltype(data_tag)::type;
    dispatch_floating(a.bias.dtype, op, [&](auto bias_tag) {
      using B = typename decltype(bias_tag)::type;
      bias_grad_kernel<T, B><<<static_cast<unsigned>(g.o), kThreads, 0, k.stream()>>>(
          a.output.as<const T>(), a.bias.as<B>(), g.n, g.o, g.plane(), a.channels_last);
      DEMI_CUDA_LAUNCH_CHECK("bias_grad_kernel");
    });
  });
}

// --- cuDNN plans ---------------------------------------------------------------------------------

cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F64: return CUDNN_DATA_DOUBLE;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  DEMI_THROW("internal error: conv2d: no cuDNN data type for ", dtype);
}

// Half data: tensor cores (fp32 accumulation, from the fp32 compute type). fp32: FMA only unless
// TF32 is allowed, since CUDNN_DEFAULT_MATH lets Ampere and later round the inputs to TF32; with
// TF32 allowed, DEFAULT (not TENSOR_OP_MATH_ALLOW_CONVERSION, which converts fp32 to fp16).
cudnnMathType_t math_type(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::F16:
    case DType::BF16: return CUDNN_TENSOR_OP_MATH;
    case DType::F32: return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    default: return CUDNN_DEFAULT_MATH;  // fp64: no rounding below fp64 exists to allow
  }
}

// The largest power of two (up to 256) dividing the address.
int64_t alignment(const void* p) {
  const auto bits = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lowest = bits & (~bits + 1);
  return lowest == 0 || lowest > 256 ? 256 : static_cast<int64_t>(lowest);
}

// alpha = 1 and beta = 0 for every call (the result overwrites the output), in the scaling type
// cuDNN reads for the data type: double for fp64 data, float otherwise.
struct Scaling {
  explicit Scaling(DType dtype) : fp64(dtype == DType::F64) {}
  const void* one() const { return fp64 ? static_cast<const void*>(&one_d) : &one_f; }
  const void* zero() const { return fp64 ? static_cast<const void*>(&zero_d) : &zero_f; }
  bool fp64;
  float one_f = 1.0f, zero_f = 0.0f;
  double one_d = 1.0, zero_d = 0.0;
};

void describe(Plan& plan, const ConvGeom& g, DType dtype, cudnnMathType_t math, bool nhwc) {
  const cudnnDataType_t type = cudnn_type(dtype);
  const cudnnTensorFormat_t format = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  auto i = [](int64_t v) { return static_cast<int>(v); };  // in range: check_conv bounds every numel
  // Note the argument order: tensors take (format, type), filters (type, format). The extents are
  // N, C, H, W in either format.
  DEMI_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.input.get(), format, type, i(g.n), i(g.c), i(g.h), i(g.w)));
  DEMI_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.output.get(), format, type, i(g.n), i(g.o), i(g.oh), i(g.ow)));
  DEMI_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan.weight.get(), type, format, i(g.o), i(g.c), i(g.kh), i(g.kw)));
  DEMI_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan.conv.get(), i(g.ph), i(g.pw), i(g.sh), i(g.sw), 1, 1,
                                                   CUDNN_CROSS_CORRELATION,
                                                   dtype == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
  DEMI_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), math));
  int n = 0, o = 0, oh = 0, ow = 0;
  DEMI_CUDNN_CHECK(
      cudnnGetConvolution2dForwardOutputDim(plan.conv.get(), plan.input.get(), plan.weight.get(), &n, &o, &oh, &ow));
  DEMI_INTERNAL_CHECK(n == g.n && o == g.o && oh == g.oh && ow == g.ow, "conv2d: cuDNN's output [", n, ", ", o, ", ",
                      oh, ", ", ow, "] differs from [", g.n, ", ", g.o, ", ", g.oh, ", ", g.ow, "]");
}

// What the three passes' algorithm searches differ in, by the pass's cuDNN result type: its algorithm
// enum, its workspace size query, its Find on the call's buffers, and which algorithms are accurate.
// accurate: as accurate as a direct sum. cuDNN's non-fused Winograd is not: on an H200 (cuDNN 9.19)
// it erred by 3% of the sum of |terms| in fp32 backward data of a 5x5 filter and by 3e-4 in the
// forward (implicit GEMM and FFT: below 4e-7). Measured with every algorithm of the three passes;
// scripts/gpu-check's conv2d tests fail on such an error.
template <typename Perf>
struct PassApi;

template <>
struct PassApi<cudnnConvolutionFwdAlgoPerf_t> {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static bool accurate(Algo algo) { return algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED; }
  static cudnnStatus_t workspace_size(cudnnHandle_t h, const Plan& p, Algo algo, size_t* size) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, p.input.get(), p.weight.get(), p.conv.get(), p.output.get(),
                                                   algo, size);
  }
  static void find(cudnnHandle_t h, const Plan& p, const Conv2dArgs& a, Perf* results, int& count, void* ws,
                   size_t bytes) {
    DEMI_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
        h, p.input.get(), a.input.data, p.weight.get(), a.weight.data, p.conv.get(), p.output.get(), a.output.data,
        kAlgoCount, &count, results, ws, bytes));
  }
};

template <>
struct PassApi<cudnnConvolutionBwdDataAlgoPerf_t> {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static bool accurate(Algo algo) { return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED; }
  static cudnnStatus_t workspace_size(cudnnHandle_t h, const Plan& p, Algo algo, size_t* size) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.weight.get(), p.output.get(), p.conv.get(),
                                                        p.input.get(), algo, size);
  }
  static void find(cudnnHandle_t h, const Plan& p, const Conv2dArgs& a, Perf* results, int& count, void* ws,
                   size_t bytes) {
    DEMI_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        h, p.weight.get(), a.weight.data, p.output.get(), a.output.data, p.conv.get(), p.input.get(), a.input.data,
        kAlgoCount, &count, results, ws, bytes));
  }
};

template <>
struct PassApi<cudnnConvolutionBwdFilterAlgoPerf_t> {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static bool accurate(Algo algo) { return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED; }
  static cudnnStatus_t workspace_size(cudnnHandle_t h, const Plan& p, Algo algo, size_t* size) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.input.get(), p.output.get(), p.conv.get(),
                                                          p.weight.get(), algo, size);
  }
  static void find(cudnnHandle_t h, const Plan& p, const Conv2dArgs& a, Perf* results, int& count, void* ws,
                   size_t bytes) {
    DEMI_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        h, p.input.get(), a.input.data, p.output.get(), a.output.data, p.conv.get(), p.weight.get(), a.weight.data,
        kAlgoCount, &count, results, ws, bytes));
  }
};

// The fastest algorithm that ran (status SUCCESS), preferring in turn one that is accurate and
// deterministic (a run repeats bit for bit), one that is accurate, then any. For fp32
// without TF32 only FMA math qualifies (PyTorch asserts the same). nullptr when none qualifies.
template <typename Perf>
const Perf* fastest(const Perf* results, int count, bool fma_only) {
  for (int strictness = 2; strictness >= 0; --strictness) {
    const Perf* best = nullptr;
    for (int i = 0; i < count; ++i) {
      const Perf& r = results[i];
      if (r.status != CUDNN_STATUS_SUCCESS || (fma_only && r.mathType != CUDNN_FMA_MATH)) continue;
      if (strictness >= 1 && !PassApi<Perf>::accurate(r.algo)) continue;
      if (strictness == 2 && r.determinism != CUDNN_DETERMINISTIC) continue;
      if (best == nullptr || r.time < best->time) best = &r;
    }
    if (best) return best;
  }
  return nullptr;
}

template <typename Perf>
[[noreturn]] void throw_no_algorithm(const Perf* results, int count, const Conv2dArgs& a, const char* op) {
  DEMI_THROW(op, ": cuDNN has no usable algorithm for input ", a.input.shape, ", weight ", a.weight.shape, " in ",
             a.input.dtype, " with stride (", a.stride_h, ", ", a.stride_w, ") and padding (", a.pad_h, ", ", a.pad_w,
             ") (", count, " tried, the first: ", count > 0 ? cudnnGetErrorString(results[0].status) : "none",
             "); run this convolution on Device::cpu() or in another dtype");
}

// Scratch for Find: the most any applicable algorithm wants, up to kFindWorkspaceLimit. A status
// other than SUCCESS from the size query means the algorithm does not apply to this shape: skipped.
template <typename SizeOf>
size_t find_workspace_bytes(int algo_count, SizeOf size_of) {
  size_t bytes = 0;
  for (int algo = 0; algo < algo_count; ++algo) {
    size_t need = 0;
    if (size_of(algo, &need) == CUDNN_STATUS_SUCCESS && need <= kFindWorkspaceLimit && need > bytes) bytes = need;
  }
  return bytes;
}

// Runs Find for the pass whose cuDNN result type is Perf on the call's buffers (it overwrites the
// pass's output, which the real call writes next) and records the winner, its math type and its
// workspace size.
template <typename Perf>
void choose_pass_algorithm(CudaKernels& k, Plan& p, const Conv2dArgs& a, bool fma_only, const char* op) {
  using Api = PassApi<Perf>;
  cudnnHandle_t h = k.cudnn();
  const size_t bytes = find_workspace_bytes(Api::kAlgoCount, [&](int algo, size_t* size) {
    return Api::workspace_size(h, p, static_cast<typename Api::Algo>(algo), size);
  });
  void* ws = k.workspace(bytes);
  Perf results[Api::kAlgoCount];
  int count = 0;
  Api::find(h, p, a, results, count, ws, bytes);
  const Perf* best = fastest(results, count, fma_only);
  if (best == nullptr) throw_no_algorithm(results, count, a, op);
  DEMI_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.get(), best->mathType));
  size_t need = 0;
  DEMI_CUDNN_CHECK(Api::workspace_size(h, p, best->algo, &need));
  p.algo = best->algo;
  p.workspace_bytes = need > best->memory ? need : best->memory;
}

// choose_pass_algorithm for the plan's pass.
void choose_algorithm(CudaKernels& k, Plan& p, Pass pass, const Conv2dArgs& a, bool fma_only, const char* op) {
  switch (pass) {
    case Pass::Forward: return choose_pass_algorithm<cudnnConvolutionFwdAlgoPerf_t>(k, p, a, fma_only, op);
    case Pass::BackwardData: return choose_pass_algorithm<cudnnConvolutionBwdDataAlgoPerf_t>(k, p, a, fma_only, op);
    case Pass::BackwardWeight:
      return choose_pass_algorithm<cudnnConvolutionBwdFilterAlgoPerf_t>(k, p, a, fma_only, op);
  }
}

// The plan of this pass for this call's shape, built (and benchmarked on the call's buffers) on
// first use. Plans are never erased, so the reference stays valid after the lock is released.
const Plan& conv_plan(CudaKernels& k, Pass pass, const Conv2dArgs& a, const ConvGeom& g, const char* op) {
  const DType dtype = a.input.dtype;
  const bool tf32 = dtype == DType::F32 && allow_tf32();
  const conv2d_detail::PlanKey key{static_cast<int64_t>(pass), static_cast<int64_t>(dtype), g.n, g.c, g.h, g.w,
                                   g.o, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, tf32 ? 1 : 0, a.channels_last ? 1 : 0,
                                   alignment(a.input.data), alignment(a.weight.data), alignment(a.output.data)};
  CudaKernels::ConvPlans& plans = k.conv_plans();
  const std::lock_guard<std::mutex> lock(plans.mutex);
  const auto found = plans.plans.find(key);
  if (found != plans.plans.end()) return *found->second;
  auto plan = std::make_unique<Plan>();
  describe(*plan, g, dtype, math_type(dtype, tf32), a.channels_last);
  choose_algorithm(k, *plan, pass, a, dtype == DType::F32 && !tf32, op);
  return *plans.plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace

CudaKernels::ConvPlans& CudaKernels::conv_plans() {
  std::call_once(conv_plans_once_, [this] { conv_plans_.reset(new ConvPlans); });
  return *conv_plans_;
}
void CudaKernels::PlansDeleter::operator()(ConvPlans* plans) const { delete plans; }

// output = conv(input, weight) (+ bias). An empty input (C, H or W of 0) leaves the bias alone.
void CudaKernels::conv2d_forward_impl(const Conv2dArgs& args, const ConvGeom& g) {
  const char* op = "conv2d_forward";
  check_cudnn_limits(args, op);
  if (args.output.numel() == 0) return;
  const DeviceGuard guard(index_);
  if (args.input.numel() > 0) {  // and so the weight, since O > 0 and C > 0
    const Plan& p = conv_plan(*this, Pass::Forward, args, g, op);
    const Scaling s(args.input.dtype);
    void* ws = workspace(p.workspace_bytes);
    DEMI_CUDNN_CHECK(cudnnConvolutionForward(cudnn(), s.one(), p.input.get(), args.input.data, p.weight.get(),
                                             args.weight.data, p.conv.get(),
                                             static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), ws, p.workspace_bytes,
                                             s.zero(), p.output.get(), args.output.data));
  } else {
    DEMI_CUDA_CHECK(cudaMemsetAsync(args.output.data, 0, args.output.nbytes(), stream_));  // 0 bits are +0.0
  }
  if (args.bias.defined()) add_bias(*this, args, g, op);
}

// input (= grad_x) = conv_transpose(output (= grad_y), weight); zeros when O is 0.
void CudaKernels::conv2d_backward_data_impl(const Conv2dArgs& args, const ConvGeom& g) {
  const char* op = "conv2d_backward_data";
  check_cudnn_limits(args, op);
  if (args.input.numel() == 0) return;
  const DeviceGuard guard(index_);
  if (g.o > 0) {  // and so grad_y and the weight are non-empty
    const Plan& p = conv_plan(*this, Pass::BackwardData, args, g, op);
    const Scaling s(args.input.dtype);
    void* ws = workspace(p.workspace_bytes);
    DEMI_CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn(), s.one(), p.weight.get(), args.weight.data, p.output.get(),
                                                  args.output.data, p.conv.get(),
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo), ws,
                                                  p.workspace_bytes, s.zero(), p.input.get(), args.input.data));
  } else {
    DEMI_CUDA_CHECK(cudaMemsetAsync(args.input.data, 0, args.input.nbytes(), stream_));
  }
}

// weight (= grad_w) = correlation of input and output (= grad_y); bias (= grad_b), if given, = the
// sum of grad_y over N, OH, OW. An empty batch or input gives zeros.
void CudaKernels::conv2d_backward_weight_impl(const Conv2dArgs& args, const ConvGeom& g) {
  const char* op = "conv2d_backward_weight";
  check_cudnn_limits(args, op);
  const DeviceGuard guard(index_);
  if (args.weight.numel() > 0) {
    if (args.input.numel() > 0) {  // and so grad_y, since O > 0
      const Plan& p = conv_plan(*this, Pass::BackwardWeight, args, g, op);
      const Scaling s(args.input.dtype);
      void* ws = workspace(p.workspace_bytes);
      DEMI_CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn(), s.one(), p.input.get(), args.input.data,
                                                      p.output.get(), args.output.data, p.conv.get(),
                                                      static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo), ws,
                                                      p.workspace_bytes, s.zero(), p.weight.get(), args.weight.data));
    } else {
      DEMI_CUDA_CHECK(cudaMemsetAsync(args.weight.data, 0, args.weight.nbytes(), stream_));
    }
  }
  if (args.bias.defined() && g.o > 0) bias_grad(*this, args, g, op);
}

#else  // !DEMI_HAVE_CUDNN

struct CudaKernels::ConvPlans {};
CudaKernels::ConvPlans& CudaKernels::conv_plans() {
  std::call_once(conv_plans_once_, [this] { conv_plans_.reset(new ConvPlans); });
  return *conv_plans_;
}
void CudaKernels::PlansDeleter::operator()(ConvPlans* plans) const { delete plans; }

namespace {
[[noreturn]] void no_cudnn(const char* op) {
  DEMI_THROW(op, ": demi was built without cuDNN, which CUDA convolutions need; install cuDNN 9 and reconfigure ",
             "(if CMake does not find it, point it there with -DDEMI_CUDNN_INCLUDE_DIR=<dir of cudnn.h> ",
             "-DDEMI_CUDNN_LIBRARY=<path of libcudnn.so>), or run the convolution on Device::cpu()");
}
}  // namespace

void CudaKernels::conv2d_forward_impl(const Conv2dArgs&, const ConvGeom&) { no_cudnn("conv2d_forward"); }
void CudaKernels::conv2d_backward_data_impl(const Conv2dArgs&, const ConvGeom&) { no_cudnn("conv2d_backward_data"); }
void CudaKernels::conv2d_backward_weight_impl(const Conv2dArgs&, const ConvGeom&) { no_cudnn("conv2d_backward_weight"); }

#endif  // DEMI_HAVE_CUDNN

bool CudaKernels::supports(KernelFamily family) const {
  if (family == KernelFamily::BatchNormRelu || family == KernelFamily::BatchNormGelu) {
    return false;  // batch_norm.cu has no fused activations yet
  }
#if DEMI_HAVE_CUDNN
  return true;
#else
  return family != KernelFamily::Conv2d && family != KernelFamily::ChannelsLast;
#endif
}

}  // namespace demi::backend::cuda
