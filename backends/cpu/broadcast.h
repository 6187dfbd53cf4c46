// Broadcasting for the CPU's element-wise kernels with several operands (binary in elementwise.cpp,
// where in where.cpp): each operand's element strides in y's index space, y's dimensions merged
// where every operand steps through them uniformly, and a walk over y's rows.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/shape.h"

namespace demi::backend::cpu {

// Strides of contiguous `s` (right-aligned against y, 0 where it broadcasts); throws if it cannot
// broadcast. `op` and `name` word the message ("binary(add)", "a").
inline std::vector<int64_t> broadcast_strides(const char* op, const char* name, const Shape& s, const Shape& y) {
  DEMI_CHECK(s.size() <= y.size(), op, ": ", name, " ", s, " has more dimensions than y ", y,
             "; y must have the broadcast shape of the operands");
  std::vector<int64_t> strides(y.size(), 0);
  const size_t lead = y.size() - s.size();
  int64_t stride = 1;
  for (size_t i = s.size(); i-- > 0;) {
    DEMI_CHECK(s[i] == y[lead + i] || s[i] == 1, op, ": ", name, " ", s, " cannot broadcast to y ", y,
               " (dimension ", lead + i, " of y is ", y[lead + i], ", ", name, " has ", s[i],
               "); each extent must equal y's or be 1");
    strides[lead + i] = s[i] == 1 ? 0 : stride;
    stride *= s[i];
  }
  return strides;
}

// y's dimensions after dropping extent-1 ones and merging neighbours that every operand steps
// through uniformly, outermost first. Same shapes collapse to one dimension, [N, C, H, W] with
// [1, C, 1, 1] to [N, C, H*W], a scalar to one dimension of stride 0.
template <size_t N>
struct BroadcastPlan {
  std::vector<int64_t> extent;
  std::array<std::vector<int64_t>, N> stride;  // per operand, per merged dimension
};

template <size_t N>
BroadcastPlan<N> plan_broadcast(const char* op, const std::array<const char*, N>& names,
                                const std::array<const Shape*, N>& shapes, const Shape& y) {
  std::array<std::vector<int64_t>, N> s;
  for (size_t k = 0; k < N; ++k) s[k] = broadcast_strides(op, names[k], *shapes[k], y);
  BroadcastPlan<N> p;
  for (size_t d = 0; d < y.size(); ++d) {
    if (y[d] == 1) continue;
    bool merge = !p.extent.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = p.stride[k].back() == s[k][d] * y[d];
    if (merge) {
      p.extent.back() *= y[d];
      for (size_t k = 0; k < N; ++k) p.stride[k].back() = s[k][d];
    } else {
      p.extent.push_back(y[d]);
      for (size_t k = 0; k < N; ++k) p.stride[k].push_back(s[k][d]);
    }
  }
  if (p.extent.empty()) {
    p.extent = {1};
    for (size_t k = 0; k < N; ++k) p.stride[k] = {0};
  }
  return p;
}

// Calls row(offsets, pos, len) for the pieces of rows (innermost merged dimension) that make up y's
// elements [begin, end): y[pos, pos + len) reads operand k from element offsets[k] on, stepping by
// p.stride[k].back(). One division chain finds where `begin` lies; rows then advance an odometer.
template <size_t N, typename Row>
void for_each_row(const BroadcastPlan<N>& p, int64_t begin, int64_t end, Row row) {
  const int outer = static_cast<int>(p.extent.size()) - 1;
  const int64_t inner = p.extent.back();
  std::vector<int64_t> idx(static_cast<size_t>(outer), 0);
  std::array<int64_t, N> off{};
  int64_t rest = begin / inner, col = begin % inner;
  for (int d = outer - 1; d >= 0; --d) {
    idx[d] = rest % p.extent[d];
    rest /= p.extent[d];
    for (size_t k = 0; k < N; ++k) off[k] += idx[d] * p.stride[k][d];
  }
  for (int64_t pos = begin; pos < end;) {
    const int64_t len = std::min(inner - col, end - pos);
    std::array<int64_t, N> at;
    for (size_t k = 0; k < N; ++k) at[k] = off[k] + col * p.stride[k].back();
    row(at, pos, len);
    pos += len;
    col = 0;
    for (int d = outer - 1; d >= 0; --d) {
      for (size_t k = 0; k < N; ++k) off[k] += p.stride[k][d];
      if (++idx[d] < p.extent[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= p.stride[k][d] * p.extent[d];
      idx[d] = 0;
    }
  }
}

}  // namespace demi::backend::cpu
