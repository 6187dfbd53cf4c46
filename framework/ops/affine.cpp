// affine: y = alpha * x + beta, the one op behind tensor-scalar + - * /; grad_x = alpha * grad_y.
// A product alone adds kNoShift = -0, which leaves every value as it is (x * 2 + 0 would turn -0
// into +0; PyTorch's x * 2 keeps -0).
// Division by a scalar is a true division, y = x / s (PyTorch rounds x / 3 once; x * (1/3) is off
// by an ulp in a third of the values), with grad_x = grad_y / s.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {
constexpr double kNoShift = -0.0;

struct Affine {
  static constexpr const char* kName = "affine";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  // divide: y = x / alpha (beta must be 0).
  static Tensor forward(OpContext& ctx, const Tensor& x, double alpha, double beta, bool divide) {
    check_floating(kName, "input", x);
    ctx.set_attrs(std::make_pair(alpha, divide));
    return divide ? unary_kernel(backend::UnaryKind::DivScalar, x, alpha)
                  : unary_kernel(backend::UnaryKind::Affine, x, alpha, beta);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [alpha, divide] = ctx.attrs<std::pair<double, bool>>();
    return {divide ? grad_y / alpha : affine(grad_y, alpha, kNoShift)};
  }
};
DEMI_REGISTER_OP(Affine)

}  // namespace demi::ops

namespace demi {
Tensor affine(const Tensor& x, double alpha, double beta) { return ops::apply<ops::Affine>(x, alpha, beta, false); }
Tensor operator+(const Tensor& x, double s) { return affine(x, 1.0, s); }
Tensor operator+(double s, const Tensor& x) { return affine(x, 1.0, s); }
Tensor operator-(const Tensor& x, double s) { return affine(x, 1.0, -s); }
Tensor operator-(double s, const Tensor& x) { return affine(x, -1.0, s); }
Tensor operator*(const Tensor& x, double s) { return affine(x, s, ops::kNoShift); }
Tensor operator*(double s, const Tensor& x) { return affine(x, s, ops::kNoShift); }
Tensor operator/(const Tensor& x, double s) { return ops::apply<ops::Affine>(x, s, 0.0, true); }
Tensor operator/(double s, const Tensor& x) { return affine(pow(x, -1.0), s, ops::kNoShift); }  // PyTorch's reciprocal(x) * s
}  // namespace demi
