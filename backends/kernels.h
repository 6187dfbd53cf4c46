// The backend interface: every kernel a device must provide. Ops in framework/ call kernels only
// through this class; each device (backends/cpu, backends/cuda) implements all of it.
//
// Conventions for every entry:
// - TensorRefs are non-owning views of contiguous row-major data on the backend's device.
// - Half types (F16, BF16) are computed with fp32 accumulation and rounded once on output, as
//   tensor cores do, so small values underflow and large ones overflow exactly as on a GPU.
// - Output refs are written, never reallocated; their shape and dtype are set by the caller.
// - A kernel throws demi::Error for an unsupported dtype or bad data (e.g. a label out of range).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/device.h"
#include "framework/core/dtype.h"
#include "framework/core/shape.h"

namespace demi::backend {

// Non-owning view: data pointer, extents and element type. Always contiguous row-major.
struct TensorRef {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::F32;

  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool defined() const { return data != nullptr; }
  template <typename T> T* as() const { return static_cast<T*>(data); }
};

enum class UnaryKind {
  Neg,     // -x
  Exp,     // e^x
  Log,     // ln x
  Sqrt,    // sqrt x
  Relu,    // max(x, 0)
  Gelu,    // x * Phi(x), the erf form (PyTorch's default)
  Pow,     // x^alpha
  Affine,  // alpha * x + beta (scalar add, scalar multiply, 1 - x ...); beta = -0 for a product alone
  DivScalar,  // x / alpha, correctly rounded (tensor / scalar is a true division in PyTorch)
  Clamp,   // min(max(x, alpha), beta): beta when alpha > beta; NaN stays NaN; a bound may be +-inf
  Abs,     // |x|: the sign bit cleared (|-0| = +0, NaN stays NaN)
  Sign,    // 1 for x > 0, -1 for x < 0, 0 for +-0 and NaN (PyTorch's sign, abs's gradient)
};

enum class BinaryKind {
  Add,
  Sub,
  Mul,
  Div,
  ReluBackward,  // a where b <= 0 is false, else 0: a = grad_y, b = y (or x); NaN b passes a, as PyTorch
  GeluBackward,  // a * gelu'(b): a = grad_y, b = x
  // Comparisons: 1 where a OP b holds, else 0, in the operands' dtype (NaN compares unequal).
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
};

enum class ReduceKind { Sum, Mean, Max, Min };  // max and min propagate NaN, as PyTorch

// The geometry an argument check derives and a kernel uses (backends/kernel_checks.h).
struct ReduceDims;
struct ConvGeom;
struct PoolGeom;
struct BnGeom;
struct DropoutMask;
struct AttnGeom;

// C = alpha * op(A) @ op(B) + beta * C (+ bias), row-major, for `batch` independent products.
// op(A) is [m, k] (A stored [k, m] when trans_a), op(B) is [k, n] (B stored [n, k] when trans_b),
// C is [m, n]. A and B share one dtype; C may be wider (e.g. half inputs, fp32 output).
// A batch stride of 0 reuses the same matrix for every batch (a weight shared across a batch).
enum class Transpose { No, Yes };
struct GemmArgs {
  TensorRef a, b, c;
  TensorRef bias;  // optional [n], added to every row of C (linear's fused bias)
  Transpose trans_a = Transpose::No, trans_b = Transpose::No;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batches
  double alpha = 1.0, beta = 0.0;
};

// 2-D convolution, NCHW, groups = 1, dilation = 1.
// input [N, C, H, W], weight [O, C, KH, KW], output [N, O, OH, OW], bias [O] (optional), with
// OH = (H + 2 * pad_h - KH) / stride_h + 1. channels_last (KernelFamily::ChannelsLast): the shapes
// are the same, but input, weight and output are stored NHWC (weight as [O, KH, KW, C]).
// forward:         reads input, weight, bias        -> writes output
// backward_data:   reads output (= grad_y), weight  -> writes input (= grad_x)
// backward_weight: reads input, output (= grad_y)   -> writes weight (= grad_w), bias (= grad_b) if given
struct Conv2dArgs {
  TensorRef input, weight, output, bias;
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool channels_last = false;
};

// 2-D pooling, NCHW. Max pooling records, per output element, the argmax as an offset inside
// its window (ky * KW + kx) in `indices` (U8 when KH * KW <= 256, else I64); average pooling
// counts padding in the divisor (PyTorch's count_include_pad=True). channels_last
// (KernelFamily::ChannelsLast): input, output and indices are stored NHWC under the same shapes.
// forward:  reads input -> writes output (and indices for Max)
// backward: reads output (= grad_y) and indices -> writes input (= grad_x)
enum class PoolKind { Max, Avg };
struct Pool2dArgs {
  PoolKind kind = PoolKind::Max;
  TensorRef input, output, indices;
  int kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  bool channels_last = false;
};

// Batch normalisation over [N, C] or [N, C, H, W], per channel C. Statistics and affine
// parameters are fp32 whatever the input dtype; input and output share a dtype.
// forward (training): mean and biased variance of the batch -> save_mean, save_invstd
//   (1 / sqrt(var + eps)); running_mean/var (if given) <- (1 - momentum) * running + momentum *
//   batch, with the unbiased variance for running_var, as PyTorch does.
// forward (eval): normalises with running_mean / running_var; save_* are not written.
// backward (training statistics): reads input, grad_output, weight, save_mean, save_invstd ->
//   writes grad_input, grad_weight, grad_bias (each optional).
// activation Relu (training only, KernelFamily::BatchNormRelu): forward writes relu(y) instead of
//   y, bitwise what a separate ReLU would give, and the per-channel coefficients it normalised with
//   into activation_coef ([4, C], the statistics' dtype); backward takes grad_output as the gradient
//   of relu(y) and masks it where y was not positive, decided from input and activation_coef (the
//   CPU: one threshold on x a channel), so y is never stored and no ReLU pass runs over memory
//   (bitwise the separate ReLU's gradient too).
// activation Gelu (training only, fp32 and half inputs, KernelFamily::BatchNormGelu): the same with
//   gelu(y) (erf form), bitwise what a separate GELU on the stored y would give; backward recomputes
//   y from input and activation_coef.
enum class BatchNormMode { Train, Eval };
enum class BatchNormActivation { None, Relu, Gelu };
// channels_last (KernelFamily::ChannelsLast, activation None): the [N, C, H, W] tensors (input,
//   output, grad_output, grad_input) are stored NHWC.
struct BatchNormArgs {
  BatchNormMode mode = BatchNormMode::Train;
  bool channels_last = false;
  TensorRef input, output, weight, bias, running_mean, running_var, save_mean, save_invstd;
  TensorRef grad_output, grad_input, grad_weight, grad_bias;
  double momentum = 0.1, eps = 1e-5;
  BatchNormActivation activation = BatchNormActivation::None;
  TensorRef activation_coef;
};

// Softmax or log-softmax over the last dimension, computed in fp32 whatever the storage dtype.
// backward: reads output (y) and grad_output -> writes grad_input.
enum class SoftmaxKind { Softmax, LogSoftmax };

// Cross-entropy with mean reduction over the batch: logits [N, K] (floating), target [N] (I64).
// With label smoothing s the target distribution is (1 - s) * onehot + s / K.
// forward: writes loss (a 0-d tensor, F32 or F64 like the computation); throws demi::Error for
//   a target outside [0, K), naming the row and the value.
// backward: reads logits, target, grad_loss (0-d) -> writes grad_logits (logits' dtype).
struct CrossEntropyArgs {
  TensorRef logits, target, loss, grad_loss, grad_logits;
  double label_smoothing = 0.0;
};

// Counter-based random numbers (Philox-4x32-10): element i of the output draws from counter
// (offset + i) under key seed, so a result does not depend on the thread count or the device.
enum class RandomKind { Uniform, Normal };  // Uniform on [a, b); Normal with mean a, std b
struct RandomArgs {
  RandomKind kind = RandomKind::Uniform;
  TensorRef output;
  double a = 0.0, b = 1.0;
  uint64_t seed = 0, offset = 0;
};

// How an optimizer step writes a half (fp16 / bf16) param: to nearest (ties to even), or
// stochastically: up with probability (x - down) / (up - down), unbiased, so updates far below half
// an ulp still move the weight on average. The uniform of element i is Philox-4x32-10 at counter
// rounding_offset + i under key rounding_seed (backends/stochastic_rounding.h): the caller gives
// each parameter its own seed and advances the offset every step, so a run is reproducible and a
// resumed one continues the same stream. Float32 and float64 params ignore it.
enum class Rounding { Nearest, Stochastic };
struct WriteRounding {
  Rounding mode = Rounding::Nearest;
  uint64_t seed = 0, offset = 0;
};

// One SGD step on one parameter, in place (PyTorch's torch.optim.SGD formula):
//   g = grad + weight_decay * p;  buf = momentum * buf + (1 - dampening) * g (buf = g on the
//   first step);  g = nesterov ? g + momentum * buf : buf;  p -= lr * g.
// param and grad may be half; momentum_buffer is fp32. With a master (fp32) the step is applied
// to the master and the result rounded once into param.
// found_inf (optional, one-element F32 on the device): when nonzero the kernel changes nothing, so
// that a GradScaler's skip is decided on the device, without the host reading the flag (as
// PyTorch's fused optimizers take found_inf).
// lr_tensor (optional, one-element F64 on the device) is read in place of `lr`: a captured CUDA
// graph then steps with whatever rate was written there before each replay (PyTorch's capturable).
struct SgdArgs {
  TensorRef param, grad, momentum_buffer, master, found_inf, lr_tensor;
  double lr = 0.0, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = true;  // the momentum buffer is initialised from g rather than updated
  WriteRounding rounding;  // how the result is written into a half param
};

// One AdamW step on one parameter, in place (torch.optim.AdamW, decoupled weight decay):
//   p *= 1 - lr * weight_decay;  m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2;
//   p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps).
// exp_avg (m) and exp_avg_sq (v) are fp32 (F64 for an F64 param); step counts from 1. A master
// (fp32) and found_inf work as in SgdArgs. The step count is `step`, or, when step_count (a
// one-element I64 on the device: the steps taken before this one) is given, read from the device:
// the kernel adds 1 to it unless found_inf is set and uses the new count, so that a skipped step
// is not counted, as in PyTorch, with no host read. lr_tensor works as in SgdArgs (it needs
// step_count: both come from the device then).
struct AdamWArgs {
  TensorRef param, grad, exp_avg, exp_avg_sq, master, found_inf, step_count, lr_tensor;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  int64_t step = 1;
  WriteRounding rounding;  // how the result is written into a half param
};

// GradScaler's fused pass over all gradients of an optimizer: out[i] = in[i] * inv_scale for every
// i (out[i] may be in[i]: in place; or an fp32 buffer for a half gradient), and found_inf (0-d F32)
// set to 1 when any element of any in[i] is inf or NaN; it is never cleared here, so several
// calls accumulate. inv_scale is a 0-d F32 on the device: the host never reads either value.
struct UnscaleArgs {
  std::vector<TensorRef> in, out;
  TensorRef inv_scale, found_inf;
};

// GradScaler's update, on the device (PyTorch's _amp_update_scale_): when found_inf != 0,
// scale *= backoff_factor and growth_tracker = 0; else growth_tracker += 1 and, when it reaches
// growth_interval, scale *= growth_factor (only if the result is finite) and growth_tracker = 0.
// scale: 0-d F32, growth_tracker: 0-d I64, found_inf: 0-d F32. step_counts (optional, 3 I64):
// steps taken, steps skipped, skipped in a row, counted here so the host need not read found_inf.
struct ScaleUpdateArgs {
  TensorRef scale, growth_tracker, found_inf, step_counts;
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// Dropout (torch's training-mode semantics): y = x * m with m = 1 / (1 - p) for a kept element and
// 0 for a dropped one, so NaN and inf stay NaN where dropped, as PyTorch's x * mask * scale. Element
// i is kept when u_i < 1 - p, u_i the uniform that `random` draws for element i of a float32
// output under (seed, offset): u24 of Philox counter offset + i (backends/philox.h), whatever x's
// dtype, so the mask depends on (seed, offset, p) alone and is the same on every device, thread
// count and dtype. m is fp32 for half and fp32 inputs (fp64 for fp64), the product rounded once.
// p in [0, 1]: p = 0 keeps everything, p = 1 drops everything. The backward is this same call on
// grad_y with the forward's (seed, offset, p): the mask is drawn again, never stored. input and
// output share dtype and size; output may be input.
struct DropoutArgs {
  TensorRef input, output;
  double p = 0.5;
  uint64_t seed = 0, offset = 0;
};

// Embedding lookup: weight [V, D] (floating), indices (I64, any shape, M elements).
// forward:  reads weight, indices -> writes output [M, D] (any shape of M * D elements): the rows
//   weight[indices[m]], copied.
// backward: reads indices, grad_output (M * D elements, weight's dtype) -> writes grad_weight
//   [V, D]: row v = the sum of the grad_output rows m with indices[m] == v, added in ascending m
//   (deterministic), in fp32 for half types (fp64 for fp64) and rounded once; 0 for rows no index
//   names and for row padding_idx (-1: none), whose weight never learns, as PyTorch's padding_idx.
// An index outside [0, V) throws demi::Error naming it, its position and the range.
struct EmbeddingArgs {
  TensorRef weight, indices, output;
  TensorRef grad_output, grad_weight;
  int64_t padding_idx = -1;
};

// Scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention, no dropout) over
// the leading dims (batch, heads; at least one): q [..., L, E], k [..., S, E], v [..., S, Ev],
// out [..., L, Ev] = softmax(scale * q k^T + mask) v, one floating dtype for all four. mask
// (optional) broadcasts to [..., L, S]: U8 (nonzero: the key takes part, as torch's bool mask) or
// floating (added; any floating dtype). causal: key j takes part in query i's row only when j <= i
// (upper-left aligned); not with a mask. A row in which no key takes part gives 0 (its gradients
// too), as torch (2.5 on) gives.
// Half inputs: both products accumulate in fp32, the softmax is fp32 with the running maximum
// subtracted, the output is rounded once: a logit past 65504 is never stored in fp16.
// forward:  reads q, k, v, mask -> writes out and logsumexp ([..., L], F32; F64 for F64 inputs;
//           log of the row's sum of exp, the maximum included: what backward needs to rebuild P).
//           out_residual (optional, half inputs): out's rounding error, the fp32 output minus out,
//           rounded to out's dtype; backward adds it back, so that D = rowsum(grad_out * output)
//           sees the output to about 2^-16 rather than to half's rounding (which put an error of
//           2^-9 |grad_out| |out| into every score gradient of the row).
// backward: reads q, k, v, mask, out (+ out_residual), logsumexp, grad_out -> writes grad_q, grad_k,
//           grad_v (each optional) and grad_mask (optional: [..., L, S] of the unbroadcast scores'
//           gradient, F32 or F64 like logsumexp; the caller sums it down to the mask's shape).
struct AttentionArgs {
  TensorRef q, k, v, mask, out, logsumexp, out_residual;
  TensorRef grad_out, grad_q, grad_k, grad_v, grad_mask;
  bool causal = false;
  double scale = 1.0;
};

// Layer normalisation (torch.nn.functional.layer_norm): input of M * N elements, read as M rows of
// N = cols (the product of normalized_shape) contiguous elements; M = mean.numel().
// forward: reads input, weight, bias -> writes mean and rstd [M] (float32; float64 for a float64
//   input): each row's mean and 1 / sqrt(biased variance + eps), the variance from the deviations
//   (x - mean), not E[x^2] - E[x]^2; output = (x - mean) * rstd * weight + bias in the input's
//   dtype, computed in fp32 (fp64) and rounded once. weight and bias (each optional) have N
//   elements of one dtype: the input's or, for a half input, float32 (torch's mixed layer_norm).
//   Rows of no elements (cols 0) get mean 0 and rstd NaN, as in torch, from the entry point: the
//   device's *_impl is called with cols > 0 only.
// backward: reads input, grad_output (input's dtype), weight, mean, rstd -> writes grad_input
//   (input's dtype), grad_weight and grad_bias (each optional; N elements, of weight's and bias's
//   dtype): grad_input = rstd (g w - mean(g w) - xhat mean(g w xhat)) per row, with xhat =
//   (x - mean) rstd; grad_weight = sum over rows of g xhat and grad_bias = sum of g, in fp32 (fp64)
//   over fixed blocks of rows added in a fixed order, so the same bits on any thread count, and
//   rounded once.
struct LayerNormArgs {
  TensorRef input, output, weight, bias, mean, rstd;
  TensorRef grad_output, grad_input, grad_weight, grad_bias;
  int64_t cols = 0;
  double eps = 1e-5;
};

// DataLoader's last step, on the batch's device: rows of a uint8 image set gathered, cropped,
// flipped, normalised and cut out. images U8 [N, 3, H, W] (the dataset as stored); lut F32 [3, 256]:
// each channel's normalised value of each pixel value; plan I64 [B, 6], per output row: the source
// image, the crop offsets dy and dx, flip (0 or 1), the cutout centre cy and cx (-1: none); output
// [B, 3, H, W] F32, F16 or BF16 (stored NHWC when channels_last). Output (y, x) reads source (y + dy,
// x' + dx), x' = W - 1 - x when flipped (the flip follows the crop, as torchvision's); a source pixel
// outside the image reads pixel value 0, or with reflect the image mirrored at its border (the edge
// pixel not repeated; |dy| < H and |dx| < W). The cutout square (side `cutout`, centred at (cy, cx)
// with cutout / 2 before it, clipped at the border) is 0. Each value is rounded once into the output.
struct AugmentArgs {
  TensorRef images, lut, plan, output;
  int cutout = 0;
  bool reflect = false;
  bool channels_last = false;
};

// The kernel families, for Kernels::supports().
enum class KernelFamily {
  Elementwise,  // fill, cast, unary, binary, argmax, argmin, permute, where
  Reduce,
  Gemm,
  Conv2d,
  Pool2d,
  BatchNorm,
  BatchNormRelu,  // batch_norm_* with activation Relu
  BatchNormGelu,  // batch_norm_* with activation Gelu
  Softmax,
  CrossEntropy,
  Random,
  Optimizer,    // sgd_step, adamw_step
  LossScaling,  // unscale_check_finite, update_scale
  Attention,    // attention_forward, attention_backward
  // conv2d_*, pool2d_* and batch_norm_* (activation None) with channels_last set: NHWC storage.
  ChannelsLast,
};

class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual Device device() const = 0;
  // Whether this build runs a family on this device. Every backend implements every kernel, but a
  // family may need a library the build did not find (CUDA's convolutions need cuDNN): tests skip
  // on false, and calling such a kernel anyway throws an error that names what is missing.
  virtual bool supports(KernelFamily family) const { return true; }

  // Memory: raw device allocations (the caching allocator sits on top) and copies.
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_free(void* ptr) = 0;
  virtual void copy_from_host(const void* host_src, void* dst, size_t bytes) = 0;
  virtual void copy_to_host(const void* src, void* host_dst, size_t bytes) = 0;
  virtual void copy(const void* src, void* dst, size_t bytes) = 0;  // both on this device
  virtual void synchronize() = 0;

  // Graphs (CUDA graphs): between capture_begin and capture_end the calling thread's kernels on
  // this device are recorded instead of run; replay runs the recording with one launch, on the
  // same memory. While capturing, what a recording cannot hold (a copy to or from the host, a
  // synchronisation, freeing device memory) throws an error that says so. Devices without graphs
  // (the CPU) throw from capture_begin. framework/cuda/graph.h is the user's face of this.
  class Graph {
   public:
    virtual ~Graph() = default;
  };
  virtual void capture_begin();
  virtual std::unique_ptr<Graph> capture_end();
  virtual void abort_capture() {}  // ends a capture that failed midway, discarding it (none: nothing)
  virtual void replay(Graph& graph);
  virtual bool capturing() const { return false; }

  // The kernels. Each entry point checks its arguments (backends/kernel_checks.h: the same checks
  // and messages for every device) and then calls the device's *_impl, so no backend can skip or
  // word a check differently; a backend adds only its own limits (e.g. cuDNN's 32-bit extents).
  // Element-wise. `fill` writes one value; `cast` converts between any two dtypes (same numel).
  void fill(const TensorRef& y, double value) { fill_impl(y, value); }
  void cast(const TensorRef& x, const TensorRef& y);
  void unary(UnaryKind kind, const TensorRef& x, const TensorRef& y, double alpha = 0.0, double beta = 0.0);
  // a and b broadcast to y's shape (numpy rules); a, b, y share a floating dtype.
  void binary(BinaryKind kind, const TensorRef& a, const TensorRef& b, const TensorRef& y);
  // y has x's rank with every reduced dimension of extent 1; y's dtype may be wider than x's.
  void reduce(ReduceKind kind, const TensorRef& x, const TensorRef& y);
  // x [O, R, I] (floating) -> y [O, 1, I] (I64): the index along R of the first maximum; NaN counts
  // as the maximum, as in PyTorch. R must be at least 1.
  void argmax(const TensorRef& x, const TensorRef& y);
  // y = x with its dimensions reordered: y.shape[i] = x.shape[dims[i]], any dtype, rank <= 8.
  void permute(const TensorRef& x, const TensorRef& y, const std::vector<int64_t>& dims);

  void gemm(const GemmArgs& args);
  void conv2d_forward(const Conv2dArgs& args);
  void conv2d_backward_data(const Conv2dArgs& args);
  void conv2d_backward_weight(const Conv2dArgs& args);
  void pool2d_forward(const Pool2dArgs& args);
  void pool2d_backward(const Pool2dArgs& args);
  void batch_norm_forward(const BatchNormArgs& args);
  void batch_norm_backward(const BatchNormArgs& args);
  void softmax_forward(SoftmaxKind kind, const TensorRef& x, const TensorRef& y);
  void softmax_backward(SoftmaxKind kind, const TensorRef& y, const TensorRef& grad_y, const TensorRef& grad_x);
  void cross_entropy_forward(const CrossEntropyArgs& args);
  void cross_entropy_backward(const CrossEntropyArgs& args);
  void random(const RandomArgs& args);
  void sgd_step(const SgdArgs& args);
  void adamw_step(const AdamWArgs& args);
  void unscale_check_finite(const UnscaleArgs& args);
  void update_scale(const ScaleUpdateArgs& args);
  void dropout(const DropoutArgs& args);
  void embedding_forward(const EmbeddingArgs& args);
  void embedding_backward(const EmbeddingArgs& args);
  // argmax's twin: the index along R of the first minimum; NaN counts as the minimum, as in PyTorch.
  void argmin(const TensorRef& x, const TensorRef& y);
  // y = cond ? a : b element-wise: cond U8 (nonzero is true), cond, a and b broadcast to y's shape
  // (numpy rules); a, b and y share one dtype, any dtype. The chosen element's bits are copied: an inf
  // or NaN in the branch not taken never reaches y (a * m + b * (1 - m) would turn it into NaN).
  void where(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& y);
  void attention_forward(const AttentionArgs& args);
  void attention_backward(const AttentionArgs& args);
  void layer_norm_forward(const LayerNormArgs& args);
  void layer_norm_backward(const LayerNormArgs& args);
  void augment_images(const AugmentArgs& args);

 protected:
  // What a device implements, called with checked arguments (and the geometry the check derived).
  virtual void fill_impl(const TensorRef& y, double value) = 0;
  virtual void cast_impl(const TensorRef& x, const TensorRef& y) = 0;
  virtual void unary_impl(UnaryKind kind, const TensorRef& x, const TensorRef& y, double alpha, double beta) = 0;
  virtual void binary_impl(BinaryKind kind, const TensorRef& a, const TensorRef& b, const TensorRef& y) = 0;
  virtual void reduce_impl(ReduceKind kind, const TensorRef& x, const TensorRef& y, const ReduceDims& dims) = 0;
  virtual void argmax_impl(const TensorRef& x, const TensorRef& y) = 0;
  virtual void permute_impl(const TensorRef& x, const TensorRef& y, const std::vector<int64_t>& dims) = 0;
  virtual void gemm_impl(const GemmArgs& args) = 0;
  virtual void conv2d_forward_impl(const Conv2dArgs& args, const ConvGeom& g) = 0;
  virtual void conv2d_backward_data_impl(const Conv2dArgs& args, const ConvGeom& g) = 0;
  virtual void conv2d_backward_weight_impl(const Conv2dArgs& args, const ConvGeom& g) = 0;
  virtual void pool2d_forward_impl(const Pool2dArgs& args, const PoolGeom& g) = 0;
  virtual void pool2d_backward_impl(const Pool2dArgs& args, const PoolGeom& g) = 0;
  virtual void batch_norm_forward_impl(const BatchNormArgs& args, const BnGeom& g) = 0;
  virtual void batch_norm_backward_impl(const BatchNormArgs& args, const BnGeom& g) = 0;
  virtual void softmax_forward_impl(SoftmaxKind kind, const TensorRef& x, const TensorRef& y) = 0;
  virtual void softmax_backward_impl(SoftmaxKind kind, const TensorRef& y, const TensorRef& grad_y,
                                     const TensorRef& grad_x) = 0;
  virtual void cross_entropy_forward_impl(const CrossEntropyArgs& args) = 0;
  virtual void cross_entropy_backward_impl(const CrossEntropyArgs& args) = 0;
  virtual void random_impl(const RandomArgs& args) = 0;
  virtual void sgd_step_impl(const SgdArgs& args) = 0;
  virtual void adamw_step_impl(const AdamWArgs& args) = 0;
  virtual void unscale_check_finite_impl(const UnscaleArgs& args) = 0;
  virtual void update_scale_impl(const ScaleUpdateArgs& args) = 0;
  virtual void dropout_impl(const DropoutArgs& args, const DropoutMask& mask) = 0;
  virtual void embedding_forward_impl(const EmbeddingArgs& args) = 0;
  virtual void embedding_backward_impl(const EmbeddingArgs& args) = 0;
  virtual void argmin_impl(const TensorRef& x, const TensorRef& y) = 0;
  virtual void where_impl(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& y) = 0;
  virtual void attention_forward_impl(const AttentionArgs& args, const AttnGeom& g) = 0;
  virtual void attention_backward_impl(const AttentionArgs& args, const AttnGeom& g) = 0;
  virtual void layer_norm_forward_impl(const LayerNormArgs& args) = 0;
  virtual void layer_norm_backward_impl(const LayerNormArgs& args) = 0;
  virtual void augment_images_impl(const AugmentArgs& args) = 0;
};

// The kernels of a device. Throws demi::Error when the device is absent or its backend was not
// built (e.g. Device::cuda(0) on a machine without a GPU), with the reason.
Kernels& kernels_for(const Device& device);

// Number of CUDA devices usable now (0 without a driver, a device, or a CUDA build).
int cuda_device_count();

// Whether fp32 GEMMs and convolutions on CUDA may use TF32 tensor cores (10-bit mantissa inputs,
// fp32 accumulation: ~1e-3 relative error, several times the fp32 rate). Off by default, as
// PyTorch's torch.backends.cuda.matmul.allow_tf32; PyTorch's convolutions have their own switch,
// torch.backends.cudnn.allow_tf32, on by default. The CPU backend ignores it.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Threads the CPU backend uses (default: all cores).
void set_cpu_threads(int n);
int cpu_threads();

// The CPU backend's ISA level, chosen once from cpuid: "scalar", "avx2", "avx512", "avx512_bf16" or
// "amx" (docs/cpu.md). The environment variable DEMI_CPU_ISA forces a lower level; one
// the CPU lacks throws demi::Error naming the missing feature.
const char* cpu_isa();
// Which bf16 GEMMs and convolutions take that level's bf16 tile: "widen" (none: bf16 is widened into
// the fp32 tile), "non_winograd" (all but the 3x3 convolutions fp32 Winograd takes) or "everything".
// It differs between CPUs of one level (avx512_bf16: everything on AMD, widen on Intel), and
// DEMI_CPU_BF16_ROUTE overrides it.
const char* cpu_bf16_route();
// The CPU backend's tuning variables that are set (DEMI_CPU_ISA, DEMI_CPU_BF16_ROUTE, DEMI_WINOGRAD,
// ...: backends/cpu/tuning.h), as one line to print beside the ISA level: "tuning: defaults" or
// e.g. "tuning: DEMI_WINOGRAD=0". A bad value throws demi::Error naming the variable.
std::string cpu_tuning();

}  // namespace demi::backend
