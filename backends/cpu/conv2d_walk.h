// What the CPU convolutions (conv2d.cpp and the paths it chooses) share: their scratch slots and how
// they spread a batch over threads, as single images or groups of images side by side.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cpu/common.h"

namespace demi::backend::cpu::conv2d_walk {

// Scratch slots: kSlotWeight .. kSlotBiasPartial are taken by the calling thread before the image
// loop, kSlotCol .. kSlotGradY by every thread inside it (OpenMP thread 0 is the calling thread).
enum Slot {
  kSlotWeight = 0,
  kSlotBias = 1,
  kSlotPartial = 2,
  kSlotBiasPartial = 3,
  kSlotCol = 4,
  kSlotImage = 5,
  kSlotGradY = 6,
  kSlotPacked = 7,
  kSlotPackedCol = 8,
  kSlotGradYT = 9,
  kSlotWinograd = 10,  // backward-weight's per-thread dU sums, taken before the loop
  kSlotWide = 11,      // a half plane widened to fp32 for the Winograd transforms, inside the loop
};

inline int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// n floats rounded up to an odd number of 64-byte lines: the distance between two points of the
// Winograd walks' V and M (conv2d_winograd.cpp, conv2d_winograd4.cpp). The input transform writes
// 16 points at once and the output transform reads 16: with points a multiple of 4 KiB apart (32
// channels x 256 columns is 32 KiB) all 16 streams fall in one of L1's 64 sets, 12 ways deep. An
// odd number of lines apart they take 16 sets: SmallCNN's and AirNet's 32- and 64-channel passes
// ran 5-20% faster. conv2d_winograd.cpp's F(2x2) walk pads each channel's row to an odd number of
// lines as well: that gained nothing more on its own, but lets the GEMMs read B in place
// (packed_gemm.cpp's gemm_strips).
inline int64_t odd_lines(int64_t n) { return (ceil_div(n, 16) | 1) * 16; }

// Calls body(i) for every image: spread across threads (each GEMM then runs single-threaded, as
// Eigen does inside a parallel region) when there are enough images, else one after another with
// Eigen splitting each GEMM.
template <typename Body>
void for_each_image(int64_t count, int threads, Body&& body) {
  if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < count; ++i) body(i);
  } else {
    for (int64_t i = 0; i < count; ++i) body(i);
  }
}
// Threads a pass may spread over: the pool, or 1 inside a parallel region.
inline int available_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }
inline int image_threads(int64_t count) {
  const int threads = available_threads();
  return count >= threads ? threads : 1;
}

// How a pass cuts a batch: chunks of output rows of one image when a plane is large, groups of
// whole images side by side when it is small.
struct Walk {
  int64_t images;  // per group; > 1 only when rows == oh
  int64_t rows;    // output rows per chunk
};
// Images a group of n: at least min_group (clamped to [1, n]) and a whole number of groups per
// thread, so that no thread does a group more than another (AirNet's 3x3 layer at batch 128 on two
// threads: 4 groups of 32 images rather than 43, 43 | 42).
inline int64_t balanced_group(int64_t n, int64_t min_group, int threads) {
  min_group = std::clamp<int64_t>(min_group, 1, std::max<int64_t>(n, 1));
  return std::max<int64_t>(1, ceil_div(n, ceil_div(ceil_div(n, min_group), threads) * threads));
}

// Calls body(first image, image count) for every group of the walk over n images, groups spread
// over threads (threads == 0: as many as there are groups for, up to the pool). The groups are as
// many as groups of wk.images make, their sizes differing by one at most: 128 images in groups of 11
// are 10 or 11 a group, 64 a thread (as 11 a group and one of 7, a thread did 66 and the other 62).
template <typename Body>
void for_each_group(int64_t n, const Walk& wk, int threads, Body&& body) {
  const int64_t groups = ceil_div(n, wk.images);
  for_each_image(groups, threads > 0 ? threads : image_threads(groups), [&](int64_t gi) {
    const int64_t begin = gi * n / groups, end = (gi + 1) * n / groups;
    body(begin, end - begin);
  });
}

}  // namespace demi::backend::cpu::conv2d_walk
