// CudaKernels::gemm on cuBLASLt, with the CPU backend's semantics. Row-major C [m, n] is column-major
// C^T = op(B)^T op(A)^T: cuBLASLt gets our B as its A and our A as its B, m and n swapped, and needs no
// copy or transpose kernel. Descriptors and the heuristic's algorithm are cached per shape and alignment.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;
// NVIDIA's recommended cuBLASLt workspace on Hopper; the heuristic may pick algorithms using up to it.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// Scratch regions carved from the workspace start at cudaMalloc's alignment, which is also the
// alignment cuBLASLt assumes when no preference says otherwise.
constexpr size_t kScratchAlign = 256;

// --- The element-wise pass around the matmul ----------------------------------------------------

// Over `total` = batch * mn elements of `batch` [m, n] matrices (mn = m * n, n columns):
//   dst[b * dst_stride + r] = Narrow<To>(scale * src[b * src_stride + r] + bias[r % n])
// in acc_t<From>, rounded once into To. A null src reads as 0 (beta = 0 never reads C, which may hold
// NaN); a null bias adds nothing. src and dst may alias: each element is read and written by one thread.
template <typename To, typename From>
__global__ void matrix_pass_kernel(const From* src, int64_t src_stride, acc_t<From> scale,
                                   const acc_t<From>* bias, To* dst, int64_t dst_stride, int64_t mn,
                                   int64_t n, int64_t total) {
  using A = acc_t<From>;
  for (int64_t i = thread_index(); i < total; i += grid_width()) {
    const int64_t b = i / mn, r = i - b * mn;
    A v = A(0);
    if (src) v = mul_rn(widen(src[b * src_stride + r]), scale);
    if (bias) v = src ? add_rn(v, bias[r % n]) : bias[r % n];
    dst[b * dst_stride + r] = Narrow<To>::from(v);
  }
}

// --- Host helpers -------------------------------------------------------------------------------

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F64: return CUDA_R_64F;
    default: break;
  }
  DEMI_INTERNAL_CHECK(false, "gemm: no cuBLASLt type for ", dtype);
  return CUDA_R_32F;
}

// The alignment (a power of two, at most 256 bytes) every matrix of a batched operand starts at: the
// address's and the batch stride's common one. cuBLASLt's heuristic assumes 256 unless told.
uint32_t alignment(const void* ptr, int64_t stride_bytes) {
  const uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)) |
                        static_cast<uint64_t>(stride_bytes) | uint64_t{256};
  return static_cast<uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

// How one call runs: what cuBLASLt computes in, reads and writes, and the passes around it.
struct Route {
  DType compute = DType::F32;  // F32 (fp32 or TF32) or F64: the CPU's choice, F64 when A or C is F64
  bool tf32 = false;
  DType in = DType::F32;       // A and B as cuBLASLt reads them
  DType out = DType::F32;      // D as cuBLASLt writes it
  bool widen_inputs = false;   // A and B are first converted to F64 scratch (fp64 compute of narrower inputs)
  bool out_scratch = false;    // D is a dense scratch of `out`, rounded into C by one pass afterwards
  bool fuse_bias = false;      // the bias is cuBLASLt's epilogue; otherwise the pass after adds it
};

Route route_for(const GemmArgs& g, bool allow_fused_bias) {
  Route r;
  if (g.a.dtype == DType::F64 || g.c.dtype == DType::F64) {
    r.compute = r.in = r.out = DType::F64;
    r.widen_inputs = g.a.dtype != DType::F64;
    r.out_scratch = g.c.dtype != DType::F64;
    return r;  // cuBLASLt lists no epilogue for fp64 compute: the bias is a pass
  }
  r.in = g.a.dtype;
  r.tf32 = r.in == DType::F32 && allow_tf32();
  // cuBLASLt's fp32-compute combinations write D in the inputs' dtype or in fp32; any other C (fp16
  // from bf16, fp32 into a half type) goes through an fp32 scratch and one rounding.
  const bool native = g.c.dtype == g.a.dtype || g.c.dtype == DType::F32;
  r.out = native ? g.c.dtype : DType::F32;
  r.out_scratch = !native;
  // With a bias, D is fp32 whenever C is half, and one pass rounds D into C. A pass after a half D
  // would round twice, and cuBLASLt's own bias epilogue on a half D errs as if it did too: on an
  // H200 (CUDA 13) it was off by 2 ulps of C where the bias cancels most of the product, as when
  // alpha op(A) op(B) + beta C is rounded into half before the bias is added.
  const bool has_bias = g.bias.defined();
  if (has_bias && is_half(r.out)) {
    r.out = DType::F32;
    r.out_scratch = true;
  }
  // The epilogue's bias has D's dtype (cuBLASLt's default for these types): fp32 now.
  r.fuse_bias = allow_fused_bias && has_bias && g.bias.dtype == r.out;
  return r;
}

// What cuBLASLt is given: our A and B (or their F64 copies), C (or the scratch D), the bias.
struct Operands {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;  // only when the bias is fused
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements; 0 when batch is 1
  void* workspace = nullptr;
};

// Every field that changes a descriptor or the heuristic's choice.
using PlanKey = std::array<int64_t, 20>;

// Descriptors in cuBLASLt's roles, where its A is our B and its B is our A; destroyed with the plan.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;                            // the heuristic returned an algorithm
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;  // the heuristic's status, for the error when not found

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // errors ignored: this runs in destructors
    if (d) (void)cublasLtMatrixLayoutDestroy(d);
    if (c) (void)cublasLtMatrixLayoutDestroy(c);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
  }
};

struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* pref) const { (void)cublasLtMatmulPreferenceDestroy(pref); }
};

cublasComputeType_t compute_type(const Route& r) {
  if (r.compute == DType::F64) return CUBLAS_COMPUTE_64F;
  return r.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

void set_batch(cublasLtMatrixLayout_t layout, int64_t batch, int64_t stride) {
  const int32_t count = static_cast<int32_t>(batch);
  DEMI_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  // A stride of 0 (a matrix shared by the batch) is accepted by cuBLASLt for A and B.
  DEMI_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                     sizeof(stride)));
}

// The matmul descriptor (compute and scale types, transposes, the fused bias) and the four layouts.
void describe(Plan& plan, const GemmArgs& g, const Route& r, const Operands& ops) {
  const bool ta = g.trans_a == Transpose::Yes, tb = g.trans_b == Transpose::Yes;
  const cudaDataType_t scale_type = r.compute == DType::F64 ? CUDA_R_64F : CUDA_R_32F;
  DEMI_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute_type(r), scale_type));
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  DEMI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  DEMI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (r.fuse_bias) {
    // cuBLASLt's bias has one element per row of its column-major D = C^T [n, m], that is per column
    // of our C: bias[j] is added to C[i, j] for every i, as GemmArgs says. Its dtype defaults to D's,
    // which route_for made it. The heuristic reads the pointer's alignment, so it is set before.
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    DEMI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                     sizeof(epilogue)));
    DEMI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ops.bias,
                                                     sizeof(ops.bias)));
  }
  // Column-major views of the row-major operands (ld = rows: each is dense):
  //   B stored [k, n] is [n, k] = op(B)^T; stored [n, k] (trans_b) it is [k, n], transposed by TRANSA.
  //   A stored [m, k] is [k, m] = op(A)^T; stored [k, m] (trans_a) it is [m, k], transposed by TRANSB.
  //   C [m, n] is [n, m].
  const cudaDataType_t in = cuda_type(r.in), out = cuda_type(r.out);
  const uint64_t m = static_cast<uint64_t>(g.m), n = static_cast<uint64_t>(g.n), k = static_cast<uint64_t>(g.k);
  const uint64_t a_rows = tb ? k : n, a_cols = tb ? n : k;
  const uint64_t b_rows = ta ? m : k, b_cols = ta ? k : m;
  DEMI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, in, a_rows, a_cols, static_cast<int64_t>(a_rows)));
  DEMI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, in, b_rows, b_cols, static_cast<int64_t>(b_rows)));
  DEMI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, out, n, m, static_cast<int64_t>(n)));
  DEMI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, out, n, m, static_cast<int64_t>(n)));
  if (g.batch > 1) {
    set_batch(plan.a, g.batch, ops.stride_b);
    set_batch(plan.b, g.batch, ops.stride_a);
    set_batch(plan.c, g.batch, ops.stride_c);
    set_batch(plan.d, g.batch, ops.stride_c);
  }
}

using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

// What the heuristic may choose from: the workspace it may use, the split-k scheme, the operands'
// alignments.
Preference preference(const Route& r, const Operands& ops) {
  cublasLtMatmulPreference_t raw_pref = nullptr;
  DEMI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  Preference pref(raw_pref);
  const uint64_t workspace_bytes = kCublasWorkspaceBytes;
  DEMI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes, sizeof(workspace_bytes)));
  // Split-k partial sums only in the compute type (or no split-k at all): the other schemes add
  // partials in D's type, which for a half D would round more than once (the fp32-accumulation contract).
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  DEMI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                         &reduction, sizeof(reduction)));
  const int64_t in_size = static_cast<int64_t>(dtype_size(r.in)), out_size = static_cast<int64_t>(dtype_size(r.out));
  const uint32_t align_a = alignment(ops.b, ops.stride_b * in_size);  // cuBLASLt's A is our B
  const uint32_t align_b = alignment(ops.a, ops.stride_a * in_size);
  const uint32_t align_cd = alignment(ops.c, ops.stride_c * out_size);
  DEMI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                         &align_a, sizeof(align_a)));
  DEMI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                         &align_b, sizeof(align_b)));
  DEMI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                         &align_cd, sizeof(align_cd)));
  DEMI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                         &align_cd, sizeof(align_cd)));
  return pref;
}

// Builds the descriptors and asks the heuristic for its best algorithm (found = false when none).
std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const GemmArgs& g, const Route& r, const Operands& ops) {
  auto plan = std::make_unique<Plan>();
  describe(*plan, g, r, ops);
  const Preference pref = preference(r, ops);
  // Not DEMI_CUBLAS_CHECK: "no algorithm" (CUBLAS_STATUS_NOT_SUPPORTED, or none returned) is an answer
  // the caller handles (retry without the epilogue, or an error naming the shape).
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  plan->status = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->d, pref.get(),
                                                1, &result, &returned);
  plan->found = plan->status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan->found) plan->algo = result.algo;
  else if (plan->status == CUBLAS_STATUS_SUCCESS) plan->status = returned > 0 ? result.state : CUBLAS_STATUS_NOT_SUPPORTED;
  return plan;
}

PlanKey key_for(const GemmArgs& g, const Route& r, const Operands& ops) {
  const int64_t in_size = static_cast<int64_t>(dtype_size(r.in)), out_size = static_cast<int64_t>(dtype_size(r.out));
  return PlanKey{static_cast<int64_t>(r.in),
                 static_cast<int64_t>(r.out),
                 static_cast<int64_t>(compute_type(r)),
                 g.trans_a == Transpose::Yes,
                 g.trans_b == Transpose::Yes,
                 g.m,
                 g.n,
                 g.k,
                 g.batch,
                 ops.stride_a,
                 ops.stride_b,
                 ops.stride_c,
                 r.fuse_bias,
                 g.beta != 0.0,
                 r.tf32,
                 alignment(ops.a, ops.stride_a * in_size),
                 alignment(ops.b, ops.stride_b * in_size),
                 alignment(ops.c, ops.stride_c * out_size),
                 r.fuse_bias ? alignment(ops.bias, 0) : 0,
                 r.fuse_bias ? static_cast<int64_t>(g.bias.dtype) : -1};
}

size_t round_up(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

[[noreturn]] void throw_no_algorithm(const GemmArgs& g, const Route& route, cublasStatus_t status) {
  DEMI_THROW("gemm: cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k, " batch=", g.batch,
             " (strides ", g.stride_a, ", ", g.stride_b, ", ", g.stride_c, "), trans_a=",
             g.trans_a == Transpose::Yes, " trans_b=", g.trans_b == Transpose::Yes, ", A and B ", g.a.dtype,
             " read as ", route.in, ", C ", g.c.dtype, " written as ", route.out, ", compute ",
             route.compute == DType::F64 ? "fp64" : route.tf32 ? "tf32" : "fp32",
             g.bias.defined() ? ", with bias" : "", " (cublasLtMatmulAlgoGetHeuristic: ",
             cublasLtGetStatusName(status), "); cast the operands to float32, or copy them to "
             "aligned, contiguous tensors");
}

}  // namespace

struct CudaKernels::GemmPlans {
  std::mutex mutex;  // guards the map and the descriptors' bias pointer, set per call
  std::map<PlanKey, std::unique_ptr<Plan>> plans;  // grows with the distinct shapes a program runs
};
CudaKernels::GemmPlans& CudaKernels::gemm_plans() {
  std::call_once(gemm_plans_once_, [this] { gemm_plans_.reset(new GemmPlans); });
  return *gemm_plans_;
}
void CudaKernels::PlansDeleter::operator()(GemmPlans* plans) const { delete plans; }

// One gemm_impl call in steps. Nested in CudaKernels for cast_impl: the casts here take arguments
// built here, which the checked cast would only check again.
struct CudaKernels::GemmCall {
  // The workspace's scratch regions after cuBLASLt's part; null where the route needs none.
  struct Scratch {
    void* a = nullptr;
    void* b = nullptr;
    void* d = nullptr;
    void* bias = nullptr;
  };
  // How the call runs: its route, the workspace laid out for it, and the plan cuBLASLt runs.
  struct Setup {
    Route route;
    Scratch scratch;
    Operands ops;
    Plan* plan = nullptr;
  };

  GemmCall(CudaKernels& device, const GemmArgs& args)
      : kernels(device),
        g(args),
        mn(args.m * args.n),
        total(args.batch * mn),
        stride_c(args.batch > 1 ? args.stride_c : 0),
        span_a(gemm_span(args.batch, args.stride_a, args.m * args.k)),
        span_b(gemm_span(args.batch, args.stride_b, args.k * args.n)) {}

  // The bias as `dtype` at `scratch` (or in place when it already is), for a pass that adds it.
  const void* bias_as(DType dtype, void* scratch) const {
    if (!g.bias.defined()) return nullptr;
    if (g.bias.dtype == dtype) return g.bias.data;
    kernels.cast_impl(g.bias, TensorRef{scratch, {g.n}, dtype});
    return scratch;
  }

  // k = 0: op(A) op(B) is all zeros, so C = beta * C + bias, computed as on the CPU.
  void scale_and_add_bias() const {
    const DType acc = g.c.dtype == DType::F64 ? DType::F64 : DType::F32;
    void* scratch = g.bias.defined() ? kernels.workspace(static_cast<size_t>(g.n) * dtype_size(acc)) : nullptr;
    const void* bias = bias_as(acc, scratch);
    dispatch_floating(g.c.dtype, "gemm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = acc_t<T>;
      T* c = g.c.as<T>();
      matrix_pass_kernel<T, T><<<kernels.blocks_for(total, kThreads), kThreads, 0, kernels.stream_>>>(
          g.beta != 0.0 ? c : nullptr, stride_c, static_cast<A>(g.beta), static_cast<const A*>(bias), c, stride_c,
          mn, g.n, total);
      DEMI_CUDA_LAUNCH_CHECK("matrix_pass_kernel");
    });
  }

  // Lays out the workspace for a route (cuBLASLt's part first, then the scratch buffers) and names
  // what cuBLASLt reads and writes.
  Operands lay_out(const Route& r, Scratch& s) const {
    const size_t in_size = dtype_size(r.in), out_size = dtype_size(r.out);
    const size_t a_bytes = r.widen_inputs ? round_up(static_cast<size_t>(span_a) * in_size) : 0;
    const size_t b_bytes = r.widen_inputs ? round_up(static_cast<size_t>(span_b) * in_size) : 0;
    const size_t d_bytes = r.out_scratch ? round_up(static_cast<size_t>(total) * out_size) : 0;
    const size_t bias_bytes = g.bias.defined() ? round_up(static_cast<size_t>(g.n) * out_size) : 0;
    const size_t bytes = kCublasWorkspaceBytes + a_bytes + b_bytes + d_bytes + bias_bytes;
    char* base = static_cast<char*>(kernels.workspace(bytes));
    char* next = base + kCublasWorkspaceBytes;
    auto take = [&](size_t bytes) -> void* {
      void* p = bytes ? next : nullptr;
      next += bytes;
      return p;
    };
    s.a = take(a_bytes);
    s.b = take(b_bytes);
    s.d = take(d_bytes);
    s.bias = take(bias_bytes);
    Operands ops;
    ops.a = r.widen_inputs ? s.a : g.a.data;
    ops.b = r.widen_inputs ? s.b : g.b.data;
    ops.c = r.out_scratch ? s.d : g.c.data;
    ops.bias = r.fuse_bias ? g.bias.data : nullptr;
    if (g.batch > 1) {
      ops.stride_a = g.stride_a;  // widened copies keep the layout
      ops.stride_b = g.stride_b;
      ops.stride_c = r.out_scratch ? mn : g.stride_c;
    }
    ops.workspace = base;
    return ops;
  }

  // The route's workspace and cached plan (a failed search is cached too: not repeated).
  Setup set_up(GemmPlans& cache, bool allow_fused_bias) const {
    Setup s;
    s.route = route_for(g, allow_fused_bias);
    s.ops = lay_out(s.route, s.scratch);
    std::unique_ptr<Plan>& slot = cache.plans[key_for(g, s.route, s.ops)];
    if (!slot) slot = make_plan(kernels.cublaslt_, g, s.route, s.ops);
    s.plan = slot.get();
    return s;
  }

  // The bias epilogue when cuBLASLt has an algorithm with it, else the bias in the pass after.
  Setup choose(GemmPlans& cache) const {
    Setup s = set_up(cache, /*allow_fused_bias=*/true);
    if (!s.plan->found && s.route.fuse_bias) s = set_up(cache, /*allow_fused_bias=*/false);
    if (!s.plan->found) throw_no_algorithm(g, s.route, s.plan->status);
    return s;
  }

  // What cuBLASLt reads besides A, B and C themselves: A and B widened, C widened into the scratch D
  // (cuBLASLt applies beta there).
  void stage_inputs(const Setup& s) const {
    if (s.route.widen_inputs) {
      kernels.cast_impl(TensorRef{g.a.data, {span_a}, g.a.dtype}, TensorRef{s.scratch.a, {span_a}, s.route.in});
      kernels.cast_impl(TensorRef{g.b.data, {span_b}, g.b.dtype}, TensorRef{s.scratch.b, {span_b}, s.route.in});
    }
    if (!s.route.out_scratch || g.beta == 0.0) return;
    dispatch_floating(g.c.dtype, "gemm", [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      dispatch_floating(s.route.out, "gemm", [&](auto to_tag) {
        using To = typename decltype(to_tag)::type;
        matrix_pass_kernel<To, From><<<kernels.blocks_for(total, kThreads), kThreads, 0, kernels.stream_>>>(
            g.c.as<const From>(), stride_c, acc_t<From>(1), nullptr, static_cast<To*>(s.scratch.d), mn, mn, g.n,
            total);
        DEMI_CUDA_LAUNCH_CHECK("matrix_pass_kernel");
      });
    });
  }

  // D = alpha op(A) op(B) + beta C (+ the fused bias), with alpha and beta in the scale type, on the host.
  void matmul(const Setup& s) const {
    const float alpha_f = static_cast<float>(g.alpha), beta_f = static_cast<float>(g.beta);
    const double alpha_d = g.alpha, beta_d = g.beta;
    const bool fp64 = s.route.compute == DType::F64;
    Plan& p = *s.plan;
    if (s.route.fuse_bias)
      DEMI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s.ops.bias,
                                                       sizeof(s.ops.bias)));
    DEMI_CUBLAS_CHECK(cublasLtMatmul(kernels.cublaslt_, p.desc, fp64 ? static_cast<const void*>(&alpha_d) : &alpha_f,
                                     s.ops.b, p.a, s.ops.a, p.b, fp64 ? static_cast<const void*>(&beta_d) : &beta_f,
                                     s.ops.c, p.c, s.ops.c, p.d, &p.algo, s.ops.workspace, kCublasWorkspaceBytes,
                                     kernels.stream_));
  }

  // The pass after: D (+ bias) rounded once into C, or the bias added to C in place. route_for never
  // leaves an unfused bias on a half D, so the arithmetic type is D's own.
  void finish(const Setup& s) const {
    const bool bias_pass = g.bias.defined() && !s.route.fuse_bias;
    if (!s.route.out_scratch && !bias_pass) return;
    const void* bias = bias_pass ? bias_as(s.route.out, s.scratch.bias) : nullptr;
    dispatch_floating(s.route.out, "gemm", [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      using A = acc_t<From>;
      const From* d = static_cast<const From*>(s.ops.c);
      const int64_t d_stride = s.ops.stride_c;
      dispatch_floating(g.c.dtype, "gemm", [&](auto to_tag) {
        using To = typename decltype(to_tag)::type;
        matrix_pass_kernel<To, From><<<kernels.blocks_for(total, kThreads), kThreads, 0, kernels.stream_>>>(
            d, d_stride, A(1), static_cast<const A*>(bias), g.c.as<To>(), stride_c, mn, g.n, total);
        DEMI_CUDA_LAUNCH_CHECK("matrix_pass_kernel");
      });
    });
  }

  CudaKernels& kernels;
  const GemmArgs& g;
  const int64_t mn, total;  // elements of one C, of all
  const int64_t stride_c;   // C's batch stride; 0 when batch is 1
  const int64_t span_a, span_b;  // elements of A and of B that the batch reaches
};

// gemm: see GemmArgs. A, B and C on this device, row-major; the batch strides are in elements.
void CudaKernels::gemm_impl(const GemmArgs& args) {
  if (args.m == 0 || args.n == 0) return;
  DEMI_CHECK(args.batch <= INT32_MAX, "gemm: batch ", args.batch, " exceeds cuBLASLt's limit of ", INT32_MAX,
             "; split the batch into several calls");
  const DeviceGuard guard(index_);
  const GemmCall call(*this, args);
  if (args.k == 0) {
    call.scale_and_add_bias();
    return;
  }
  GemmPlans& cache = gemm_plans();
  const std::lock_guard<std::mutex> lock(cache.mutex);  // held through matmul, which sets the plan's bias pointer
  const GemmCall::Setup setup = call.choose(cache);
  call.stage_inputs(setup);
  call.matmul(setup);
  call.finish(setup);
}

}  // namespace demi::backend::cuda
