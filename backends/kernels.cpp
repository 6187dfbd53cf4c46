// The kernel entry points of backends/kernels.h: each checks its arguments with the checks every
// backend shares (kernel_checks.h), then calls the device's implementation. Here and nowhere else,
// so a new backend cannot forget a check or word it differently.
#include "backends/kernels.h"

#include <limits>

#include "backends/attention_checks.h"
#include "backends/augment_checks.h"
#include "backends/kernel_checks.h"
#include "backends/layer_norm_checks.h"

namespace demi::backend {
namespace {

// The one way a kernel could read NHWC bytes as NCHW: a backend without NHWC kernels handed the flag.
void check_channels_last(const Kernels& k, bool channels_last, const char* op) {
  DEMI_INTERNAL_CHECK(!channels_last || k.supports(KernelFamily::ChannelsLast), op, ": the ", k.device(),
                      " backend has no channels_last kernels; the op should have passed contiguous tensors");
}

void check_fused_activation(const Kernels& k, BatchNormActivation activation) {
  DEMI_CHECK(activation != BatchNormActivation::Relu || k.supports(KernelFamily::BatchNormRelu), "batch_norm: the ",
             k.device(), " backend has no fused ReLU; call relu(batch_norm(...)) (demi::batch_norm_relu does so on "
             "such devices)");
  DEMI_CHECK(activation != BatchNormActivation::Gelu || k.supports(KernelFamily::BatchNormGelu), "batch_norm: the ",
             k.device(), " backend has no fused GELU; call gelu(batch_norm(...)) (demi::batch_norm_gelu does so on "
             "such devices)");
}

}  // namespace

void Kernels::cast(const TensorRef& x, const TensorRef& y) {
  check_cast(x, y);
  cast_impl(x, y);
}
void Kernels::unary(UnaryKind kind, const TensorRef& x, const TensorRef& y, double alpha, double beta) {
  check_unary(kind, x, y);
  unary_impl(kind, x, y, alpha, beta);
}
void Kernels::binary(BinaryKind kind, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
  check_binary(kind, a, b, y);
  binary_impl(kind, a, b, y);
}
void Kernels::reduce(ReduceKind kind, const TensorRef& x, const TensorRef& y) {
  const ReduceDims dims = check_reduce(kind, x, y);
  reduce_impl(kind, x, y, dims);
}
void Kernels::argmax(const TensorRef& x, const TensorRef& y) {
  check_arg_reduce(false, x, y);
  argmax_impl(x, y);
}
void Kernels::permute(const TensorRef& x, const TensorRef& y, const std::vector<int64_t>& dims) {
  check_permute(x, y, dims);
  permute_impl(x, y, dims);
}
void Kernels::gemm(const GemmArgs& args) {
  check_gemm(args);
  gemm_impl(args);
}
void Kernels::conv2d_forward(const Conv2dArgs& args) {
  check_channels_last(*this, args.channels_last, "conv2d_forward");
  conv2d_forward_impl(args, check_conv2d(args, "conv2d_forward"));
}
void Kernels::conv2d_backward_data(const Conv2dArgs& args) {
  check_channels_last(*this, args.channels_last, "conv2d_backward_data");
  conv2d_backward_data_impl(args, check_conv2d(args, "conv2d_backward_data"));
}
void Kernels::conv2d_backward_weight(const Conv2dArgs& args) {
  check_channels_last(*this, args.channels_last, "conv2d_backward_weight");
  conv2d_backward_weight_impl(args, check_conv2d(args, "conv2d_backward_weight"));
}
void Kernels::pool2d_forward(const Pool2dArgs& args) {
  check_channels_last(*this, args.channels_last, "pool2d_forward");
  pool2d_forward_impl(args, check_pool2d(args, "pool2d_forward"));
}
void Kernels::pool2d_backward(const Pool2dArgs& args) {
  check_channels_last(*this, args.channels_last, "pool2d_backward");
  pool2d_backward_impl(args, check_pool2d(args, "pool2d_backward"));
}
void Kernels::batch_norm_forward(const BatchNormArgs& args) {
  const BnGeom g = check_batch_norm_forward(args);
  check_fused_activation(*this, args.activation);
  check_channels_last(*this, args.channels_last, "batch_norm_forward");
  DEMI_INTERNAL_CHECK(!args.channels_last || args.activation == BatchNormActivation::None,
                      "batch_norm_forward: channels_last with a fused activation");
  batch_norm_forward_impl(args, g);
}
void Kernels::batch_norm_backward(const BatchNormArgs& args) {
  const BnGeom g = check_batch_norm_backward(args);
  check_fused_activation(*this, args.activation);
  check_channels_last(*this, args.channels_last, "batch_norm_backward");
  DEMI_INTERNAL_CHECK(!args.channels_last || args.activation == BatchNormActivation::None,
                      "batch_norm_backward: channels_last with a fused activation");
  batch_norm_backward_impl(args, g);
}

void Kernels::softmax_forward(SoftmaxKind kind, const TensorRef& x, const TensorRef& y) {
  check_softmax_forward(kind, x, y);
  softmax_forward_impl(kind, x, y);
}
void Kernels::softmax_backward(SoftmaxKind kind, const TensorRef& y, const TensorRef& grad_y, const TensorRef& grad_x) {
  check_softmax_backward(kind, y, grad_y, grad_x);
  softmax_backward_impl(kind, y, grad_y, grad_x);
}
void Kernels::cross_entropy_forward(const CrossEntropyArgs& args) {
  check_cross_entropy_inputs("cross_entropy", args);
  check_cross_entropy_loss("cross_entropy", args);
  cross_entropy_forward_impl(args);
}
void Kernels::cross_entropy_backward(const CrossEntropyArgs& args) {
  check_cross_entropy_inputs("cross_entropy_backward", args);
  check_cross_entropy_grads("cross_entropy_backward", args);
  cross_entropy_backward_impl(args);
}
void Kernels::random(const RandomArgs& args) {
  check_random(args);
  random_impl(args);
}
void Kernels::capture_begin() {
  DEMI_THROW("graph capture: ", device(), " has no graphs (CUDA graphs need a CUDA device); run the step eagerly "
             "there, or turn the capture off (TrainStep::Options::cuda_graph, --cuda-graph)");
}
std::unique_ptr<Kernels::Graph> Kernels::capture_end() {
  DEMI_THROW("graph capture: capture_end on ", device(), ", which has no graphs");
}
void Kernels::replay(Graph&) { DEMI_THROW("graph replay: ", device(), " has no graphs"); }
void Kernels::sgd_step(const SgdArgs& args) {
  check_sgd_step(args);
  sgd_step_impl(args);
}
void Kernels::adamw_step(const AdamWArgs& args) {
  check_adamw_step(args);
  adamw_step_impl(args);
}
void Kernels::unscale_check_finite(const UnscaleArgs& args) {
  check_unscale(args);
  unscale_check_finite_impl(args);
}
void Kernels::update_scale(const ScaleUpdateArgs& args) {
  check_update_scale(args);
  update_scale_impl(args);
}
void Kernels::argmin(const TensorRef& x, const TensorRef& y) {
  check_arg_reduce(true, x, y);
  argmin_impl(x, y);
}
void Kernels::where(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
  check_where(cond, a, b, y);
  where_impl(cond, a, b, y);
}

void Kernels::dropout(const DropoutArgs& args) { dropout_impl(args, check_dropout(args)); }
void Kernels::embedding_forward(const EmbeddingArgs& args) {
  check_embedding("embedding", args.weight, args.indices, args.output, -1);
  embedding_forward_impl(args);
}
void Kernels::embedding_backward(const EmbeddingArgs& args) {
  check_embedding("embedding_backward", args.grad_weight, args.indices, args.grad_output, args.padding_idx);
  embedding_backward_impl(args);
}
void Kernels::attention_forward(const AttentionArgs& args) {
  attention_forward_impl(args, check_attention_forward(args));
}
void Kernels::attention_backward(const AttentionArgs& args) {
  attention_backward_impl(args, check_attention_backward(args));
}
// Rows of no elements are answered here, for every device: torch's mean 0 and rstd NaN (a 0 / 0
// variance) forward, nothing to write backward.
void Kernels::layer_norm_forward(const LayerNormArgs& args) {
  check_layer_norm_forward(args);
  if (args.cols == 0) {
    fill(args.mean, 0.0);
    fill(args.rstd, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  layer_norm_forward_impl(args);
}
void Kernels::layer_norm_backward(const LayerNormArgs& args) {
  check_layer_norm_backward(args);
  if (args.cols > 0) layer_norm_backward_impl(args);
}

void Kernels::augment_images(const AugmentArgs& args) {
  check_augment_images(args);
  if (args.output.numel() > 0) augment_images_impl(args);
}

}  // namespace demi::backend
