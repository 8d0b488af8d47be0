// The host side of the AMX-INT8 product (GemmInt8Amx.cpp, compiled for AMX): whether
// it may run, and x's quantized rows packed as its B operand. Plain flags, so that the
// standard library's code here runs on any CPU.
#include "ops/fast/AmxTileConfig.h"
#include "ops/fast/QuantizedActivations.h"

#include <cstdint>
#include <cstring>
#include <sys/syscall.h>
#include <unistd.h>

namespace dsrt::ops::fast {

bool amxTileDataGranted() {
  static const bool granted = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("amx-tile"))
      return false;
    constexpr long kRequestPermission = 0x1023, kTileData = 18;
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
  }();
  return granted;
}

bool int8AmxAvailable() {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("amx-int8") && __builtin_cpu_supports("avx512bw") &&
           amxTileDataGranted();
  }();
  return available;
}

// The tiles start on a cache line within out.tiles (which holds a line more): a tile row
// straddling two lines made each tile load two (measured: a block's product 1.3x slower
// with x misaligned by 16 bytes, as a vector's storage from malloc is).
int8_t *packedTiles(Int8AmxPacked &out) {
  constexpr uintptr_t kLine = 64;
  return out.tiles.data() +
         (kLine - reinterpret_cast<uintptr_t>(out.tiles.data()) % kLine) % kLine;
}

void packInt8ActivationsForAmx(const Int8Activations &x, int64_t in, Int8AmxPacked &out) {
  prepareInt8AmxPacking(x, in, out);
  packInt8AmxRows(x, in, 0, out.operands.paddedRows, out);
}

void prepareInt8AmxPacking(const Int8Activations &x, int64_t in, Int8AmxPacked &out) {
  prepareInt8AmxPacking(x.rows, in, out);
}

void prepareInt8AmxPacking(int64_t rows, int64_t in, Int8AmxPacked &out) {
  constexpr int64_t kBlock = 32, kLine = 64;
  const int64_t blocks = in / kBlock, paddedRows = (rows + 15) / 16 * 16;
  out.tiles.resize(static_cast<size_t>(paddedRows * in + kLine));
  out.scales.resize(static_cast<size_t>(blocks * paddedRows));
  out.surpluses.resize(static_cast<size_t>(blocks * paddedRows));
  out.operands = {packedTiles(out), out.scales.data(), out.surpluses.data(), rows, paddedRows};
}

void packInt8AmxRows(const Int8Activations &x, int64_t in, int64_t begin, int64_t end,
                     Int8AmxPacked &out) {
  constexpr int64_t kBlock = 32;
  const int64_t blocks = in / kBlock, paddedRows = out.operands.paddedRows;
  int8_t *const tiles = packedTiles(out);
  // Every lane is written below: the rows of x, then zeros for the padding rows (whose sums
  // are never read, but stay defined), so nothing is filled twice.
  for (int64_t r = begin; r < end; ++r) {
    const int64_t tile = r / 16, lane = r % 16;
    if (r >= x.rows) {
      for (int64_t b = 0; b < blocks; ++b) {
        int8_t *block = tiles + (tile * blocks + b) * 512 + lane * 4;
        for (int64_t quad = 0; quad < kBlock / 4; ++quad)
          std::memset(block + quad * 64, 0, 4);
        out.scales[static_cast<size_t>(b * paddedRows + r)] = 0.0f;
        out.surpluses[static_cast<size_t>(b * paddedRows + r)] = 0;
      }
      continue;
    }
    const QuantizedInt8Row &row = x.quantized[static_cast<size_t>(r)];
    for (int64_t b = 0; b < blocks; ++b) {
      int8_t *block = tiles + (tile * blocks + b) * 512 + lane * 4;
      for (int64_t quad = 0; quad < kBlock / 4; ++quad)
        std::memcpy(block + quad * 64, row.values.data() + b * kBlock + quad * 4, 4);
      // The block's scale is on each of its lanes, its surplus on the first (DotVnni.cpp's
      // quantizeRow).
      const size_t lane = static_cast<size_t>((b / 2) * 16 + (b % 2) * 8);
      out.scales[static_cast<size_t>(b * paddedRows + r)] = row.laneScales[lane];
      out.surpluses[static_cast<size_t>(b * paddedRows + r)] = row.surplusLanes[lane];
    }
  }
}

} // namespace dsrt::ops::fast
