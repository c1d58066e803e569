// Checksums of tensor data, stored beside each tensor in checkpoints (an HDF5 attribute) and
// exports (safetensors __metadata__), so that a flipped bit in the data is detected on load.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "lat/tensor.h"

namespace lat {

/// CRC-32 (ISO-HDLC, zlib's crc32) of `size` bytes at `data`.
uint32_t crc32_of(const void* data, size_t size);

/// CRC-32 of a CPU f32 tensor's elements as stored in files (little-endian float32 bytes,
/// row-major). Throws lat::Error for another dtype or device.
uint32_t tensor_crc32(const Tensor& tensor);

/// The checksum as eight lower-case hex digits ("0000abcd"), as files store it.
std::string crc32_hex(uint32_t crc);

/// Throws lat::Error "<where>: checksum mismatch: stored crc32 <stored>, data has <actual>
/// (the file is damaged)" when `stored_hex` is not the hex of `actual`.
void verify_crc32(const std::string& stored_hex, uint32_t actual, const std::string& where);

}  // namespace lat
