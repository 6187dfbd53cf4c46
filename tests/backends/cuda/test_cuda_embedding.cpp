// Pins backends/cuda/embedding.cu against the CPU backend: the forward's rows and the backward's
// sums (ascending position, fp32 accumulation, padding row and unnamed rows zero) bit for bit in
// every floating dtype, with a hot row, and the same errors for an index out of range.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"
#include "support/error_of.h"

namespace demi::backend {
namespace {

using namespace cuda_test;
using test::error_of;
using testing::HasSubstr;

std::vector<uint8_t> index_bytes(const std::vector<int64_t>& ids) {
  std::vector<uint8_t> bytes(ids.size() * sizeof(int64_t));
  if (!ids.empty()) std::memcpy(bytes.data(), ids.data(), bytes.size());
  return bytes;
}

std::vector<int64_t> random_ids(int64_t M, int64_t V, int64_t hot, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> pick(0, V - 1);
  std::vector<int64_t> ids(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) ids[m] = m % 3 == 0 ? hot : pick(gen);
  return ids;
}

struct Case {
  int64_t V, D, M;
  int64_t padding_idx;
};
const std::vector<Case> kCases = {{1, 1, 1, -1}, {9, 21, 300, 2}, {1000, 64, 20000, -1}, {50, 3, 70000, 7}, {5, 4, 0, -1}};

TEST(CudaEmbedding, ForwardAndBackwardMatchCpuBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (DType dtype : kFloatDTypes) {
    for (const Case& c : kCases) {
      const std::string what = std::string(dtype_name(dtype)) + " V=" + std::to_string(c.V) + " D=" +
                               std::to_string(c.D) + " M=" + std::to_string(c.M);
      const std::vector<uint8_t> w = encode(uniform(static_cast<size_t>(c.V * c.D), -2.0, 2.0, 1), dtype);
      const std::vector<uint8_t> g = encode(uniform(static_cast<size_t>(c.M * c.D), -1.0, 1.0, 2), dtype);
      const std::vector<uint8_t> ids = index_bytes(random_ids(c.M, c.V, c.V / 2, 3));
      std::vector<uint8_t> ids_cpu = ids, w_cpu = w, g_cpu = g;
      std::vector<uint8_t> y_cpu(g.size()), gw_cpu(w.size());
      EmbeddingArgs a;
      a.weight = {w_cpu.data(), {c.V, c.D}, dtype};
      a.indices = {ids_cpu.data(), {c.M}, DType::I64};
      a.output = {y_cpu.data(), {c.M, c.D}, dtype};
      a.grad_output = {g_cpu.data(), {c.M, c.D}, dtype};
      a.grad_weight = {gw_cpu.data(), {c.V, c.D}, dtype};
      a.padding_idx = c.padding_idx;
      cpu().embedding_forward(a);
      cpu().embedding_backward(a);

      Buffer dw(gpu(), w), dids(gpu(), ids.size() + 8), dg(gpu(), g.size() + 8), dy(gpu(), g.size() + 8),
          dgw(gpu(), w.size());
      if (!ids.empty()) gpu().copy_from_host(ids.data(), dids.data(), ids.size());
      if (!g.empty()) gpu().copy_from_host(g.data(), dg.data(), g.size());
      a.weight = dw.ref({c.V, c.D}, dtype);
      a.indices = dids.ref({c.M}, DType::I64);
      a.output = dy.ref({c.M, c.D}, dtype);
      a.grad_output = dg.ref({c.M, c.D}, dtype);
      a.grad_weight = dgw.ref({c.V, c.D}, dtype);
      gpu().embedding_forward(a);
      gpu().embedding_backward(a);
      std::vector<uint8_t> y = dy.read();
      y.resize(y_cpu.size());
      expect_same(y, y_cpu, dtype, what + " forward");
      expect_same(dgw.read(), gw_cpu, dtype, what + " backward");
    }
  }
}

TEST(CudaEmbedding, AnIndexOutOfRangeIsTheCpusError) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<uint8_t> ids = index_bytes({0, 4, 7, 1});
  Buffer w(gpu(), 5 * 3 * 4), dids(gpu(), ids), y(gpu(), 4 * 3 * 4), gw(gpu(), 5 * 3 * 4);
  EmbeddingArgs a;
  a.weight = w.ref({5, 3}, DType::F32);
  a.indices = dids.ref({2, 2}, DType::I64);
  a.output = y.ref({2, 2, 3}, DType::F32);
  a.grad_output = a.output;
  a.grad_weight = gw.ref({5, 3}, DType::F32);
  EXPECT_THAT(error_of([&] { gpu().embedding_forward(a); }),
              HasSubstr("embedding: index 7 at position [1, 0] of indices [2, 2] is out of range for 5 embeddings; "
                        "indices must be in [0, 5)"));
  EXPECT_THAT(error_of([&] { gpu().embedding_backward(a); }),
              HasSubstr("embedding_backward: index 7 at position [1, 0] of indices [2, 2]"));
  // The device is still usable afterwards.
  const std::vector<uint8_t> good = index_bytes({0, 4, 3, 1});
  gpu().copy_from_host(good.data(), dids.data(), good.size());
  EXPECT_NO_THROW(gpu().embedding_forward(a));
}

}  // namespace
}  // namespace demi::backend
