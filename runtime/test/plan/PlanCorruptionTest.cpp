// Truncated and byte-flipped plans: every load either fails with a message or succeeds,
// never crashes (this test also runs under AddressSanitizer + UBSan). Raw flips must be
// caught by the prelude checks and the checksums, except in the padding that no checksum
// covers; flips in the header with the checksum re-stamped (a writer bug, or a forger)
// must be caught or be harmless to everything the verifier vouches for.
#include "PlanTestSupport.h"
#include "SamplePlan.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>

#include <fcntl.h>
#include <unistd.h>

namespace {

class PlanCorruption : public ::testing::Test {
protected:
  void SetUp() override {
    path_ = dir_.file("plan.dsp");
    dsrt::Status status = sample::write(path_);
    ASSERT_TRUE(status.isOk()) << status.message();
    original_ = plantest::readFile(path_);
    std::unique_ptr<dsrt::PlanFile> file;
    ASSERT_TRUE(dsrt::PlanFile::open(path_, file).isOk());
    headerEnd_ = 64 + file->headerSize();
    for (const dsp::WeightSection *s : *file->plan().sections())
      sections_.push_back({s->file_offset(), s->file_offset() + s->size()});
  }

  // Bytes that no check covers: between the header and the first section, and between
  // sections (the last section ends the file).
  bool isPadding(uint64_t offset) const {
    if (offset < headerEnd_)
      return false;
    for (auto [begin, end] : sections_)
      if (offset >= begin && offset < end)
        return false;
    return true;
  }

  // The load's outcome; a failure must carry a message that names the file.
  bool loads() {
    dsrt::Status status = plantest::openAndWalk(path_);
    if (!status.isOk()) {
      EXPECT_EQ(status.message().rfind(path_ + ": ", 0), 0u) << status.message();
      EXPECT_GT(status.message().size(), path_.size() + 2);
    }
    return status.isOk();
  }

  // Edits in place: rewriting the whole file each time is slow on ext4, which flushes a
  // file truncated and rewritten on close.
  void patch(uint64_t offset, const uint8_t *data, size_t size) {
    int fd = ::open(path_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, data, size, static_cast<off_t>(offset)), static_cast<ssize_t>(size));
    ::close(fd);
  }
  void patch(uint64_t offset, uint8_t value) { patch(offset, &value, 1); }

  // Writes `bytes` (a changed copy of the original) over the file where they differ from
  // what is there now, re-stamping the header checksum first.
  void patchHeader(std::vector<uint8_t> bytes, std::vector<uint8_t> &current) {
    plantest::restampHeaderChecksum(bytes);
    for (size_t i = 0; i < headerEnd_; ++i)
      if (bytes[i] != current[i])
        patch(i, bytes[i]);
    current = bytes;
  }

  plantest::ScratchDir dir_;
  std::string path_;
  std::vector<uint8_t> original_;
  uint64_t headerEnd_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> sections_;
};

TEST_F(PlanCorruption, EveryTruncationFails) {
  // Shrinking step by step: every length from the full size minus one down to empty.
  for (size_t size = original_.size(); size-- > 0;) {
    ASSERT_EQ(::truncate(path_.c_str(), static_cast<off_t>(size)), 0);
    EXPECT_FALSE(loads()) << "truncated to " << size << " bytes";
  }
}

// Every byte of the file, flipped two ways: caught everywhere except in uncovered padding.
TEST_F(PlanCorruption, RawFlipsAreCaughtOutsidePadding) {
  size_t caught = 0, padding = 0;
  for (uint64_t offset = 0; offset < original_.size(); ++offset) {
    for (uint8_t mask : {static_cast<uint8_t>(1u << (offset % 8)), uint8_t(0xff)}) {
      patch(offset, original_[offset] ^ mask);
      bool ok = loads();
      EXPECT_EQ(ok, isPadding(offset)) << "byte " << offset << " ^ " << int(mask);
      (ok ? padding : caught)++;
    }
    patch(offset, original_[offset]);
  }
  std::cout << "[ raw flips ] " << original_.size() << " bytes: " << caught << " caught, "
            << padding << " in padding\n";
  EXPECT_GT(caught, 0u);
}

// The header bytes flipped, with the checksum re-stamped: only the FlatBuffers verifier and
// the semantic checks stand between the bytes and the runtime. Each outcome is fine as
// long as a success is safe to use (openAndWalk reads all of it).
TEST_F(PlanCorruption, HeaderFlipsPastTheChecksum) {
  size_t failed = 0, loaded = 0;
  std::vector<uint8_t> current = original_;
  for (uint64_t offset = 64; offset < headerEnd_; ++offset) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<uint8_t> bytes = original_;
      uint8_t &b = bytes[offset];
      b = variant == 0 ? b ^ 0x01 : variant == 1 ? b ^ 0x80 : variant == 2 ? b ^ 0xff : 0x00;
      if (b == original_[offset])
        continue;
      patchHeader(std::move(bytes), current);
      (loads() ? loaded : failed)++;
    }
  }
  std::cout << "[ header flips ] " << (headerEnd_ - 64) << " header bytes: " << failed
            << " rejected, " << loaded << " loaded (unused or harmless bytes)\n";
  EXPECT_GT(failed, 0u);
}

// Several random bytes at once, anywhere in the header, checksum re-stamped.
// DSP_FUZZ_SEED and DSP_FUZZ_ROUNDS run other or longer campaigns by hand.
TEST_F(PlanCorruption, RandomHeaderDamage) {
  const char *seed = std::getenv("DSP_FUZZ_SEED");
  const char *roundsText = std::getenv("DSP_FUZZ_ROUNDS");
  std::mt19937_64 random(seed ? std::strtoull(seed, nullptr, 10) : 20240601);
  int rounds = roundsText ? std::atoi(roundsText) : 3000;
  size_t failed = 0, loaded = 0;
  std::vector<uint8_t> current = original_;
  for (int round = 0; round < rounds; ++round) {
    std::vector<uint8_t> bytes = original_;
    int count = 1 + static_cast<int>(random() % 8);
    for (int i = 0; i < count; ++i)
      bytes[64 + random() % (headerEnd_ - 64)] = static_cast<uint8_t>(random());
    patchHeader(std::move(bytes), current);
    (loads() ? loaded : failed)++;
  }
  std::cout << "[ random header damage ] " << rounds << " rounds: " << failed << " rejected, " << loaded
            << " loaded\n";
  EXPECT_GT(failed, 0u);
}

} // namespace
