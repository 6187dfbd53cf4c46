// affine: y = alpha * x + beta, the one op behind tensor-scalar + - * /; grad_x = alpha * grad_y.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Affine {
  static constexpr const char* kName = "affine";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  static Tensor forward(OpContext& ctx, const Tensor& x, double alpha, double beta) {
    check_floating(kName, "input", x);
    ctx.set_attrs(alpha);
    return unary_kernel(backend::UnaryKind::Affine, x, alpha, beta);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    return {affine(grad_y, ctx.attrs<double>(), 0.0)};
  }
};
DEMI_REGISTER_OP(Affine)

}  // namespace demi::ops

namespace demi {
Tensor affine(const Tensor& x, double alpha, double beta) { return ops::apply<ops::Affine>(x, alpha, beta); }
Tensor operator+(const Tensor& x, double s) { return affine(x, 1.0, s); }
Tensor operator+(double s, const Tensor& x) { return affine(x, 1.0, s); }
Tensor operator-(const Tensor& x, double s) { return affine(x, 1.0, -s); }
Tensor operator-(double s, const Tensor& x) { return affine(x, -1.0, s); }
Tensor operator*(const Tensor& x, double s) { return affine(x, s, 0.0); }
Tensor operator*(double s, const Tensor& x) { return affine(x, s, 0.0); }
Tensor operator/(const Tensor& x, double s) { return affine(x, 1.0 / s, 0.0); }
Tensor operator/(double s, const Tensor& x) { return affine(pow(x, -1.0), s, 0.0); }
}  // namespace demi
