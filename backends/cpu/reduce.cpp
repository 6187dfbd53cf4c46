// Reductions (sum, mean, max, min) into a keepdim-shaped y, and argmax / argmin. Every dtype
// accumulates in double, in blocks whose boundaries do not depend on the thread count, so sums of
// millions of fp32 values stay accurate to ~1e-15 relative and a result is the same on 1 or 64 threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

constexpr int64_t kBlock = 4096;  // elements per partial result along a contiguous reduced run
constexpr int64_t kInner = 256;   // output columns one task accumulates when reducing a middle dim
// Fewer (outer, column chunk) tasks than this, over at least two blocks of kRowBlock rows, are cut
// into row blocks as well (a bias gradient: 256 columns of 32768 rows, one task otherwise). Both
// thresholds depend on the shape alone, so that the result does not depend on the thread count.
constexpr int64_t kFewTasks = 8;
constexpr int64_t kRowBlock = 1024;

// Sum (and mean) add; max and min keep the larger / smaller value and, like PyTorch, propagate NaN.
template <ReduceKind K>
struct Combine {
  static double init() {
    constexpr double inf = std::numeric_limits<double>::infinity();
    return K == ReduceKind::Max ? -inf : K == ReduceKind::Min ? inf : 0.0;
  }
  static double apply(double acc, double v) {
    if constexpr (K == ReduceKind::Max) return (v > acc || std::isnan(v)) ? v : acc;
    else if constexpr (K == ReduceKind::Min) return (v < acc || std::isnan(v)) ? v : acc;
    else return acc + v;
  }
};

template <typename T>
double load(T v) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {  // its top 16 bits: a shift GCC vectorises
    return static_cast<double>(Eigen::numext::bit_cast<float>(uint32_t{Eigen::numext::bit_cast<uint16_t>(v)} << 16));
  } else {
    return static_cast<double>(static_cast<acc_t<T>>(v));
  }
}

// n <= kBlock contiguous values, over 8 independent lanes (vectorisable, and 8x shorter chains).
template <ReduceKind K, typename T>
double reduce_block(const T* x, int64_t n) {
  using Op = Combine<K>;
  double lane[8];
  std::fill(lane, lane + 8, Op::init());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] = Op::apply(lane[j], load(x[i + j]));
  for (; i < n; ++i) lane[0] = Op::apply(lane[0], load(x[i]));
  double acc = Op::init();
  for (double v : lane) acc = Op::apply(acc, v);
  return acc;
}

template <ReduceKind K, typename T>
double reduce_run(const T* x, int64_t n) {
  double acc = Combine<K>::init();
  for (int64_t s = 0; s < n; s += kBlock) acc = Combine<K>::apply(acc, reduce_block<K>(x + s, std::min(kBlock, n - s)));
  return acc;
}

// x viewed as [O, R, I] with R the reduced extent; out is [O, I].
template <ReduceKind K, typename T>
void reduce_middle(const T* x, int64_t O, int64_t R, int64_t I, double* out) {
  using Op = Combine<K>;
  if (I == 1) {
    if (O >= omp_get_max_threads() || R < 2 * kBlock) {
      parallel_for(O, R, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) out[o] = reduce_run<K>(x + o * R, R);
      });
      return;
    }
    // Few long runs (a full reduction): split each across threads, block partials combined in
    // the same order as reduce_run, so the two branches agree bit for bit.
    const int64_t blocks = (R + kBlock - 1) / kBlock;
    std::vector<double> partial(static_cast<size_t>(blocks));
    for (int64_t o = 0; o < O; ++o) {
      const T* run = x + o * R;
      parallel_for(blocks, kBlock, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) partial[k] = reduce_block<K>(run + k * kBlock, std::min(kBlock, R - k * kBlock));
      });
      double acc = Op::init();
      for (double v : partial) acc = Op::apply(acc, v);
      out[o] = acc;
    }
    return;
  }
  // Reducing a non-innermost dim: each task owns up to kInner adjacent outputs and walks R
  // contiguous rows of them (or a block of them), so reads stay sequential and the adds vectorise
  // across columns; row blocks' partials are combined in block order.
  const int64_t chunks = (I + kInner - 1) / kInner, tasks = O * chunks;
  const int64_t row_blocks = tasks < kFewTasks && R >= 2 * kRowBlock ? (R + kRowBlock - 1) / kRowBlock : 1;
  std::vector<double> partial(row_blocks > 1 ? static_cast<size_t>(tasks * row_blocks * kInner) : 0);
  parallel_for(tasks * row_blocks, R / row_blocks * kInner, [&](int64_t b, int64_t e) {
    double acc[kInner];
    for (int64_t t = b; t < e; ++t) {
      const int64_t task = t / row_blocks, block = t % row_blocks;
      const int64_t o = task / chunks, i0 = (task % chunks) * kInner, len = std::min(kInner, I - i0);
      const int64_t r0 = row_blocks > 1 ? block * kRowBlock : 0, r1 = row_blocks > 1 ? std::min(R, r0 + kRowBlock) : R;
      std::fill(acc, acc + len, Op::init());
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = x + (o * R + r) * I + i0;
        for (int64_t i = 0; i < len; ++i) acc[i] = Op::apply(acc[i], load(row[i]));
      }
      std::copy(acc, acc + len, row_blocks > 1 ? partial.data() + t * kInner : out + o * I + i0);
    }
  });
  if (row_blocks == 1) return;
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t o = task / chunks, i0 = (task % chunks) * kInner, len = std::min(kInner, I - i0);
    for (int64_t i = 0; i < len; ++i) {
      double acc = Op::init();
      for (int64_t block = 0; block < row_blocks; ++block) acc = Op::apply(acc, partial[(task * row_blocks + block) * kInner + i]);
      out[o * I + i0 + i] = acc;
    }
  }
}

// Any pattern of kept and reduced dims (e.g. [A, B, C, D] -> [1, B, 1, D]): one output at a time,
// an odometer over the reduced dims. dims are coalesced, outer first, with x's strides.
struct Dim {
  int64_t extent, stride;
};

template <ReduceKind K, typename T>
void reduce_generic(const T* x, const std::vector<Dim>& kept, const std::vector<Dim>& reduced,
                    int64_t outputs, int64_t R, double* out) {
  using Op = Combine<K>;
  const int nr = static_cast<int>(reduced.size());
  const Dim inner = reduced.back();
  parallel_for(outputs, R, [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(static_cast<size_t>(nr), 0);
    for (int64_t o = b; o < e; ++o) {
      int64_t base = 0;
      for (int64_t d = static_cast<int64_t>(kept.size()) - 1, rest = o; d >= 0; --d) {
        base += (rest % kept[d].extent) * kept[d].stride;
        rest /= kept[d].extent;
      }
      double acc = Op::init();
      std::fill(idx.begin(), idx.end(), 0);
      for (int64_t off = base;;) {
        for (int64_t i = 0; i < inner.extent; ++i) acc = Op::apply(acc, load(x[off + i * inner.stride]));
        int d = nr - 2;
        for (; d >= 0; --d) {
          off += reduced[d].stride;
          if (++idx[d] < reduced[d].extent) break;
          off -= reduced[d].stride * reduced[d].extent;
          idx[d] = 0;
        }
        if (d < 0) break;
      }
      out[o] = acc;
    }
  });
}

}  // namespace

void CpuKernels::reduce_impl(ReduceKind kind, const TensorRef& x, const TensorRef& y, const ReduceDims& dims) {
  const char* name = reduce_name(kind);
  const int64_t R = dims.R, outputs = dims.outputs;
  const auto& groups = dims.groups;
  if (outputs == 0) return;

  std::vector<double> out(static_cast<size_t>(outputs));
  if (R == 0) {
    std::fill(out.begin(), out.end(), 0.0);
  } else {
    std::vector<int64_t> strides(groups.size());
    for (size_t g = groups.size(), stride = 1; g-- > 0;) {
      strides[g] = static_cast<int64_t>(stride);
      stride *= static_cast<size_t>(groups[g].first);
    }
    std::vector<Dim> kept, reduced;  // the groups with their strides, outer first
    for (size_t g = 0; g < groups.size(); ++g)
      (groups[g].second ? reduced : kept).push_back(Dim{groups[g].first, strides[g]});
    int64_t O = 1, I = 1;
    size_t g = 0;
    for (; g < groups.size() && !groups[g].second; ++g) O *= groups[g].first;
    if (g < groups.size()) ++g;
    for (; g < groups.size() && !groups[g].second; ++g) I *= groups[g].first;
    const bool blocked = reduced.size() <= 1;
    // Mean sums (and divides below); the kind is a template argument so the inner loops stay tight.
    auto run = [&](auto k) {
      constexpr ReduceKind K = decltype(k)::value;
      dispatch_floating(x.dtype, name, [&](auto tag) {
        using T = decltype(tag);
        const T* px = x.as<T>();
        if (blocked) reduce_middle<K>(px, O, R, I, out.data());
        else reduce_generic<K>(px, kept, reduced, outputs, R, out.data());
      });
    };
    switch (kind) {
      case ReduceKind::Sum:
      case ReduceKind::Mean: run(std::integral_constant<ReduceKind, ReduceKind::Sum>{}); break;
      case ReduceKind::Max: run(std::integral_constant<ReduceKind, ReduceKind::Max>{}); break;
      case ReduceKind::Min: run(std::integral_constant<ReduceKind, ReduceKind::Min>{}); break;
    }
  }
  if (kind == ReduceKind::Mean) {
    for (double& v : out) v /= static_cast<double>(R);
  }
  dispatch_floating(y.dtype, name, [&](auto tag) {
    using Y = decltype(tag);
    Y* py = y.as<Y>();
    parallel_for(outputs, 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) py[i] = round_to<Y>(out[i]);
    });
  });
}

namespace {

// The first extreme along R of x [O, R, I], for each (o, i); NaN counts as the extreme, as in PyTorch.
template <bool kMin>
void arg_reduce(const TensorRef& x, const TensorRef& y) {
  const int64_t O = x.shape[0], R = x.shape[1], I = x.shape[2];
  if (y.numel() == 0) return;
  int64_t* out = y.as<int64_t>();
  dispatch_floating(x.dtype, kMin ? "argmin" : "argmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.as<T>();
    parallel_for(O * I, R, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const T* column = px + (t / I) * R * I + t % I;
        int64_t best = 0;
        double best_value = load(column[0]);
        for (int64_t r = 1; r < R && !std::isnan(best_value); ++r) {
          const double v = load(column[r * I]);
          // strictly better: the first extreme wins
          if ((kMin ? v < best_value : v > best_value) || std::isnan(v)) {
            best = r;
            best_value = v;
          }
        }
        out[t] = best;
      }
    });
  });
}

}  // namespace

void CpuKernels::argmax_impl(const TensorRef& x, const TensorRef& y) { arg_reduce<false>(x, y); }
void CpuKernels::argmin_impl(const TensorRef& x, const TensorRef& y) { arg_reduce<true>(x, y); }

}  // namespace demi::backend::cpu
