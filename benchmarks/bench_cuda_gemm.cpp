// bench_cuda_gemm: demi's CUDA GEMM (kernels_for(Device::cuda(0)).gemm: cuBLASLt behind a plan cache)
// against cuBLASLt called directly with its heuristic's top algorithm, on linear-layer products
// y [M, N] = x [M, K] W[N, K]^T at 4096^3 and 8192^3 in bf16, fp16 (same-dtype output) and fp32 with
// TF32. Both are timed the same way: host time around one call and a synchronize, median of the runs.
// Usage: bench_cuda_gemm [--iters N] [--json FILE]
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/kernels.h"

namespace {

using namespace demi;
using namespace demi::backend;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // as demi's backend asks for
constexpr int kWarmup = 5;

#define BENCH_CUDA(stmt)                                                                        \
  do {                                                                                          \
    const cudaError_t status_ = (stmt);                                                         \
    if (status_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "bench_cuda_gemm: %s failed: %s\n", #stmt, cudaGetErrorString(status_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
#define BENCH_CUBLAS(stmt)                                                                      \
  do {                                                                                          \
    const cublasStatus_t status_ = (stmt);                                                      \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::fprintf(stderr, "bench_cuda_gemm: %s failed: %s\n", #stmt, cublasLtGetStatusString(status_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

struct Row {
  int64_t m, n, k;
  DType dtype;
  bool tf32;
  double demi_ms, cublaslt_ms;
  double tflops(double ms) const { return 2.0 * m * n * k / (ms * 1e-3) / 1e12; }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds of each of `iters` calls of fn (after kWarmup untimed ones), each followed by sync().
template <typename Fn, typename Sync>
double median_ms(int iters, Fn&& fn, Sync&& sync) {
  for (int i = 0; i < kWarmup; ++i) fn();
  sync();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    sync();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return median(ms);
}

// A device buffer of `numel` elements of `dtype`, filled with values in [-1, 1) (a 4 MiB random block
// repeated: generating 64 Mi values one by one would dominate the run).
void* device_random(Kernels& k, int64_t numel, DType dtype, unsigned seed) {
  const size_t width = dtype_size(dtype);
  std::vector<uint8_t> block(size_t{1} << 20 << 2);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t block_elems = block.size() / width;
  for (size_t i = 0; i < block_elems; ++i) {
    const float v = dist(gen);
    uint8_t* p = block.data() + i * width;
    if (dtype == DType::F16) { const uint16_t b = Half(v).bits; std::memcpy(p, &b, 2); }
    else if (dtype == DType::BF16) { const uint16_t b = BFloat16(v).bits; std::memcpy(p, &b, 2); }
    else std::memcpy(p, &v, 4);
  }
  const size_t bytes = static_cast<size_t>(numel) * width;
  std::vector<uint8_t> host(bytes);
  for (size_t off = 0; off < bytes; off += block.size())
    std::memcpy(host.data() + off, block.data(), std::min(block.size(), bytes - off));
  void* ptr = k.raw_allocate(bytes);
  k.copy_from_host(host.data(), ptr, bytes);
  return ptr;
}

cudaDataType_t cuda_type(DType dtype) {
  return dtype == DType::F16 ? CUDA_R_16F : dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// cuBLASLt on its own: y^T [N, M] = W [N, K] (stored [K, N] column-major, transposed) times
// x^T [K, M], column-major, which is row-major y = x W^T; the heuristic's first algorithm.
struct DirectGemm {
  cublasLtHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr, x_layout = nullptr, y_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};

  DirectGemm(int64_t m, int64_t n, int64_t k, DType dtype, bool tf32) {
    BENCH_CUBLAS(cublasLtCreate(&handle));
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    BENCH_CUDA(cudaMalloc(&workspace, kWorkspaceBytes));
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    BENCH_CUBLAS(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
    BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)));
    const cudaDataType_t type = cuda_type(dtype);
    BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&w_layout, type, k, n, k));
    BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&x_layout, type, k, m, k));
    BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&y_layout, type, n, m, n));
    cublasLtMatmulPreference_t pref = nullptr;
    BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t bytes = kWorkspaceBytes;
    BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                                      sizeof(bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    BENCH_CUBLAS(cublasLtMatmulAlgoGetHeuristic(handle, desc, w_layout, x_layout, y_layout, y_layout, pref, 1,
                                                &result, &returned));
    BENCH_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
    if (returned == 0) {
      std::fprintf(stderr, "bench_cuda_gemm: cuBLASLt's heuristic returned no algorithm\n");
      std::exit(1);
    }
    algo = result.algo;
  }
  ~DirectGemm() {
    cublasLtMatrixLayoutDestroy(y_layout);
    cublasLtMatrixLayoutDestroy(x_layout);
    cublasLtMatrixLayoutDestroy(w_layout);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(workspace);
    cudaStreamDestroy(stream);
    cublasLtDestroy(handle);
  }
  DirectGemm(const DirectGemm&) = delete;
  DirectGemm& operator=(const DirectGemm&) = delete;

  void run(const void* x, const void* w, void* y) {
    const float alpha = 1.0f, beta = 0.0f;
    BENCH_CUBLAS(cublasLtMatmul(handle, desc, &alpha, w, w_layout, x, x_layout, &beta, y, y_layout, y, y_layout,
                                &algo, workspace, kWorkspaceBytes, stream));
  }
  void sync() { BENCH_CUDA(cudaStreamSynchronize(stream)); }
};

Row measure(Kernels& k, int64_t size, DType dtype, bool tf32, int iters) {
  const int64_t m = size, n = size, kk = size;
  void* x = device_random(k, m * kk, dtype, 1);
  void* w = device_random(k, n * kk, dtype, 2);
  void* y = k.raw_allocate(static_cast<size_t>(m * n) * dtype_size(dtype));

  GemmArgs args;
  args.a = TensorRef{x, {m, kk}, dtype};
  args.b = TensorRef{w, {n, kk}, dtype};
  args.c = TensorRef{y, {m, n}, dtype};
  args.trans_b = Transpose::Yes;
  args.m = m, args.n = n, args.k = kk;
  const bool previous = allow_tf32();
  set_allow_tf32(tf32);
  Row row{m, n, kk, dtype, tf32, 0.0, 0.0};
  row.demi_ms = median_ms(iters, [&] { k.gemm(args); }, [&] { k.synchronize(); });
  set_allow_tf32(previous);

  DirectGemm direct(m, n, kk, dtype, tf32);
  row.cublaslt_ms = median_ms(iters, [&] { direct.run(x, w, y); }, [&] { direct.sync(); });

  k.raw_free(y);
  k.raw_free(w);
  k.raw_free(x);
  return row;
}

std::string dtype_label(const Row& r) { return r.tf32 ? std::string("fp32 (tf32)") : dtype_name(r.dtype); }

void write_json(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream out(path);
  out << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    char line[512];
    std::snprintf(line, sizeof(line),
                  "  {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"dtype\": \"%s\", \"demi_ms\": %.4f, "
                  "\"cublaslt_ms\": %.4f, \"demi_tflops\": %.2f, \"cublaslt_tflops\": %.2f, \"ratio\": %.4f}%s\n",
                  static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k),
                  dtype_label(r).c_str(), r.demi_ms, r.cublaslt_ms, r.tflops(r.demi_ms), r.tflops(r.cublaslt_ms),
                  r.cublaslt_ms / r.demi_ms, i + 1 < rows.size() ? "," : "");
    out << line;
  }
  out << "]\n";
  if (!out) {
    std::fprintf(stderr, "bench_cuda_gemm: could not write %s\n", path.c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--iters N (default 20)] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  if (cuda_device_count() == 0) {
    std::printf("bench_cuda_gemm: no CUDA device, nothing to measure\n");
    return 0;
  }
  Kernels& k = kernels_for(Device::cuda(0));
  std::vector<Row> rows;
  std::printf("%-18s %-12s %12s %16s %14s\n", "shape (M=N=K)", "dtype", "demi TFLOP/s", "cuBLASLt TFLOP/s",
              "demi/cuBLASLt");
  for (const int64_t size : {int64_t{4096}, int64_t{8192}}) {
    for (const auto& [dtype, tf32] : {std::pair{DType::BF16, false}, std::pair{DType::F16, false},
                                      std::pair{DType::F32, true}}) {
      const Row r = measure(k, size, dtype, tf32, iters);
      rows.push_back(r);
      const std::string shape = std::to_string(size) + "^3 (x W^T)";
      std::printf("%-18s %-12s %12.1f %16.1f %14.3f\n", shape.c_str(), dtype_label(r).c_str(), r.tflops(r.demi_ms),
                  r.tflops(r.cublaslt_ms), r.cublaslt_ms / r.demi_ms);
      std::fflush(stdout);
    }
  }
  if (!json.empty()) write_json(json, rows);
  return 0;
}
