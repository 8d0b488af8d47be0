// Helpers of the plan tests: a scratch folder, whole-file reads and writes, rewriting a
// plan's header (to make plans the writer refuses to make), and a walk over everything a
// verified plan promises to be safe to use.
#ifndef DSRT_TEST_PLAN_PLANTESTSUPPORT_H
#define DSRT_TEST_PLAN_PLANTESTSUPPORT_H

#include "plan/PlanFile.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace plantest {

// A fresh folder under $TMPDIR, removed with its files.
class ScratchDir {
public:
  ScratchDir();
  ~ScratchDir();
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }
  std::vector<std::string> entries() const;  // file names, sorted

private:
  std::string path_;
};

std::vector<uint8_t> readFile(const std::string &path);
void writeFile(const std::string &path, const std::vector<uint8_t> &bytes);

// The file with its header replaced by `mutate`d copy of it: the header is repacked
// (FlatBuffers object API, every scalar stored), the sections move by whole pages if the
// header needs more room (offsets are shifted before `mutate` runs, so it may edit them
// relative to the real layout), and the prelude gets the new size and checksum.
std::vector<uint8_t> rewriteHeader(const std::vector<uint8_t> &file,
                                   const std::function<void(dsp::PlanT &)> &mutate);

// Re-stamps the prelude's header checksum after the header bytes were changed in place.
void restampHeaderChecksum(std::vector<uint8_t> &file);

// Opens `path` and verifies every section; on success also reads every field and every
// weight byte through the indices the verifier vouched for (under ASan this proves they
// are safe). Returns the first error, or ok.
dsrt::Status openAndWalk(const std::string &path);

} // namespace plantest

#endif
