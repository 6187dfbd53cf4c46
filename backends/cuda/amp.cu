// GradScaler's kernels on CUDA. unscale_check_finite is a multi-tensor pass (as PyTorch's
// multi_tensor_apply): a table of tensors and of (tensor, chunk) block assignments travels by value as
// the kernel's parameter, so one launch unscales and checks up to kMaxTensors gradients of any sizes
// and dtypes, a few launches a long list. update_scale is one thread. Neither reads scale, inv_scale
// or found_inf on the host: a training step stays free of synchronisations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kUnscaleThreads = 512;
constexpr int64_t kChunk = 16384;  // elements per block: 32 per thread
constexpr int kMaxTensors = 48;
constexpr int kMaxBlocks = 512;

// (input dtype, output dtype) of one gradient: in place, or a half / F64 gradient into fp32.
enum class UnscalePair : uint8_t { F32, F16, BF16, F64, F16ToF32, BF16ToF32, F64ToF32 };

// One launch's work: tensors [0, kMaxTensors) and, for each block b, its tensor and chunk (elements
// [chunk * kChunk, min((chunk + 1) * kChunk, numel))). Passed by value: it must stay under the 4 KB
// of kernel parameters every CUDA version and GPU accepts.
struct UnscaleTable {
  const void* in[kMaxTensors];
  void* out[kMaxTensors];
  int64_t numel[kMaxTensors];
  UnscalePair pair[kMaxTensors];
  uint8_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
};
static_assert(kMaxTensors <= 256, "block_tensor holds a tensor slot in a uint8_t");
static_assert(sizeof(UnscaleTable) + 2 * sizeof(void*) <= 4000, "unscale_kernel's parameters exceed 4 KB");

// A bit test rather than isfinite: no host/device overload questions, no fast-math assumptions.
__device__ inline bool is_finite(float v) { return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u; }

// out[i] = in[i] * inv_scale for i in [begin, end) by this block's threads, in fp32 (an F64 gradient
// too, as the CPU backend), rounded once into Out; returns whether this thread saw an inf or NaN.
template <typename In, typename Out>
__device__ inline bool unscale_range(const void* in, void* out, int64_t begin, int64_t end, float inv_scale) {
  const In* x = static_cast<const In*>(in);
  Out* y = static_cast<Out*>(out);
  bool non_finite = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = static_cast<float>(widen(x[i]));
    non_finite |= !is_finite(v);
    y[i] = Narrow<Out>::from(v * inv_scale);
  }
  return non_finite;
}

// Block b unscales chunk table.block_chunk[b] of tensor table.block_tensor[b]. *found_inf = 1 from
// every thread that saw an inf or NaN: the same value from many threads, so plain stores do.
__global__ void __launch_bounds__(kUnscaleThreads)
    unscale_kernel(const UnscaleTable table, const float* inv_scale, float* found_inf) {
  const int slot = table.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(table.block_chunk[blockIdx.x]) * kChunk;
  const int64_t numel = table.numel[slot];
  const int64_t end = begin + kChunk < numel ? begin + kChunk : numel;
  const void* in = table.in[slot];
  void* out = table.out[slot];
  const float s = *inv_scale;
  bool non_finite = false;
  switch (table.pair[slot]) {  // uniform across the block
    case UnscalePair::F32: non_finite = unscale_range<float, float>(in, out, begin, end, s); break;
    case UnscalePair::F16: non_finite = unscale_range<__half, __half>(in, out, begin, end, s); break;
    case UnscalePair::BF16: non_finite = unscale_range<__nv_bfloat16, __nv_bfloat16>(in, out, begin, end, s); break;
    case UnscalePair::F64: non_finite = unscale_range<double, double>(in, out, begin, end, s); break;
    case UnscalePair::F16ToF32: non_finite = unscale_range<__half, float>(in, out, begin, end, s); break;
    case UnscalePair::BF16ToF32: non_finite = unscale_range<__nv_bfloat16, float>(in, out, begin, end, s); break;
    case UnscalePair::F64ToF32: non_finite = unscale_range<double, float>(in, out, begin, end, s); break;
  }
  if (non_finite) *found_inf = 1.0f;
}

// PyTorch's _amp_update_scale_ (one thread): back off on inf/NaN, else grow every growth_interval
// clean steps, never into inf. The products are in double then rounded, as the CPU backend's.
__global__ void update_scale_kernel(float* scale, int64_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int64_t growth_interval,
                                    int64_t* step_counts) {
  const bool skipped = *found_inf != 0.0f;
  if (step_counts != nullptr) {  // taken, skipped, skipped in a row
    step_counts[skipped ? 1 : 0] += 1;
    step_counts[2] = skipped ? step_counts[2] + 1 : 0;
  }
  if (skipped) {
    *scale = static_cast<float>(*scale * backoff_factor);
    *growth_tracker = 0;
    return;
  }
  const int64_t successful = *growth_tracker + 1;
  if (successful >= growth_interval) {
    const float grown = static_cast<float>(*scale * growth_factor);
    if (is_finite(grown)) *scale = grown;
    *growth_tracker = 0;
  } else {
    *growth_tracker = successful;
  }
}

UnscalePair unscale_pair(DType in, DType out) {
  const bool same = in == out;
  switch (in) {
    case DType::F32: return UnscalePair::F32;
    case DType::F16: return same ? UnscalePair::F16 : UnscalePair::F16ToF32;
    case DType::BF16: return same ? UnscalePair::BF16 : UnscalePair::BF16ToF32;
    case DType::F64: return same ? UnscalePair::F64 : UnscalePair::F64ToF32;
    default: break;
  }
  DEMI_INTERNAL_CHECK(false, "unscale_check_finite: non-floating ", in, " reached the pair table");
  return UnscalePair::F32;
}

}  // namespace

// unscale_check_finite: in[k] and out[k] of the same numel (out[k] == in[k], or an fp32 buffer for a
// half or F64 in[k]), inv_scale and found_inf one-element fp32 tensors on this device.
void CudaKernels::unscale_check_finite_impl(const UnscaleArgs& args) {
  const DeviceGuard guard(index_);
  const float* inv_scale = args.inv_scale.as<const float>();
  float* found_inf = args.found_inf.as<float>();
  UnscaleTable table{};
  int tensors = 0, blocks = 0;
  auto launch = [&] {
    unscale_kernel<<<blocks, kUnscaleThreads, 0, stream_>>>(table, inv_scale, found_inf);
    DEMI_CUDA_LAUNCH_CHECK("unscale_kernel");
    tensors = 0;
    blocks = 0;
  };
  for (size_t k = 0; k < args.in.size(); ++k) {
    const int64_t numel = args.in[k].numel();
    if (numel == 0) continue;
    const int64_t chunks = (numel + kChunk - 1) / kChunk;
    DEMI_CHECK(chunks <= INT32_MAX, "unscale_check_finite: gradient ", k, " ", args.in[k].shape,
               " has too many elements for one tensor; split it");
    // A tensor whose chunks do not all fit in this launch continues in the next one.
    for (int64_t chunk = 0; chunk < chunks;) {
      if (tensors == kMaxTensors) launch();
      const int slot = tensors++;
      table.in[slot] = args.in[k].data;
      table.out[slot] = args.out[k].data;
      table.numel[slot] = numel;
      table.pair[slot] = unscale_pair(args.in[k].dtype, args.out[k].dtype);
      for (; chunk < chunks && blocks < kMaxBlocks; ++chunk, ++blocks) {
        table.block_tensor[blocks] = static_cast<uint8_t>(slot);
        table.block_chunk[blocks] = static_cast<int32_t>(chunk);
      }
      if (blocks == kMaxBlocks) launch();
    }
  }
  if (blocks > 0) launch();
}

// update_scale: scale (0-d F32), growth_tracker (0-d I64), found_inf (0-d F32), all on this device.
void CudaKernels::update_scale_impl(const ScaleUpdateArgs& args) {
  DEMI_CHECK(args.scale.numel() == 1 && args.growth_tracker.numel() == 1 && args.found_inf.numel() == 1,
             "update_scale: scale ", args.scale.shape, ", growth_tracker ", args.growth_tracker.shape,
             " and found_inf ", args.found_inf.shape, " must have one element each (0-d tensors)");
  const DeviceGuard guard(index_);
  update_scale_kernel<<<1, 1, 0, stream_>>>(args.scale.as<float>(), args.growth_tracker.as<int64_t>(),
                                           args.found_inf.as<const float>(), args.growth_factor,
                                           args.backoff_factor, args.growth_interval,
                                           args.step_counts.defined() ? args.step_counts.as<int64_t>() : nullptr);
  DEMI_CUDA_LAUNCH_CHECK("update_scale_kernel");
}

}  // namespace demi::backend::cuda
