// Fused optimizer steps on CUDA (SGD, AdamW; backends/kernels.h): one pass per parameter reads the
// gradient, the fp32 master (when given) and the fp32 state, and writes the state and the param
// (rounded once, to nearest or stochastically). The per-element math is the CPU backend's, in its order (sgd.cpp, adamw.cpp);
// packs of 4 elements per thread when every pointer is aligned for them, one at a time otherwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"
#include "backends/stochastic_rounding.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kPack = 4;  // elements per vector access: 16 bytes of fp32, 8 of a half type

// N consecutive elements, aligned so that one load or store moves them all.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <int N, typename T>
__device__ inline Pack<T, N> load(const T* p) { return *reinterpret_cast<const Pack<T, N>*>(p); }
template <int N, typename T>
__device__ inline void store(T* p, const Pack<T, N>& pack) { *reinterpret_cast<Pack<T, N>*>(p) = pack; }

// Whether p (null: unused) allows Pack<T, kPack> accesses.
template <typename T>
bool pack_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * kPack) == 0;
}

// The type the step is computed in (and the state's): double for F64 params, else fp32.
template <typename T> using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// p = elements [i, i + N) of the parameter in C, as the step starts from them: the fp32 master when
// given (master != null), else param.
template <int N, typename T, typename C>
__device__ inline void load_param(const T* param, const float* master, int64_t i, C (&p)[N]) {
  if (master != nullptr) {
    const Pack<float, N> m = load<N>(master + i);
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = static_cast<C>(m.v[j]);
  } else {
    const Pack<T, N> q = load<N>(param + i);
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = static_cast<C>(widen(q.v[j]));
  }
}

// The new value p of element i written into a param of type T: Narrow's one rounding to nearest,
// or stochastic rounding for the half types (the CPU's store_param, the same bits).
template <typename T, typename C>
__device__ inline T narrow_param(C p, const WriteRounding& r, int64_t i) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    if (r.mode == Rounding::Stochastic) {
      constexpr auto format = std::is_same_v<T, __half> ? rounding::HalfFormat::F16 : rounding::HalfFormat::BF16;
      const uint16_t bits = rounding::float_to_half_stochastic(static_cast<float>(p), format,
                                                               rounding::rounding_uniform(r.seed, r.offset, i));
      T out;
      memcpy(&out, &bits, sizeof(bits));
      return out;
    }
  }
  return Narrow<T>::from(p);
}

// --- SGD ---------------------------------------------------------------------------------------

template <typename C>
struct SgdScalars {
  C lr, momentum, dampening, weight_decay;
  bool use_momentum, nesterov, first_step;
  WriteRounding rounding;
  const float* found_inf = nullptr;  // nonzero: skip the step (null: never)
  const double* lr_tensor = nullptr;  // the rate on the device, read in place of lr (null: lr)
};

__device__ inline bool skip_step(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

// Elements [i, i + N): the step of sgd.cpp, element by element.
template <int N, typename T, typename G, typename C>
__device__ inline void sgd_elements(const SgdScalars<C>& s, T* param, const G* grad, C* buf, float* master,
                                    int64_t i) {
  const Pack<G, N> grad_in = load<N>(grad + i);
  C p[N];
  load_param<N>(param, master, i, p);
  Pack<C, N> b{};
  if (s.use_momentum && !s.first_step) b = load<N>(buf + i);  // the first step initialises it
  Pack<T, N> param_out;
  Pack<float, N> master_out;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    C g = static_cast<C>(widen(grad_in.v[j])) + s.weight_decay * p[j];
    if (s.use_momentum) {
      const C v = s.first_step ? g : s.momentum * b.v[j] + (C(1) - s.dampening) * g;
      b.v[j] = v;
      g = s.nesterov ? g + s.momentum * v : v;
    }
    p[j] -= s.lr * g;
    param_out.v[j] = narrow_param<T>(p[j], s.rounding, i + j);
    master_out.v[j] = static_cast<float>(p[j]);
  }
  if (s.use_momentum) store<N>(buf + i, b);
  if (master != nullptr) store<N>(master + i, master_out);
  store<N>(param + i, param_out);
}

// param [n] of T, grad [n] of G, buf [n] of C (when momentum), master [n] fp32 or null. The first
// `packs` packs of kPack elements go as packs (all pointers aligned), the rest one by one.
template <typename T, typename G, typename C>
__global__ void sgd_kernel(SgdScalars<C> s, T* param, const G* grad, C* buf, float* master, int64_t n,
                           int64_t packs) {
  if (skip_step(s.found_inf)) return;
  if (s.lr_tensor != nullptr) s.lr = static_cast<C>(*s.lr_tensor);
  for (int64_t k = thread_index(); k < packs; k += grid_width())
    sgd_elements<kPack>(s, param, grad, buf, master, k * kPack);
  for (int64_t i = packs * kPack + thread_index(); i < n; i += grid_width())
    sgd_elements<1>(s, param, grad, buf, master, i);
}

// --- AdamW -------------------------------------------------------------------------------------

template <typename C>
struct AdamWScalars {
  C decay, step_size, inv_sqrt_bias2, beta1, beta2, eps, one_minus_beta1, one_minus_beta2;
  WriteRounding rounding;
  const float* found_inf = nullptr;  // nonzero: skip the step (null: never)
  // The step count on the device (advance_step_kernel has counted this step), from which each
  // thread derives step_size and inv_sqrt_bias2 in double as the host does; null: they are given.
  const int64_t* step_count = nullptr;
  double lr = 0.0, beta1_d = 0.0, beta2_d = 0.0, weight_decay_d = 0.0;
  // With step_count: the rate on the device, read in place of lr; decay is then derived here too.
  const double* lr_tensor = nullptr;
};

// AdamWArgs::step_count: one more step, unless this one is skipped.
__global__ void advance_step_kernel(int64_t* step_count, const float* found_inf) {
  if (!skip_step(found_inf)) *step_count += 1;
}

// Elements [i, i + N): the step of adamw.cpp, element by element.
template <int N, typename T, typename G, typename C>
__device__ inline void adamw_elements(const AdamWScalars<C>& s, T* param, const G* grad, C* exp_avg,
                                      C* exp_avg_sq, float* master, int64_t i) {
  const Pack<G, N> grad_in = load<N>(grad + i);
  C p[N];
  load_param<N>(param, master, i, p);
  Pack<C, N> m = load<N>(exp_avg + i);
  Pack<C, N> v = load<N>(exp_avg_sq + i);
  Pack<T, N> param_out;
  Pack<float, N> master_out;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const C g = static_cast<C>(widen(grad_in.v[j]));
    C pj = p[j] * s.decay;
    m.v[j] = s.beta1 * m.v[j] + s.one_minus_beta1 * g;
    v.v[j] = s.beta2 * v.v[j] + s.one_minus_beta2 * g * g;
    pj -= s.step_size * m.v[j] / (dmath::sqrt(v.v[j]) * s.inv_sqrt_bias2 + s.eps);
    param_out.v[j] = narrow_param<T>(pj, s.rounding, i + j);
    master_out.v[j] = static_cast<float>(pj);
  }
  store<N>(exp_avg + i, m);
  store<N>(exp_avg_sq + i, v);
  if (master != nullptr) store<N>(master + i, master_out);
  store<N>(param + i, param_out);
}

// param [n] of T, grad [n] of G, exp_avg and exp_avg_sq [n] of C, master [n] fp32 or null; packs as
// in sgd_kernel.
template <typename T, typename G, typename C>
__global__ void adamw_kernel(AdamWScalars<C> s, T* param, const G* grad, C* exp_avg, C* exp_avg_sq,
                             float* master, int64_t n, int64_t packs) {
  if (skip_step(s.found_inf)) return;
  if (s.step_count != nullptr) {
    const double step = static_cast<double>(*s.step_count);
    if (s.lr_tensor != nullptr) {
      s.lr = *s.lr_tensor;
      // 1 - lr * weight_decay rounded as the host rounds it: no fused multiply-add.
      s.decay = static_cast<C>(__dsub_rn(1.0, __dmul_rn(s.lr, s.weight_decay_d)));
    }
    s.step_size = static_cast<C>(s.lr / (1.0 - pow(s.beta1_d, step)));
    s.inv_sqrt_bias2 = static_cast<C>(1.0 / sqrt(1.0 - pow(s.beta2_d, step)));
  }
  for (int64_t k = thread_index(); k < packs; k += grid_width())
    adamw_elements<kPack>(s, param, grad, exp_avg, exp_avg_sq, master, k * kPack);
  for (int64_t i = packs * kPack + thread_index(); i < n; i += grid_width())
    adamw_elements<1>(s, param, grad, exp_avg, exp_avg_sq, master, i);
}

// Threads for `packs` packs plus the n - packs * kPack elements after them.
int64_t work_items(int64_t n, int64_t packs) {
  const int64_t rest = n - packs * kPack;
  return packs > rest ? packs : rest;
}

}  // namespace

// sgd_step: param [any shape] of a floating dtype, grad with its numel (any floating dtype),
// momentum_buffer (when momentum != 0) and master (optional) as in SgdArgs; one fused pass.
void CudaKernels::sgd_step_impl(const SgdArgs& args) {
  constexpr const char* op = "sgd_step";
  const TensorRef& param = args.param;
  const TensorRef& grad = args.grad;
  const bool use_momentum = args.momentum != 0.0;
  const bool has_master = args.master.defined();
  const int64_t n = param.numel();
  dispatch_floating(param.dtype, op, [&](auto ptag) {
    dispatch_floating(grad.dtype, op, [&](auto gtag) {
      using T = typename decltype(ptag)::type;
      using G = typename decltype(gtag)::type;
      using C = compute_t<T>;
      if (n == 0) return;
      SgdScalars<C> s;
      s.lr = static_cast<C>(args.lr);
      s.momentum = static_cast<C>(args.momentum);
      s.dampening = static_cast<C>(args.dampening);
      s.weight_decay = static_cast<C>(args.weight_decay);
      s.use_momentum = use_momentum;
      s.nesterov = args.nesterov;
      s.first_step = args.first_step;
      s.rounding = args.rounding;
      s.found_inf = args.found_inf.defined() ? args.found_inf.as<const float>() : nullptr;
      s.lr_tensor = args.lr_tensor.defined() ? args.lr_tensor.as<const double>() : nullptr;
      C* buf = use_momentum ? args.momentum_buffer.as<C>() : nullptr;
      float* master = has_master ? args.master.as<float>() : nullptr;
      const bool aligned = pack_aligned<T>(param.data) && pack_aligned<G>(grad.data) && pack_aligned<C>(buf) &&
                           pack_aligned<float>(master);
      const int64_t packs = aligned ? n / kPack : 0;
      const DeviceGuard guard(index_);
      sgd_kernel<T, G, C><<<blocks_for(work_items(n, packs), kThreads), kThreads, 0, stream_>>>(
          s, param.as<T>(), grad.as<const G>(), buf, master, n, packs);
      DEMI_CUDA_LAUNCH_CHECK("sgd_kernel");
    });
  });
}

// adamw_step: param [any shape] of a floating dtype, grad with its numel (any floating dtype),
// exp_avg / exp_avg_sq (fp32, F64 for an F64 param) and master (optional) as in AdamWArgs.
void CudaKernels::adamw_step_impl(const AdamWArgs& args) {
  constexpr const char* op = "adamw_step";
  const TensorRef& param = args.param;
  const bool has_master = args.master.defined();
  // The scalars exactly as adamw.cpp derives them, on the host, in double, then rounded to C.
  const double bias1 = 1.0 - std::pow(args.beta1, static_cast<double>(args.step));
  const double bias2 = 1.0 - std::pow(args.beta2, static_cast<double>(args.step));
  const int64_t n = param.numel();
  if (args.step_count.defined()) {  // counted before the update kernel reads it (stream order)
    const DeviceGuard guard(index_);
    advance_step_kernel<<<1, 1, 0, stream_>>>(args.step_count.as<int64_t>(),
                                              args.found_inf.defined() ? args.found_inf.as<const float>() : nullptr);
    DEMI_CUDA_LAUNCH_CHECK("advance_step_kernel");
  }
  dispatch_floating(param.dtype, op, [&](auto ptag) {
    dispatch_floating(args.grad.dtype, op, [&](auto gtag) {
      using T = typename decltype(ptag)::type;
      using G = typename decltype(gtag)::type;
      using C = compute_t<T>;
      if (n == 0) return;
      AdamWScalars<C> s;
      s.decay = static_cast<C>(1.0 - args.lr * args.weight_decay);
      s.step_size = static_cast<C>(args.lr / bias1);
      s.inv_sqrt_bias2 = static_cast<C>(1.0 / std::sqrt(bias2));
      s.beta1 = static_cast<C>(args.beta1);
      s.beta2 = static_cast<C>(args.beta2);
      s.eps = static_cast<C>(args.eps);
      // 1 - beta in double, then rounded, as the CPU (see adamw.cpp).
      s.one_minus_beta1 = static_cast<C>(1.0 - args.beta1);
      s.one_minus_beta2 = static_cast<C>(1.0 - args.beta2);
      s.rounding = args.rounding;
      s.found_inf = args.found_inf.defined() ? args.found_inf.as<const float>() : nullptr;
      if (args.step_count.defined()) {
        s.step_count = args.step_count.as<const int64_t>();
        s.lr = args.lr;
        s.beta1_d = args.beta1;
        s.beta2_d = args.beta2;
        s.weight_decay_d = args.weight_decay;
        s.lr_tensor = args.lr_tensor.defined() ? args.lr_tensor.as<const double>() : nullptr;
      }
      C* exp_avg = args.exp_avg.as<C>();
      C* exp_avg_sq = args.exp_avg_sq.as<C>();
      float* master = has_master ? args.master.as<float>() : nullptr;
      const bool aligned = pack_aligned<T>(param.data) && pack_aligned<G>(args.grad.data) &&
                           pack_aligned<C>(exp_avg) && pack_aligned<C>(exp_avg_sq) && pack_aligned<float>(master);
      const int64_t packs = aligned ? n / kPack : 0;
      const DeviceGuard guard(index_);
      adamw_kernel<T, G, C><<<blocks_for(work_items(n, packs), kThreads), kThreads, 0, stream_>>>(
          s, param.as<T>(), args.grad.as<const G>(), exp_avg, exp_avg_sq, master, n, packs);
      DEMI_CUDA_LAUNCH_CHECK("adamw_kernel");
    });
  });
}

}  // namespace demi::backend::cuda
