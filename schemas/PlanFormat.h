// The fixed part of a plan file (.dsp) that sits outside the FlatBuffer: the 64-byte
// prelude and the alignment rules. Shared by the writer (codegen/PlanWriter) and the loader
// (runtime/src/plan/PlanFile), so both agree on one definition; plain C++ so that neither
// side needs FlatBuffers to read it. The layout is documented in plan.fbs.
#ifndef DSP_PLAN_FORMAT_H
#define DSP_PLAN_FORMAT_H

#include <cstdint>
#include <cstring>

namespace dsp::format {

// The prelude is copied to and from the file byte for byte; the format is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the plan file format is little-endian; add byte swapping for this host");

inline constexpr char kMagic[8] = {'D', 'S', 'P', 'L', 'A', 'N', '\0', '\0'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint64_t kPreludeSize = 64;
// The header starts right after the prelude; a file offset of 64 keeps the FlatBuffer's
// 8-byte scalars aligned in a page-aligned mapping.
inline constexpr uint64_t kHeaderOffset = kPreludeSize;
// Sections are page aligned so that a rank can mmap exactly its own section.
inline constexpr uint64_t kSectionAlignment = 4096;
// Tensors are aligned for vector loads and for cudaMemcpy/cp.async from the mapping.
inline constexpr uint64_t kTensorAlignment = 64;
// The FlatBuffer's file identifier (plan.fbs `file_identifier`).
inline constexpr char kFileIdentifier[] = "DSP1";

struct Prelude {
  char magic[8];
  uint32_t formatVersion;
  uint32_t reserved0;       // zero
  uint64_t headerOffset;    // kHeaderOffset
  uint64_t headerSize;      // bytes of the FlatBuffer
  uint64_t headerChecksum;  // XXH3-64 of the FlatBuffer's bytes
  uint64_t fileSize;        // the whole file, so truncation is detected before any use
  uint8_t reserved1[16];    // zero
};
static_assert(sizeof(Prelude) == kPreludeSize, "the prelude is exactly 64 bytes");

inline Prelude makePrelude(uint64_t headerSize, uint64_t headerChecksum, uint64_t fileSize) {
  Prelude prelude;
  std::memset(&prelude, 0, sizeof prelude);
  std::memcpy(prelude.magic, kMagic, sizeof kMagic);
  prelude.formatVersion = kFormatVersion;
  prelude.headerOffset = kHeaderOffset;
  prelude.headerSize = headerSize;
  prelude.headerChecksum = headerChecksum;
  prelude.fileSize = fileSize;
  return prelude;
}

inline void encodePrelude(const Prelude &prelude, uint8_t (&bytes)[kPreludeSize]) {
  std::memcpy(bytes, &prelude, kPreludeSize);
}

inline Prelude decodePrelude(const uint8_t (&bytes)[kPreludeSize]) {
  Prelude prelude;
  std::memcpy(&prelude, bytes, kPreludeSize);
  return prelude;
}

// `alignment` is a power of two; the caller keeps `value` far from UINT64_MAX.
constexpr uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

} // namespace dsp::format

#endif
