// CpuKernels::gemm: batched row-major C = alpha * op(A) op(B) + beta * C (+ bias) on Eigen's GEMM.
// fp32/fp64 operands are mapped in place (transposes are Eigen views, no copies); half operands are
// widened to fp32 once, multiplied by one sgemm and rounded once into C, as tensor cores do.
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstRowMap = Eigen::Map<const RowMatrix<T>>;

// Scratch slots of the calling thread; none is used inside the batch-parallel region.
enum Slot { kSlotA = 0, kSlotB = 1, kSlotC = 2, kSlotBias = 3 };

// One product in the compute type T (float or double): c = alpha * op(a) op(b) + beta * c + bias.
template <typename T>
void gemm_one(const T* a, const T* b, T* c, const T* bias, const GemmArgs& g) {
  const int64_t m = g.m, n = g.n, k = g.k;
  Eigen::Map<RowMatrix<T>> C(c, m, n);
  const T alpha = static_cast<T>(g.alpha);
  const T beta = static_cast<T>(g.beta);
  auto run = [&](const auto& A, const auto& B) {
    if (g.beta == 0.0) {
      C.noalias() = alpha * A * B;  // C may hold garbage (even NaN): never read it
    } else {
      if (g.beta != 1.0) C *= beta;
      C.noalias() += alpha * A * B;
    }
  };
  const bool ta = g.trans_a == Transpose::Yes, tb = g.trans_b == Transpose::Yes;
  if (!ta && !tb) run(ConstRowMap<T>(a, m, k), ConstRowMap<T>(b, k, n));
  else if (ta && !tb) run(ConstRowMap<T>(a, k, m).transpose(), ConstRowMap<T>(b, k, n));
  else if (!ta && tb) run(ConstRowMap<T>(a, m, k), ConstRowMap<T>(b, n, k).transpose());
  else run(ConstRowMap<T>(a, k, m).transpose(), ConstRowMap<T>(b, n, k).transpose());
  if (bias) C.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bias, n);
}

// Converts n elements into a scratch buffer of type To (or returns src when it already is To).
template <typename To>
const To* as_compute(const TensorRef& t, int64_t n, int slot) {
  if (t.dtype == DTypeOf<To>::value) return t.as<To>();
  To* out = thread_scratch<To>(slot, n);
  dispatch_floating(t.dtype, "gemm", [&](auto tag) {
    using S = decltype(tag);
    const S* src = t.as<S>();
    parallel_for(n, 1, [&](int64_t begin, int64_t end) { convert_n(src + begin, out + begin, end - begin); });
  });
  return out;
}

template <typename T>
void gemm_typed(const GemmArgs& g) {
  const int64_t mk = g.m * g.k, kn = g.k * g.n, mn = g.m * g.n;
  const int64_t span_a = gemm_span(g.batch, g.stride_a, mk), span_b = gemm_span(g.batch, g.stride_b, kn);
  const T* a = as_compute<T>(g.a, span_a, kSlotA);
  const T* b = as_compute<T>(g.b, span_b, kSlotB);
  const T* bias = g.bias.defined() ? as_compute<T>(g.bias, g.n, kSlotBias) : nullptr;

  // When C is stored narrower (or just differently), the whole result is formed in T, beta * C
  // and bias included, and rounded into C once at the end.
  const bool c_direct = g.c.dtype == DTypeOf<T>::value;
  const int64_t stride_c = g.batch == 1 ? mn : g.stride_c;
  T* c = nullptr;
  int64_t cs = stride_c;
  if (c_direct) {
    c = g.c.as<T>();
  } else {
    cs = mn;
    c = thread_scratch<T>(kSlotC, g.batch * mn);
    if (g.beta != 0.0) {
      dispatch_floating(g.c.dtype, "gemm", [&](auto tag) {
        using S = decltype(tag);
        const S* src = g.c.as<S>();
        for (int64_t i = 0; i < g.batch; ++i) convert_n(src + i * stride_c, c + i * cs, mn);
      });
    }
  }

  const int64_t sa = g.stride_a, sb = g.stride_b;
  auto one = [&](int64_t i) { gemm_one<T>(a + i * sa, b + i * sb, c + i * cs, bias, g); };
  // Many small products: one per thread, each single-threaded (Eigen sees omp_get_num_threads() > 1
  // inside the region). Few large products: one after another, each split by Eigen's own OpenMP.
  const int threads = omp_get_max_threads();
  const bool per_batch = g.batch >= 4 * threads || (g.batch >= threads && mn * g.k < 256 * 256 * 256);
  if (g.batch > 1 && per_batch && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < g.batch; ++i) one(i);
  } else {
    for (int64_t i = 0; i < g.batch; ++i) one(i);
  }

  if (!c_direct) {
    dispatch_floating(g.c.dtype, "gemm", [&](auto tag) {
      using S = decltype(tag);
      S* dst = g.c.as<S>();
      for (int64_t i = 0; i < g.batch; ++i) {
        const T* src = c + i * cs;
        parallel_for(mn, 1, [&](int64_t begin, int64_t end) {
          if constexpr (std::is_same_v<T, double> && !std::is_same_v<S, float>) {
            for (int64_t j = begin; j < end; ++j) dst[i * stride_c + j] = round_to<S>(src[j]);  // once, not via fp32
          } else {
            convert_n(src + begin, dst + i * stride_c + begin, end - begin);
          }
        });
      }
    });
  }
}

}  // namespace

void CpuKernels::gemm(const GemmArgs& args) {
  check_gemm(args);
  if (args.m == 0 || args.n == 0) return;
  // fp64 anywhere means a gradcheck: compute in fp64. Otherwise fp32, half types included.
  if (args.a.dtype == DType::F64 || args.c.dtype == DType::F64) {
    gemm_typed<double>(args);
  } else {
    gemm_typed<float>(args);
  }
}

}  // namespace demi::backend::cpu
