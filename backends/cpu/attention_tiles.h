// The CPU attention kernels' shared internals (attention.cpp, attention_backward.cpp): scratch
// carving, the small products on the packed GEMM's tiles, and the scores' scale, mask and causal cut.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/attention_checks.h"
#include "backends/cpu/attention.h"
#include "backends/cpu/common.h"
#include "backends/kernels.h"

namespace demi::backend::cpu::attention {

// Whether bf16 products of two input operands (q k^T, and backward's grad_out v^T) take the ISA
// level's bf16 tile; every product with an fp32 operand (probabilities, score gradients) runs on
// the fp32 tile.
bool bf16_tile(DType dtype, int64_t E, int64_t Ev);

// Per-thread scratch, carved in 64-byte aligned pieces; with a null base only counts the bytes.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename X>
  X* take(int64_t n) {
    X* p = base_ ? reinterpret_cast<X*>(base_ + used_) : nullptr;
    used_ += (static_cast<size_t>(n > 0 ? n : 1) * sizeof(X) + 63) / 64 * 64;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// Small products of row-major operands (leading dims given), C (m x n) = or += (accumulate):
//   mm_nt: A (m x k) B^T, B n x k;  mm_nn: A (m x k) B, B k x n;  mm_tn: A^T B with A stored k x m.
// fp32 (C = float) on the level's packed tile (A packed into `pack`, pack_size(m, k) floats), fp64
// (C = double) on Eigen; defined for those two.
template <typename C>
void mm_nt(const C* a, int64_t lda, int64_t m, const C* b, int64_t ldb, int64_t n, int64_t k, C* c, int64_t ldc,
           bool accumulate, C* pack);
template <typename C>
void mm_nn(const C* a, int64_t lda, int64_t m, int64_t k, const C* b, int64_t ldb, int64_t n, C* c, int64_t ldc,
           bool accumulate, C* pack);
template <typename C>
void mm_tn(const C* a, int64_t lda, int64_t m, int64_t k, const C* b, int64_t ldb, int64_t n, C* c, int64_t ldc,
           bool accumulate, C* pack);
// Floats (doubles) of `pack` the products above need for A of at most m x k.
int64_t pack_size(int64_t m, int64_t k);
// C (m x n, fp32) = A B^T for bf16 A (m x k) and B (n x k), exact products summed in fp32 on the
// level's bf16 tile: A packed into a_pack (bf16_a_size), B into pairs in b_pack (bf16_b_size).
void mm_nt_bf16(const uint16_t* a, int64_t lda, int64_t m, const uint16_t* b, int64_t ldb, int64_t n, int64_t k,
                float* c, int64_t ldc, uint16_t* a_pack, uint16_t* b_pack);
int64_t bf16_a_size(int64_t m, int64_t k);
int64_t bf16_b_size(int64_t n, int64_t k);

// n values of a tensor of type T from `src` into C (a copy when T is C, else widened).
template <typename T, typename C>
const C* as_compute(const T* src, int64_t n, C* buffer) {
  if constexpr (std::is_same_v<T, C>) {
    return src;
  } else {
    convert_n(src, buffer, n);
    return buffer;
  }
}

// exp(x - shift) for a row, 0 below the normal range: Eigen's vectorised exp clamps there (it gave
// 2.9e-39 for exp(-inf)), and such terms are below 1e-38 of the row's largest, which is 1. Two
// passes that vectorise: Eigen 3.4's select() runs element by element, through scalar expf.
template <typename C>
void exp_shifted(C* x, const C* shift, bool per_element, int64_t n) {
  using Array = Eigen::Array<C, Eigen::Dynamic, 1>;
  Eigen::Map<Array> v(x, n);
  if (per_element) {
    v = (v - Eigen::Map<const Array>(shift, n)).exp();
  } else {
    v = (v - *shift).exp();
  }
  const C tiny = std::numeric_limits<C>::min();
  for (int64_t j = 0; j < n; ++j) x[j] = x[j] < tiny ? C(0) : x[j];
}

// What turns a tile of q k^T into logits: times scale, plus the mask (a U8 mask as 0 / -inf, the
// way torch turns a bool mask into an additive one), -inf past the causal diagonal.
struct Logits {
  const AttnGeom& g;
  const TensorRef& mask;
  double scale;
  bool causal;
  // The tile's rows are queries row0.. and its columns keys col0.. (keys_in_rows: the other way
  // round, backward's transposed tiles); b is the (batch, head) index. mask_row: cols values.
  template <typename C>
  void apply(C* s, int64_t ld, int64_t rows, int64_t cols, int64_t row0, int64_t col0, bool keys_in_rows, int64_t b,
             C* mask_row) const;
};

// One row of the mask, as additive values of type C: n values from `offset`, `step` apart.
template <typename C>
void load_mask(const TensorRef& mask, int64_t offset, int64_t step, int64_t n, C* dst) {
  if (mask.dtype == DType::U8) {
    const uint8_t* m = mask.as<uint8_t>() + offset;
    for (int64_t j = 0; j < n; ++j) dst[j] = m[j * step] ? C(0) : -std::numeric_limits<C>::infinity();
    return;
  }
  dispatch_floating(mask.dtype, "attention", [&](auto tag) {
    using M = decltype(tag);
    const M* m = mask.as<M>() + offset;
    if (step == 1) {
      convert_n(m, dst, n);
    } else {
      for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<C>(static_cast<acc_t<M>>(m[j * step]));
    }
  });
}

template <typename C>
void Logits::apply(C* s, int64_t ld, int64_t rows, int64_t cols, int64_t row0, int64_t col0, bool keys_in_rows,
                   int64_t b, C* mask_row) const {
  using Array = Eigen::Array<C, Eigen::Dynamic, 1>;
  const C c_scale = static_cast<C>(scale), inf = std::numeric_limits<C>::infinity();
  const int64_t base = g.has_mask ? g.mask_offset(b) : 0;
  const int64_t row_step = keys_in_rows ? g.mask_s : g.mask_l, col_step = keys_in_rows ? g.mask_l : g.mask_s;
  for (int64_t r = 0; r < rows; ++r) {
    Eigen::Map<Array> row(s + r * ld, cols);
    row *= c_scale;
    if (g.has_mask) {
      load_mask(mask, base + (row0 + r) * row_step + col0 * col_step, col_step, cols, mask_row);
      row += Eigen::Map<const Array>(mask_row, cols);
    }
    if (causal) {  // key > query is cut
      const int64_t at = row0 + r - col0;  // the diagonal's column in this row
      if (keys_in_rows) {
        std::fill(s + r * ld, s + r * ld + std::clamp<int64_t>(at, 0, cols), -inf);
      } else {
        std::fill(s + r * ld + std::clamp<int64_t>(at + 1, 0, cols), s + r * ld + cols, -inf);
      }
    }
  }
}

}  // namespace demi::backend::cpu::attention
