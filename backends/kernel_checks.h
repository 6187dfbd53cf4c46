// The argument checks every backend runs before its kernels, so CPU and CUDA refuse the same inputs
// with the same messages. Host-only C++ (no CUDA, no Eigen): included by backends/cpu/*.cpp and
// backends/cuda/*.cu alike; a backend adds its own limits (cuDNN's 32-bit extents) after these.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "backends/kernels.h"
#include "backends/optim_checks.h"
#include "framework/core/conv2d_shape.h"
#include "framework/core/error.h"

namespace demi::backend {

// --- element-wise --------------------------------------------------------------------------------

// cast(x, y): any two dtypes of the same number of elements.
inline void check_cast(const TensorRef& x, const TensorRef& y) {
  DEMI_CHECK(x.numel() == y.numel(), "cast: x ", x.shape, " (", x.dtype, ") has ", x.numel(), " elements but y ",
             y.shape, " (", y.dtype, ") has ", y.numel(), "; give y x's shape");
}

inline const char* unary_name(UnaryKind k) {
  switch (k) {
    case UnaryKind::Neg: return "unary(neg)";
    case UnaryKind::Exp: return "unary(exp)";
    case UnaryKind::Log: return "unary(log)";
    case UnaryKind::Sqrt: return "unary(sqrt)";
    case UnaryKind::Relu: return "unary(relu)";
    case UnaryKind::Gelu: return "unary(gelu)";
    case UnaryKind::Pow: return "unary(pow)";
    case UnaryKind::Affine: return "unary(affine)";
    case UnaryKind::DivScalar: return "unary(div_scalar)";
    case UnaryKind::Clamp: return "unary(clamp)";
    case UnaryKind::Abs: return "unary(abs)";
    case UnaryKind::Sign: return "unary(sign)";
  }
  return "unary";
}

inline const char* binary_name(BinaryKind k) {
  switch (k) {
    case BinaryKind::Add: return "binary(add)";
    case BinaryKind::Sub: return "binary(sub)";
    case BinaryKind::Mul: return "binary(mul)";
    case BinaryKind::Div: return "binary(div)";
    case BinaryKind::ReluBackward: return "binary(relu_backward)";
    case BinaryKind::GeluBackward: return "binary(gelu_backward)";
    case BinaryKind::Eq: return "binary(eq)";
    case BinaryKind::Ne: return "binary(ne)";
    case BinaryKind::Lt: return "binary(lt)";
    case BinaryKind::Le: return "binary(le)";
    case BinaryKind::Gt: return "binary(gt)";
    case BinaryKind::Ge: return "binary(ge)";
  }
  return "binary";
}

// unary(kind, x, y): floating x, y of x's dtype and number of elements. Returns the kernel's name.
inline const char* check_unary(UnaryKind kind, const TensorRef& x, const TensorRef& y) {
  const char* name = unary_name(kind);
  DEMI_CHECK(x.dtype == y.dtype && x.numel() == y.numel(), name, ": x is ", x.shape, " ", x.dtype, " but y is ",
             y.shape, " ", y.dtype, "; y must have x's dtype and number of elements");
  DEMI_CHECK(is_floating(x.dtype), name, ": x must be floating, got ", x.dtype, "; cast it first");
  return name;
}

// binary(kind, a, b, y): one floating dtype for all three, and y may alias a or b only when that
// operand has y's full shape (writing y while a broadcast operand is read through the same memory
// would read results). Broadcasting itself is checked by each backend's index plan.
inline const char* check_binary(BinaryKind kind, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
  const char* name = binary_name(kind);
  DEMI_CHECK(a.dtype == b.dtype && a.dtype == y.dtype, name, ": a is ", a.dtype, ", b is ", b.dtype, " and y is ",
             y.dtype, "; all three must share one dtype (cast first)");
  DEMI_CHECK(is_floating(y.dtype), name, ": operands must be floating, got ", y.dtype, "; cast them first");
  DEMI_CHECK(a.data != y.data || a.numel() == y.numel(), name, ": y aliases a ", a.shape, ", which broadcasts to y ",
             y.shape, "; in-place is only possible into a full-shape operand");
  DEMI_CHECK(b.data != y.data || b.numel() == y.numel(), name, ": y aliases b ", b.shape, ", which broadcasts to y ",
             y.shape, "; in-place is only possible into a full-shape operand");
  return name;
}

// argmax / argmin (x, y): x [O, R, I] floating with R >= 1, y [O, 1, I] I64.
inline void check_arg_reduce(bool is_min, const TensorRef& x, const TensorRef& y) {
  const char* name = is_min ? "argmin" : "argmax";
  DEMI_CHECK(is_floating(x.dtype) && y.dtype == DType::I64, name, ": x must be floating and y int64, got ", x.dtype,
             " and ", y.dtype);
  DEMI_CHECK(x.shape.size() == 3 && y.shape.size() == 3 && y.shape[0] == x.shape[0] && y.shape[1] == 1 &&
                 y.shape[2] == x.shape[2],
             name, ": x must be [O, R, I] and y [O, 1, I], got ", x.shape, " and ", y.shape);
  DEMI_CHECK(x.shape[1] >= 1 || y.numel() == 0, name, ": x ", x.shape, " has no elements along the reduced dim, so "
             "there is no ", is_min ? "minimum" : "maximum", "; reduce over a non-empty range");
}

// permute(x, y, dims): dims a permutation of x's dims, y.shape[i] == x.shape[dims[i]], one dtype.
inline void check_permute(const TensorRef& x, const TensorRef& y, const std::vector<int64_t>& dims) {
  const size_t rank = x.shape.size();
  DEMI_CHECK(dims.size() == rank && y.shape.size() == rank && rank <= 8, "permute: x ", x.shape, " and y ", y.shape,
             " need rank <= 8 and one dim index per dimension, got ", dims.size());
  DEMI_CHECK(x.dtype == y.dtype, "permute: x is ", x.dtype, " but y is ", y.dtype, "; they must share a dtype");
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t d = dims[i];
    DEMI_CHECK(d >= 0 && d < static_cast<int64_t>(rank) && !seen[static_cast<size_t>(d)], "permute: dims must be a "
               "permutation of 0..", rank - 1, ", got ", dims);
    seen[static_cast<size_t>(d)] = true;
    DEMI_CHECK(y.shape[i] == x.shape[static_cast<size_t>(d)], "permute: y ", y.shape, " is not x ", x.shape,
               " permuted by ", dims);
  }
}

// --- reduce --------------------------------------------------------------------------------------

inline const char* reduce_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return "reduce sum";
    case ReduceKind::Mean: return "reduce mean";
    case ReduceKind::Max: return "reduce max";
    case ReduceKind::Min: return "reduce min";
  }
  return "reduce";
}

// A checked reduction: x's dims with neighbouring kept / reduced ones merged, outer first (extent-1
// dims dropped), and the counts the kernels need.
struct ReduceDims {
  Shape keepdim;                                 // y's shape in keepdim form (a 0-d y: x's rank of 1s)
  std::vector<std::pair<int64_t, bool>> groups;  // (extent, reduced), outer first
  int64_t R = 1;                                 // reduced elements per output
  int64_t outputs = 0;                           // y.numel(); 0: nothing to do
};

// reduce(kind, x, y): floating x and y, y in keepdim form (or 0-d for a full reduction); a max over
// an empty range is refused unless there is no output at all.
inline ReduceDims check_reduce(ReduceKind kind, const TensorRef& x, const TensorRef& y) {
  const char* name = reduce_name(kind);
  DEMI_CHECK(is_floating(x.dtype) && is_floating(y.dtype), name, ": x is ", x.dtype, " and y is ", y.dtype,
             "; both must be floating (float32, float64, float16 or bfloat16); cast integer tensors first");
  const Shape& xs = x.shape;
  ReduceDims d;
  // A 0-d y is accepted for a full reduction, the one case where keepdim form is a nuisance.
  d.keepdim = y.shape.empty() ? Shape(xs.size(), 1) : y.shape;
  const Shape& ys = d.keepdim;
  DEMI_CHECK(ys.size() == xs.size(), name, ": y ", y.shape, " must have x ", xs,
             "'s rank with reduced dims of extent 1 (keepdim form)");
  for (size_t i = 0; i < xs.size(); ++i) {
    DEMI_CHECK(ys[i] == xs[i] || ys[i] == 1, name, ": y ", y.shape, " does not fit x ", xs,
               " (dimension ", i, " is ", ys[i], " in y, ", xs[i],
               " in x); each y extent must equal x's (kept) or be 1 (reduced)");
    const bool is_reduced = ys[i] == 1 && xs[i] != 1;
    if (is_reduced) d.R *= xs[i];
    if (xs[i] == 1) continue;
    if (!d.groups.empty() && d.groups.back().second == is_reduced) d.groups.back().first *= xs[i];
    else d.groups.emplace_back(xs[i], is_reduced);
  }
  d.outputs = y.numel();
  const bool extreme = kind == ReduceKind::Max || kind == ReduceKind::Min;
  DEMI_CHECK(d.outputs == 0 || !extreme || d.R > 0, name, ": x ", xs, " has no elements along the reduced dims, so "
             "the ", kind == ReduceKind::Max ? "max" : "min", " is undefined; reduce over a non-empty range");
  return d;
}

// --- where ---------------------------------------------------------------------------------------

// where(cond, a, b, y): cond U8; a, b and y of one dtype; each of cond, a and b broadcasts to y's
// shape; y aliases an operand only when that operand has y's full shape (as binary).
inline void check_where(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
  DEMI_CHECK(cond.dtype == DType::U8, "where: cond must be uint8 (a mask of 0 and 1, what comparisons return), got ",
             cond.dtype);
  DEMI_CHECK(a.dtype == b.dtype && a.dtype == y.dtype, "where: a is ", a.dtype, ", b is ", b.dtype, " and y is ",
             y.dtype, "; all three must share one dtype (cast first)");
  const std::pair<const char*, const TensorRef*> operands[] = {{"cond", &cond}, {"a", &a}, {"b", &b}};
  for (const auto& [what, t] : operands) {
    const Shape& s = t->shape;
    bool fits = s.size() <= y.shape.size();
    for (size_t k = 0; fits && k < s.size(); ++k) {
      const int64_t extent = s[s.size() - 1 - k], target = y.shape[y.shape.size() - 1 - k];
      fits = extent == target || extent == 1;
    }
    DEMI_CHECK(fits, "where: ", what, " ", s, " does not broadcast to y ", y.shape,
               "; each extent must equal y's (aligned from the right) or be 1");
    DEMI_CHECK(t->data != y.data || t->numel() == y.numel(), "where: y aliases ", what, " ", s,
               ", which broadcasts to y ", y.shape, "; in-place is only possible into a full-shape operand");
  }
}

// --- gemm ----------------------------------------------------------------------------------------

// Elements a batched gemm operand spans: one matrix when it is shared (stride 0) or batch is 1.
inline int64_t gemm_span(int64_t batch, int64_t stride, int64_t matrix) {
  return (batch == 1 || stride == 0) ? matrix : (batch - 1) * stride + matrix;
}

inline void check_gemm(const GemmArgs& g) {
  DEMI_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 1, "gemm: need m, n, k >= 0 and batch >= 1, got m=",
             g.m, " n=", g.n, " k=", g.k, " batch=", g.batch);
  DEMI_CHECK(g.a.dtype == g.b.dtype, "gemm: A and B must share a dtype, got ", g.a.dtype, " and ", g.b.dtype,
             "; cast one of them first");
  DEMI_CHECK(is_floating(g.a.dtype) && is_floating(g.c.dtype), "gemm: A, B and C must be floating, got A ",
             g.a.dtype, " and C ", g.c.dtype);
  DEMI_CHECK(g.stride_a >= 0 && g.stride_b >= 0 && g.stride_c >= 0, "gemm: batch strides must be >= 0, got ",
             g.stride_a, ", ", g.stride_b, ", ", g.stride_c);
  const int64_t mn = g.m * g.n;
  DEMI_CHECK(g.batch == 1 || g.stride_c >= mn, "gemm: with batch ", g.batch, " C's stride must be >= m * n = ",
             mn, " (each product needs its own C), got ", g.stride_c);
  auto need = [&](const TensorRef& t, const char* name, int64_t stride, int64_t matrix) {
    const int64_t elems = gemm_span(g.batch, stride, matrix);
    DEMI_CHECK(elems == 0 || t.defined(), "gemm: ", name, " is undefined");
    DEMI_CHECK(t.numel() >= elems, "gemm: ", name, " of shape ", t.shape, " holds ", t.numel(),
               " elements, but m=", g.m, " n=", g.n, " k=", g.k, " batch=", g.batch, " and stride ", stride,
               " need ", elems);
  };
  need(g.a, "A", g.stride_a, g.m * g.k);
  need(g.b, "B", g.stride_b, g.k * g.n);
  need(g.c, "C", g.stride_c, mn);
  if (g.bias.defined()) {
    DEMI_CHECK(is_floating(g.bias.dtype), "gemm: bias must be floating, got ", g.bias.dtype);
    DEMI_CHECK(g.bias.numel() == g.n, "gemm: bias must have n = ", g.n, " elements, got shape ", g.bias.shape);
  }
}

// --- conv2d --------------------------------------------------------------------------------------

// A checked convolution's extents: input [n, c, h, w], weight [o, c, kh, kw], output [n, o, oh, ow].
struct ConvGeom {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int64_t sh, sw, ph, pw;
  int64_t ckk() const { return c * kh * kw; }
  int64_t plane() const { return oh * ow; }
  // A 1x1 convolution with stride 1 and no padding reads the image itself as its column matrix.
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

// Every conv2d pass (op names it): shapes, one floating dtype, the output's extents, the bias.
inline ConvGeom check_conv2d(const Conv2dArgs& a, const char* op) {
  const TensorRef &x = a.input, &wt = a.weight, &y = a.output;
  DEMI_CHECK(x.shape.size() == 4, op, ": input must be [N, C, H, W], got ", x.shape);
  DEMI_CHECK(wt.shape.size() == 4, op, ": weight must be [O, C, KH, KW], got ", wt.shape);
  DEMI_CHECK(y.shape.size() == 4, op, ": output must be [N, O, OH, OW], got ", y.shape);
  DEMI_CHECK(a.stride_h >= 1 && a.stride_w >= 1 && a.pad_h >= 0 && a.pad_w >= 0, op,
             ": need stride >= 1 and padding >= 0, got stride (", a.stride_h, ", ", a.stride_w, ") padding (",
             a.pad_h, ", ", a.pad_w, ")");
  DEMI_CHECK(x.dtype == wt.dtype && x.dtype == y.dtype, op, ": input, weight and output must share a dtype, got ",
             x.dtype, ", ", wt.dtype, " and ", y.dtype, "; cast them first");
  DEMI_CHECK(is_floating(x.dtype), op, ": dtype must be floating, got ", x.dtype);
  ConvGeom g{x.shape[0], x.shape[1], x.shape[2], x.shape[3], wt.shape[0], wt.shape[2], wt.shape[3], 0, 0,
             a.stride_h, a.stride_w, a.pad_h, a.pad_w};
  DEMI_CHECK(wt.shape[1] == g.c, op, ": weight ", wt.shape, " expects ", wt.shape[1], " input channels, but input ",
             x.shape, " has ", g.c, " (groups are not supported)");
  DEMI_CHECK(g.kh >= 1 && g.kw >= 1 && g.h + 2 * g.ph >= g.kh && g.w + 2 * g.pw >= g.kw, op, ": kernel ", g.kh,
             "x", g.kw, " does not fit the padded input ", x.shape, " with padding (", g.ph, ", ", g.pw, ")");
  const Conv2dOutputShape out = conv2d_output_shape(g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw);
  g.oh = out.h;
  g.ow = out.w;
  const Shape expected{g.n, g.o, g.oh, g.ow};
  DEMI_CHECK(y.shape == expected, op, ": output must be ", expected, " for input ", x.shape, ", weight ", wt.shape,
             ", stride (", g.sh, ", ", g.sw, ") and padding (", g.ph, ", ", g.pw, "), got ", y.shape);
  DEMI_CHECK(g.n * g.c * g.h * g.w == 0 || x.defined(), op, ": input is undefined");
  DEMI_CHECK(g.o * g.ckk() == 0 || wt.defined(), op, ": weight is undefined");
  DEMI_CHECK(g.n * g.o * g.plane() == 0 || y.defined(), op, ": output is undefined");
  if (a.bias.defined()) {
    DEMI_CHECK(is_floating(a.bias.dtype), op, ": bias must be floating, got ", a.bias.dtype);
    DEMI_CHECK(a.bias.numel() == g.o, op, ": bias must be [", g.o, "], got ", a.bias.shape);
  }
  return g;
}

// --- pool2d --------------------------------------------------------------------------------------

// A checked pooling's extents: input [planes = N * C, h, w], output [planes, oh, ow].
struct PoolGeom {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;
};

// Both pool2d passes (op names it): shapes, window, dtypes and, for max pooling, the indices.
inline PoolGeom check_pool2d(const Pool2dArgs& a, const char* op) {
  const TensorRef &x = a.input, &y = a.output;
  DEMI_CHECK(x.shape.size() == 4, op, ": input must be [N, C, H, W], got ", x.shape);
  DEMI_CHECK(a.kernel_h >= 1 && a.kernel_w >= 1 && a.stride_h >= 1 && a.stride_w >= 1, op,
             ": need kernel >= 1 and stride >= 1, got kernel (", a.kernel_h, ", ", a.kernel_w, ") stride (",
             a.stride_h, ", ", a.stride_w, ")");
  // Also guarantees that every window holds at least one input element, as PyTorch requires.
  DEMI_CHECK(a.pad_h >= 0 && a.pad_w >= 0 && 2 * a.pad_h <= a.kernel_h && 2 * a.pad_w <= a.kernel_w, op,
             ": padding must be between 0 and half the kernel, got padding (", a.pad_h, ", ", a.pad_w,
             ") for kernel (", a.kernel_h, ", ", a.kernel_w, ")");
  DEMI_CHECK(x.dtype == y.dtype && is_floating(x.dtype), op, ": input and output must share a floating dtype, got ",
             x.dtype, " and ", y.dtype);
  PoolGeom g{x.shape[0] * x.shape[1], x.shape[2], x.shape[3], 0, 0, a.kernel_h, a.kernel_w,
             a.stride_h, a.stride_w, a.pad_h, a.pad_w};
  DEMI_CHECK(g.h + 2 * g.ph >= g.kh && g.w + 2 * g.pw >= g.kw, op, ": kernel (", g.kh, ", ", g.kw,
             ") is larger than the padded input ", x.shape);
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  const Shape expected{x.shape[0], x.shape[1], g.oh, g.ow};
  DEMI_CHECK(y.shape == expected, op, ": output must be ", expected, " for input ", x.shape, ", got ", y.shape);
  DEMI_CHECK(x.numel() == 0 || (x.defined() && y.defined()), op, ": input or output is undefined");
  if (a.kind == PoolKind::Max) {
    const DType want = g.kh * g.kw <= 256 ? DType::U8 : DType::I64;
    DEMI_CHECK(a.indices.dtype == want, op, ": max-pool indices for a ", g.kh, "x", g.kw, " window must be ", want,
               ", got ", a.indices.dtype);
    DEMI_CHECK(a.indices.shape == expected, op, ": indices must be ", expected, ", got ", a.indices.shape);
    DEMI_CHECK(y.numel() == 0 || a.indices.defined(), op, ": max pooling needs indices");
  }
  return g;
}

// --- batch_norm ----------------------------------------------------------------------------------

// A checked batch norm's extents: input [n, c] or [n, c, H, W] with hw = H * W (1 for [n, c]).
struct BnGeom {
  int64_t n, c, hw;
  int64_t count() const { return n * hw; }
};

namespace batch_norm_checks {

// The dtype of statistics and affine parameters for an input dtype.
inline DType stats_dtype(DType input) { return input == DType::F64 ? DType::F64 : DType::F32; }

inline void check_param(const TensorRef& t, const char* name, const BnGeom& g, DType want, const char* op) {
  if (!t.defined()) return;
  DEMI_CHECK(t.dtype == want, op, ": ", name, " must be ", want, " for this input, got ", t.dtype,
             " (statistics and affine parameters stay fp32 for half inputs)");
  DEMI_CHECK(t.numel() == g.c, op, ": ", name, " must have C = ", g.c, " elements, got shape ", t.shape);
}

inline void check_like(const TensorRef& t, const TensorRef& x, const char* name, const char* op) {
  if (!t.defined()) return;
  DEMI_CHECK(t.shape == x.shape && t.dtype == x.dtype, op, ": ", name, " must match the input (", x.shape, " ",
             x.dtype, "), got ", t.shape, " ", t.dtype);
}

inline BnGeom check_input(const TensorRef& x, const char* op) {
  DEMI_CHECK(x.shape.size() == 2 || x.shape.size() == 4, op, ": input must be [N, C] or [N, C, H, W], got ",
             x.shape);
  DEMI_CHECK(is_floating(x.dtype), op, ": input must be floating, got ", x.dtype);
  DEMI_CHECK(x.numel() == 0 || x.defined(), op, ": input is undefined");
  return {x.shape[0], x.shape[1], x.shape.size() == 4 ? x.shape[2] * x.shape[3] : 1};
}

// A fused activation's coefficients: [4, C] in the statistics' dtype, training mode only; a fused
// GELU takes fp32 or half inputs (fp64's GELU is a separate op).
inline void check_activation(const BatchNormArgs& args, const BnGeom& g, DType s, const char* op) {
  if (args.activation == BatchNormActivation::None) return;
  const char* name = args.activation == BatchNormActivation::Relu ? "ReLU" : "GELU";
  DEMI_CHECK(args.mode == BatchNormMode::Train, op, ": a fused ", name, " needs training mode (in eval, apply it "
             "after batch_norm)");
  DEMI_CHECK(args.activation != BatchNormActivation::Gelu || args.input.dtype != DType::F64, op,
             ": a fused GELU takes float32, float16 or bfloat16 input, got float64; apply gelu after batch_norm");
  DEMI_CHECK(args.activation_coef.defined() && args.activation_coef.shape == Shape({4, g.c}) &&
                 args.activation_coef.dtype == s,
             op, ": a fused ", name, " needs activation_coef of shape [4, ", g.c, "] and dtype ", s, ", got ",
             args.activation_coef.defined() ? args.activation_coef.shape : Shape{}, " ", args.activation_coef.dtype);
}

}  // namespace batch_norm_checks

inline BnGeom check_batch_norm_forward(const BatchNormArgs& args) {
  using namespace batch_norm_checks;
  constexpr const char* op = "batch_norm_forward";
  const BnGeom g = check_input(args.input, op);
  DEMI_CHECK(args.output.defined() || args.input.numel() == 0, op, ": output is undefined");
  check_like(args.output, args.input, "output", op);
  const DType s = stats_dtype(args.input.dtype);
  check_param(args.weight, "weight", g, s, op);
  check_param(args.bias, "bias", g, s, op);
  check_param(args.running_mean, "running_mean", g, s, op);
  check_param(args.running_var, "running_var", g, s, op);
  if (args.mode == BatchNormMode::Train) {
    check_param(args.save_mean, "save_mean", g, s, op);
    check_param(args.save_invstd, "save_invstd", g, s, op);
    DEMI_CHECK(g.count() > 1, op, ": training needs more than one value per channel to estimate a variance, got input ",
               args.input.shape, "; use a larger batch or eval mode");
  } else {
    DEMI_CHECK(args.running_mean.defined() && args.running_var.defined(), op,
               ": eval mode normalises with running_mean and running_var; pass both");
  }
  check_activation(args, g, s, op);
  return g;
}

inline BnGeom check_batch_norm_backward(const BatchNormArgs& args) {
  using namespace batch_norm_checks;
  constexpr const char* op = "batch_norm_backward";
  const BnGeom g = check_input(args.input, op);
  DEMI_CHECK(args.grad_output.defined() || args.input.numel() == 0, op, ": grad_output is undefined");
  check_like(args.grad_output, args.input, "grad_output", op);
  check_like(args.grad_input, args.input, "grad_input", op);
  const DType s = stats_dtype(args.input.dtype);
  check_param(args.weight, "weight", g, s, op);
  check_param(args.grad_weight, "grad_weight", g, s, op);
  check_param(args.grad_bias, "grad_bias", g, s, op);
  check_param(args.save_mean, "save_mean", g, s, op);
  check_param(args.save_invstd, "save_invstd", g, s, op);
  DEMI_CHECK(args.save_mean.defined() && args.save_invstd.defined(), op,
             ": needs save_mean and save_invstd from the training-mode forward");
  check_activation(args, g, s, op);
  return g;
}

// --- softmax -------------------------------------------------------------------------------------

inline const char* softmax_name(SoftmaxKind k) { return k == SoftmaxKind::Softmax ? "softmax" : "log_softmax"; }

// Rows of the last dim: a 0-d tensor is one row of one element, as in PyTorch.
inline int64_t softmax_row_length(const Shape& s) { return s.empty() ? 1 : s.back(); }

inline void check_same_shape_dtype(const char* op, const char* what_a, const TensorRef& a, const char* what_b,
                                   const TensorRef& b) {
  DEMI_CHECK(a.shape == b.shape && a.dtype == b.dtype, op, ": ", what_a, " ", a.shape, " (", a.dtype,
             ") and ", what_b, " ", b.shape, " (", b.dtype, ") must have the same shape and dtype");
}

inline void check_softmax_forward(SoftmaxKind kind, const TensorRef& x, const TensorRef& y) {
  check_same_shape_dtype(softmax_name(kind), "x", x, "y", y);
}

inline void check_softmax_backward(SoftmaxKind kind, const TensorRef& y, const TensorRef& grad_y,
                                   const TensorRef& grad_x) {
  check_same_shape_dtype(softmax_name(kind), "y", y, "grad_y", grad_y);
  check_same_shape_dtype(softmax_name(kind), "y", y, "grad_x", grad_x);
}

// --- cross_entropy -------------------------------------------------------------------------------

// Shapes, dtypes and label smoothing shared by forward and backward. The labels' values are each
// backend's to check (the CPU reads them here and now, CUDA on the device).
inline void check_cross_entropy_inputs(const char* op, const CrossEntropyArgs& args) {
  const TensorRef& logits = args.logits;
  const TensorRef& target = args.target;
  DEMI_CHECK(logits.shape.size() == 2, op, ": logits must be [N, K], got ", logits.shape,
             "; flatten the leading dims first");
  DEMI_CHECK(is_floating(logits.dtype), op, ": logits must be floating, got ", logits.dtype);
  DEMI_CHECK(target.dtype == DType::I64, op, ": target must be int64 class indices, got ", target.dtype);
  DEMI_CHECK(target.shape == Shape{logits.shape[0]}, op, ": target ", target.shape,
             " must be [N] for logits ", logits.shape);
  DEMI_CHECK(args.label_smoothing >= 0.0 && args.label_smoothing <= 1.0, op,
             ": label_smoothing must be in [0, 1], got ", args.label_smoothing);
}

// Appended by both backends to the message for a negative label: PyTorch's default ignore_index is
// -100, and a user coming from it may have padded with that.
inline constexpr const char* kNoIgnoreIndex =
    " (demi's cross_entropy has no ignore_index: leave out the rows to ignore)";

// The dtype of the loss: F64 for F64 logits, else F32.
inline DType cross_entropy_loss_dtype(DType logits) { return logits == DType::F64 ? DType::F64 : DType::F32; }

// The forward's output: a 0-d loss of cross_entropy_loss_dtype.
inline void check_cross_entropy_loss(const char* op, const CrossEntropyArgs& args) {
  const DType loss_dtype = cross_entropy_loss_dtype(args.logits.dtype);
  DEMI_CHECK(args.loss.defined() && args.loss.shape.empty() && args.loss.dtype == loss_dtype, op,
             ": loss must be a 0-d ", loss_dtype, " tensor for ", args.logits.dtype, " logits, got ",
             args.loss.shape, " ", args.loss.dtype);
}

// The backward's grad_logits (like logits) and grad_loss (0-d).
inline void check_cross_entropy_grads(const char* op, const CrossEntropyArgs& args) {
  DEMI_CHECK(args.grad_logits.defined() && args.grad_logits.shape == args.logits.shape &&
                 args.grad_logits.dtype == args.logits.dtype,
             op, ": grad_logits must be ", args.logits.shape, " ", args.logits.dtype, " like logits, got ",
             args.grad_logits.shape, " ", args.grad_logits.dtype);
  DEMI_CHECK(args.grad_loss.defined() && args.grad_loss.numel() == 1 && args.grad_loss.shape.empty(), op,
             ": grad_loss must be a 0-d tensor, got ", args.grad_loss.shape);
}

// --- random --------------------------------------------------------------------------------------

inline void check_random(const RandomArgs& args) {
  const bool uniform = args.kind == RandomKind::Uniform;
  DEMI_CHECK(is_floating(args.output.dtype), "random: the output must be floating, got ", args.output.dtype,
             "; draw floats and cast");
  DEMI_CHECK(std::isfinite(args.a) && std::isfinite(args.b), "random: a = ", args.a, " and b = ", args.b,
             " must be finite");
  DEMI_CHECK(!uniform || args.a <= args.b, "random uniform: needs a <= b for [a, b), got a = ", args.a,
             ", b = ", args.b);
  DEMI_CHECK(uniform || args.b >= 0.0, "random normal: the standard deviation b must be >= 0, got ", args.b);
}

// --- dropout, embedding --------------------------------------------------------------------------

// What dropout's kernels take from p: element i is kept when the 24 bits behind its uniform u24
// (Philox word x0 >> 8) are below keep_below, which is exactly u24 < 1 - p (1 - p in double; the
// scaling by 2^24 is exact); a kept element is multiplied by 1 / keep, computed in the kernel's
// arithmetic type (as PyTorch's 1 / (1 - p)).
struct DropoutMask {
  uint32_t keep_below = 0;  // in [0, 2^24]: 0 drops everything, 2^24 keeps everything
  double keep = 1.0;        // 1 - p
};

inline DropoutMask check_dropout(const DropoutArgs& args) {
  DEMI_CHECK(args.p >= 0.0 && args.p <= 1.0, "dropout: p must be in [0, 1], got p = ", args.p);
  DEMI_CHECK(is_floating(args.input.dtype), "dropout: input must be floating, got ", args.input.dtype);
  DEMI_CHECK(args.output.dtype == args.input.dtype && args.output.numel() == args.input.numel(), "dropout: input ",
             args.input.shape, " ", args.input.dtype, " and output ", args.output.shape, " ", args.output.dtype,
             " must share dtype and number of elements");
  DropoutMask mask;
  mask.keep = 1.0 - args.p;
  mask.keep_below = static_cast<uint32_t>(std::ceil(mask.keep * 0x1p24));
  return mask;
}

// weight [V, D] floating, indices I64, and `rows` (output or grad_output) of M * D elements in
// weight's dtype; the backward's padding_idx in [-1, V).
inline void check_embedding(const char* op, const TensorRef& weight, const TensorRef& indices, const TensorRef& rows,
                            int64_t padding_idx) {
  DEMI_CHECK(weight.shape.size() == 2 && is_floating(weight.dtype), op, ": weight must be a floating [num_embeddings, "
             "embedding_dim] matrix, got ", weight.shape, " ", weight.dtype);
  DEMI_CHECK(indices.dtype == DType::I64, op, ": indices must be int64, got ", indices.dtype);
  DEMI_CHECK(rows.dtype == weight.dtype && rows.numel() == indices.numel() * weight.shape[1], op, ": rows ", rows.shape,
             " ", rows.dtype, " must hold one ", weight.dtype, " row of ", weight.shape[1], " per index (",
             indices.numel(), " indices)");
  DEMI_CHECK(padding_idx >= -1 && padding_idx < weight.shape[0], op, ": padding_idx ", padding_idx,
             " must be -1 (none) or in [0, ", weight.shape[0], ")");
}

// The error for an index outside [0, V): its value, its position in indices and the range.
[[noreturn]] inline void throw_embedding_index(const char* op, const Shape& indices_shape, int64_t flat, int64_t index,
                                               int64_t V) {
  Shape position(indices_shape.size());
  for (size_t d = indices_shape.size(); d-- > 0;) {
    position[d] = flat % indices_shape[d];
    flat /= indices_shape[d];
  }
  DEMI_THROW(op, ": index ", index, " at position ", position, " of indices ", indices_shape,
             " is out of range for ", V, " embeddings; indices must be in [0, ", V, ")");
}

}  // namespace demi::backend
