// Fuzz target: decode_cifar10_image (the image-folder decode path: signature check, stb_image's
// header then its decoder, the 32x32x3 check) on arbitrary bytes. Every input must decode into the
// 3072-byte buffer or give a demi::Error; ASan guards the buffer's edges.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "datasets/cifar10.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> chw(3 * 32 * 32);
  try {
    demi::data::decode_cifar10_image(data, size, "fuzz input", chw.data());
  } catch (const demi::Error&) {
  }
  return 0;
}
