// Internal to dsrt_ops: AMX's tile configuration (the 64-byte operand of ldtilecfg, palette
// 1), shared by the files compiled for AMX (AttentionAmx.cpp, GemmInt8Amx.cpp).
#ifndef DSRT_OPS_FAST_AMXTILECONFIG_H
#define DSRT_OPS_FAST_AMXTILECONFIG_H

#include <cstdint>

namespace dsrt::ops::fast {

// Linux keeps AMX's tile data off until a process asks (ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); without it the first tile instruction faults. Asked once per
// process, whoever asks first (Int8Amx.cpp; plain flags).
bool amxTileDataGranted();

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t startRow = 0;
  uint8_t reserved[14] = {};
  uint16_t bytesPerRow[16] = {};
  uint8_t rows[16] = {};

  AmxTileConfig &tile(int index, uint8_t tileRows, uint16_t rowBytes) {
    rows[index] = tileRows;
    bytesPerRow[index] = rowBytes;
    return *this;
  }
};

} // namespace dsrt::ops::fast

#endif
