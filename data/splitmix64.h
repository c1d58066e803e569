// splitmix64 (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number generators"):
// the counter-based hashing behind every data sample, so that a batch is a pure function of
// its (seed, split, step, micro-batch, row) key on any platform and library version.
#pragma once
#include <cstdint>

namespace lat {

/// splitmix64's output function: a bijective 64-bit mixer (one step of the generator
/// from state x).
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The splitmix64 stream started from `seed`, with exact bounded draws (no library
/// distributions, whose algorithms differ between standard libraries).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    const uint64_t out = mix64(state_);
    state_ += 0x9E3779B97F4A7C15ull;
    return out;
  }

  /// Uniform in [0, n), n >= 1, without bias: Lemire's multiply-shift with rejection
  /// (Lemire 2019, "Fast random integer generation in an interval").
  uint64_t below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace lat
