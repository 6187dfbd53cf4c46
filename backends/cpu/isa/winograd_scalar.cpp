// Plain C++ Winograd F(2x2, 3x3) transforms (layouts in winograd.h): the oracle of the vector
// transforms and the `scalar` level. Lanes are plain indices here, so any lane width works.
#include <cstring>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

void split_columns(const float* x, int64_t h, int64_t w, int64_t n, int64_t rows, float* e, float* o) {
  std::memset(e, 0, sizeof(float) * rows * n);
  std::memset(o, 0, sizeof(float) * rows * n);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t j = 0; 2 * j < w; ++j) o[(y + 1) * n + j] = x[y * w + 2 * j];
    for (int64_t j = 0; 2 * j + 1 < w; ++j) e[(y + 1) * n + j + 1] = x[y * w + 2 * j + 1];
  }
}

void split_lanes(const float* const* x, int64_t images, int64_t h, int64_t w, int64_t tw, int64_t rows, float* e0,
                 float* e1, float* o0, float* o1) {
  const int64_t lanes = images * tw;
  for (int64_t g = 0; g < images; ++g) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t y = r - 1;  // padded row r is the plane's row r - 1, padded column c its column c - 1
      auto at = [&](int64_t column) { return y >= 0 && y < h && column >= 0 && column < w ? x[g][y * w + column] : 0.0f; };
      for (int64_t tx = 0; tx < tw; ++tx) {
        const int64_t l = r * lanes + g * tw + tx;
        e0[l] = at(2 * tx - 1);  // e[tx], o[tx], e[tx + 1], o[tx + 1] of split_columns
        o0[l] = at(2 * tx);
        e1[l] = at(2 * tx + 1);
        o1[l] = at(2 * tx + 2);
      }
    }
  }
}

void transform_input(const SplitLanes& s, int64_t th, float* v, int64_t ld) {
  for (int64_t ty = 0; ty < th; ++ty) {
    for (int i = 0; i < 4; ++i) {
      const int64_t a = (2 * ty + (i == 0 ? 0 : i == 2 ? 2 : 1)) * s.stride;
      const int64_t b = (2 * ty + (i == 0 ? 2 : i == 1 ? 2 : i == 2 ? 1 : 3)) * s.stride;
      auto row = [i](float x, float y) { return i == 1 ? x + y : x - y; };
      float* v0 = v + (4 * i) * ld + ty * s.lanes;
      for (int64_t l = 0; l < s.lanes; ++l) {
        const float e0 = row(s.e0[a + l], s.e0[b + l]), o0 = row(s.o0[a + l], s.o0[b + l]);
        const float e1 = row(s.e1[a + l], s.e1[b + l]), o1 = row(s.o1[a + l], s.o1[b + l]);
        v0[l] = e0 - e1;
        v0[ld + l] = o0 + e1;
        v0[2 * ld + l] = e1 - o0;
        v0[3 * ld + l] = o0 - o1;
      }
    }
  }
}

void transform_output(const float* m, int64_t ld, int64_t oh, int64_t ow, int64_t th, int64_t tw, int64_t images,
                      float bias, float* const* y) {
  const int64_t lanes = images * tw;
  for (int64_t ty = 0; ty < th; ++ty) {
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const float* p = m + ty * lanes + lane;
      float s0[4], s1[4];  // rows 0 and 1 of A^T m
      for (int j = 0; j < 4; ++j) {
        const float m0 = p[j * ld], m1 = p[(4 + j) * ld], m2 = p[(8 + j) * ld], m3 = p[(12 + j) * ld];
        s0[j] = m0 + m1 + m2;
        s1[j] = m1 - m2 - m3;
      }
      const float out[2][2] = {{s0[0] + s0[1] + s0[2] + bias, s0[1] - s0[2] - s0[3] + bias},
                               {s1[0] + s1[1] + s1[2] + bias, s1[1] - s1[2] - s1[3] + bias}};
      const int64_t g = lane / tw, tx = lane % tw;
      for (int r = 0; r < 2 && 2 * ty + r < oh; ++r) {
        for (int c = 0; c < 2 && 2 * tx + c < ow; ++c) y[g][(2 * ty + r) * ow + 2 * tx + c] = out[r][c];
      }
    }
  }
}

void split_grad_output(const float* gy, int64_t oh, int64_t ow, int64_t lanes, int64_t lane0, float* e, float* o) {
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t j = 0; 2 * j < ow; ++j) e[y * lanes + lane0 + j] = gy[y * ow + 2 * j];
    for (int64_t j = 0; 2 * j + 1 < ow; ++j) o[y * lanes + lane0 + j] = gy[y * ow + 2 * j + 1];
  }
}

void split_grad_lanes(const float* const* gy, int64_t images, int64_t oh, int64_t ow, int64_t tw, int64_t rows,
                      float* e, float* o) {
  const int64_t lanes = images * tw;
  for (int64_t g = 0; g < images; ++g) {
    for (int64_t y = 0; y < rows; ++y) {
      auto at = [&](int64_t x) { return y < oh && x < ow ? gy[g][y * ow + x] : 0.0f; };
      for (int64_t tx = 0; tx < tw; ++tx) {
        e[y * lanes + g * tw + tx] = at(2 * tx);
        o[y * lanes + g * tw + tx] = at(2 * tx + 1);
      }
    }
  }
}

void transform_grad_output(const float* e, const float* o, int64_t th, int64_t lanes, float* z, int64_t ld) {
  for (int64_t ty = 0; ty < th; ++ty) {
    for (int64_t l = 0; l < lanes; ++l) {
      const float e0 = e[2 * ty * lanes + l], e1 = e[(2 * ty + 1) * lanes + l];
      const float o0 = o[2 * ty * lanes + l], o1 = o[(2 * ty + 1) * lanes + l];
      const float re[4] = {e0, e0 + e1, e0 - e1, 0.0f - e1};
      const float ro[4] = {o0, o0 + o1, o0 - o1, 0.0f - o1};
      for (int i = 0; i < 4; ++i) {
        float* zi = z + (4 * i) * ld + ty * lanes + l;
        zi[0] = re[i];
        zi[ld] = re[i] + ro[i];
        zi[2 * ld] = re[i] - ro[i];
        zi[3 * ld] = 0.0f - ro[i];
      }
    }
  }
}

}  // namespace

extern const Winograd kWinogradScalar = {16,           split_columns,     split_lanes,         transform_input,
                                         transform_output, split_grad_output, split_grad_lanes, transform_grad_output};

}  // namespace demi::backend::cpu::isa
