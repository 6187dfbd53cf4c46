// permute, unsqueeze, squeeze and expand with PyTorch's shapes, values, negative dims and errors
// (unsqueeze / squeeze are views sharing storage; permute and expand are copies, as transpose is),
// and every element-wise binary op broadcasting as torch does, against a hand-indexed reference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

std::vector<float> values(const Tensor& t) { return t.to(DType::F32).to_vector<float>(); }

Tensor iota(const Shape& s, DType dtype = DType::F32) {
  return arange(0, static_cast<double>(shape_numel(s)), 1, dtype).reshape(s);
}

TEST(Layout, PermuteReordersDims) {
  const Tensor x = iota({2, 3, 4});
  const Tensor y = permute(x, {2, 0, 1});
  ASSERT_EQ(y.shape(), (Shape{4, 2, 3}));
  const std::vector<float> got = values(y);
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(got[static_cast<size_t>((k * 2 + i) * 3 + j)], 12 * i + 4 * j + k);
  EXPECT_EQ(values(x.permute({-1, 0, -2})), values(y));  // negative dims count from the end
  EXPECT_EQ(values(permute(x, {1, 0, 2})), values(transpose(x, 0, 1)));
  EXPECT_TRUE(permute(x, {0, 1, 2}).is_same(x));  // the identity: x itself (PyTorch: a view)
  EXPECT_EQ(permute(iota({2, 3}, DType::I64), {1, 0}).to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  // the gradient is permuted back
  Tensor w = iota({2, 3, 4}).requires_grad_();
  sum(permute(w, {2, 0, 1}) * iota({4, 2, 3})).backward();
  EXPECT_EQ(values(w.grad()), values(permute(iota({4, 2, 3}), {1, 2, 0})));
  EXPECT_THAT(error_of([&] { permute(x, {0, 1}); }), HasSubstr("permute: dims [0, 1] must name each of the 3 dims"));
  EXPECT_THAT(error_of([&] { permute(x, {0, 1, 1}); }), HasSubstr("permute: dim 1 appears twice in [0, 1, 1]"));
  EXPECT_THAT(error_of([&] { permute(x, {0, 1, 3}); }), HasSubstr("permute: dim 3 out of range"));
}

TEST(Layout, UnsqueezeAndSqueezeAreViews) {
  const Tensor x = iota({2, 3});
  EXPECT_EQ(unsqueeze(x, 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(unsqueeze(x, 2).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-3).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(unsqueeze(full({}, 1.0), 0).shape(), (Shape{1}));
  const Tensor y = iota({1, 2, 1, 3});
  EXPECT_EQ(squeeze(y).shape(), (Shape{2, 3}));
  EXPECT_EQ(y.squeeze(2).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(y.squeeze(-4).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(y.squeeze(1).shape(), y.shape());  // extent 2: stays, as PyTorch
  EXPECT_EQ(squeeze(full({}, 1.0), 0).shape(), Shape{});
  EXPECT_EQ(unsqueeze(x, 1).data_ptr(), x.data_ptr());  // the same storage
  unsqueeze(x, 1).fill_(5.0);
  EXPECT_EQ(values(x), std::vector<float>(6, 5.0f));  // writes reach x
  EXPECT_THAT(error_of([&] { unsqueeze(x, 3); }), HasSubstr("unsqueeze: dim 3 out of range for a tensor of shape [2, 3]"));
  EXPECT_THAT(error_of([&] { squeeze(x, -3); }), HasSubstr("squeeze: dim -3 out of range"));
}

TEST(Layout, ExpandCopiesABroadcast) {
  const Tensor x = tensor({1, 2, 3}, {3, 1});
  const Tensor y = expand(x, {2, 3, 4});
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  std::vector<float> want;
  for (int i = 0; i < 2; ++i)
    for (float v : {1.0f, 2.0f, 3.0f}) want.insert(want.end(), 4, v);
  EXPECT_EQ(values(y), want);
  EXPECT_EQ(x.expand({-1, 2}).shape(), (Shape{3, 2}));  // -1 keeps the extent
  EXPECT_EQ(expand(x, {0, 3, 1}).shape(), (Shape{0, 3, 1}));
  EXPECT_TRUE(expand(x, {3, 1}).is_same(x));
  EXPECT_EQ(expand(tensor(std::vector<int64_t>{7}, {1}), {3}).to_vector<int64_t>(), (std::vector<int64_t>{7, 7, 7}));
  const std::vector<float> zero = values(expand(full({1}, -0.0), {2}));
  EXPECT_TRUE(std::signbit(zero[1]));  // the bits of x
  y.fill_(0.0);  // a copy: x is untouched (PyTorch's view would share it)
  EXPECT_EQ(values(x), (std::vector<float>{1, 2, 3}));
  Tensor w = tensor({1, 2, 3}, {3, 1}).requires_grad_();
  sum(expand(w, {2, 3, 4}) * iota({2, 3, 4})).backward();  // summed back over the copies
  EXPECT_EQ(values(w.grad()), (std::vector<float>{6 + 54, 22 + 70, 38 + 86}));
  EXPECT_THAT(error_of([&] { expand(x, {3, 2, -1}); }), HasSubstr("expand: dim 0 of the tensor of shape [3, 1] has extent 3"));
  EXPECT_THAT(error_of([&] { expand(x, {4}); }), HasSubstr("expand: the shape [4] has fewer dims than the tensor's [3, 1]"));
  EXPECT_THAT(error_of([&] { expand(x, {-1, 3, 1}); }), HasSubstr("expand: the new leading dim 0 has extent -1"));
}

// y[i] = op(a[ia(i)], b[ib(i)]) by explicit numpy indexing, for a and b broadcast to y.
std::vector<float> broadcast_reference(const Tensor& a, const Tensor& b, const Shape& y,
                                       const std::function<float(float, float)>& op) {
  const std::vector<float> va = values(a), vb = values(b);
  std::vector<float> out(static_cast<size_t>(shape_numel(y)));
  for (size_t i = 0; i < out.size(); ++i) {
    auto offset = [&](const Shape& s) {
      int64_t off = 0, rest = static_cast<int64_t>(i);
      std::vector<int64_t> coord(y.size());
      for (size_t d = y.size(); d-- > 0;) {
        coord[d] = rest % y[d];
        rest /= y[d];
      }
      for (size_t k = 0; k < s.size(); ++k) off = off * s[k] + (s[k] == 1 ? 0 : coord[y.size() - s.size() + k]);
      return static_cast<size_t>(off);
    };
    out[i] = op(va[offset(a.shape())], vb[offset(b.shape())]);
  }
  return out;
}

TEST(Layout, EveryBinaryOpBroadcastsAsTorch) {
  struct Pair {
    Shape a, b, y;
  };
  const std::vector<Pair> pairs = {{{2, 1, 3}, {4, 1}, {2, 4, 3}}, {{3}, {2, 3}, {2, 3}}, {{}, {2, 2}, {2, 2}},
                                   {{5, 1}, {1, 6}, {5, 6}},       {{1}, {0}, {0}},       {{2, 0}, {1}, {2, 0}},
                                   {{1, 1}, {}, {1, 1}}};
  using F = std::function<float(float, float)>;
  const std::vector<std::tuple<const char*, std::function<Tensor(const Tensor&, const Tensor&)>, F>> ops = {
      {"add", [](auto& a, auto& b) { return a + b; }, [](float a, float b) { return a + b; }},
      {"sub", [](auto& a, auto& b) { return a - b; }, [](float a, float b) { return a - b; }},
      {"mul", [](auto& a, auto& b) { return a * b; }, [](float a, float b) { return a * b; }},
      {"div", [](auto& a, auto& b) { return a / b; }, [](float a, float b) { return a / b; }},
      {"lt", [](auto& a, auto& b) { return a < b; }, [](float a, float b) { return float(a < b); }},
      {"eq", [](auto& a, auto& b) { return a == b; }, [](float a, float b) { return float(a == b); }},
      {"where", [](auto& a, auto& b) { return where(a > 0.0, a, b); }, [](float a, float b) { return a > 0 ? a : b; }},
  };
  Generator gen(5);
  for (const Pair& p : pairs) {
    const Tensor a = randn(p.a, gen), b = randn(p.b, gen) + 3.0;
    for (const auto& [name, op, ref] : ops) {
      SCOPED_TRACE(std::string(name) + " of " + testing::PrintToString(p.a) + " and " + testing::PrintToString(p.b));
      const Tensor y = op(a, b);
      ASSERT_EQ(y.shape(), p.y);
      EXPECT_EQ(values(y), broadcast_reference(a, b, p.y, ref));
      EXPECT_EQ(op(b, a).shape(), p.y);  // either order
    }
  }
}

}  // namespace
}  // namespace demi
