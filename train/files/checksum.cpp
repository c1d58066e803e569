// Tensor checksums (checksum.h), computed by zlib.
#include "train/files/checksum.h"

#include <zlib.h>

#include <bit>
#include <cstdio>
#include <limits>

#include "lat/error.h"

namespace lat {

static_assert(std::endian::native == std::endian::little,
              "files store little-endian floats; the checksum is taken over host memory");

uint32_t crc32_of(const void* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = static_cast<const Bytef*>(data);
  // zlib takes uInt lengths: feed larger buffers in pieces.
  constexpr size_t kPiece = std::numeric_limits<uInt>::max() / 2;
  while (size > 0) {
    const size_t n = size < kPiece ? size : kPiece;
    crc = crc32(crc, bytes, static_cast<uInt>(n));
    bytes += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t tensor_crc32(const Tensor& tensor) {
  LAT_CHECK(tensor.defined() && tensor.dtype() == DType::f32 && tensor.device().is_cpu(),
            "tensor_crc32: expected a defined f32 CPU tensor");
  return crc32_of(tensor.data<float>(), static_cast<size_t>(tensor.numel()) * sizeof(float));
}

std::string crc32_hex(uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

void verify_crc32(const std::string& stored_hex, uint32_t actual, const std::string& where) {
  if (stored_hex != crc32_hex(actual))
    throw Error(where + ": checksum mismatch: stored crc32 '" + stored_hex + "', data has '" + crc32_hex(actual) +
                "' (the file is damaged)");
}

}  // namespace lat
