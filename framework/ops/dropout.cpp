// dropout: in training, zeroes each element with probability p and scales the others by
// 1 / (1 - p), as torch.nn.functional.dropout. The mask is a function of (seed, offset, p) in the
// counter-based Philox stream, so the op keeps those three numbers, not the mask, and the backward
// draws the same mask again (backends/kernels.h, DropoutArgs).
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Dropout {
  static constexpr const char* kName = "dropout";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  // Everything the mask depends on.
  struct Mask {
    double p;
    uint64_t seed, offset;
  };

  static Tensor forward(OpContext& ctx, const Tensor& x, const Mask& mask) {
    Tensor y = empty_like(x);
    run(x, y, mask);
    ctx.set_attrs(mask);
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    Tensor grad_x = empty_like(grad_y);
    run(grad_y, grad_x, ctx.attrs<Mask>());
    return {grad_x};
  }

 private:
  static void run(const Tensor& in, const Tensor& out, const Mask& mask) {
    backend::DropoutArgs args;
    args.input = in.ref();
    args.output = out.ref();
    args.p = mask.p;
    args.seed = mask.seed;
    args.offset = mask.offset;
    kernels(in).dropout(args);
  }
};
DEMI_REGISTER_OP(Dropout)

}  // namespace demi::ops

namespace demi {
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  DEMI_CHECK(p >= 0.0 && p <= 1.0, "dropout: p is the probability of zeroing an element and must be in [0, 1], "
             "got p = ", p);
  ops::check_floating("dropout", "input", x);
  if (p == 0.0 || !training || x.numel() == 0) return x;  // PyTorch returns its input itself too
  const ops::Dropout::Mask mask{p, gen.seed(), gen.advance(static_cast<uint64_t>(x.numel()))};
  return ops::apply<ops::Dropout>(x, mask);
}
Tensor dropout(const Tensor& x, double p, bool training) {
  DEMI_CHECK(x.defined(), "dropout: input is an undefined tensor");
  return dropout(x, p, training, default_generator(x.device()));
}
}  // namespace demi
