// The plan file (.dsp) on the runtime side: opened, verified and mapped read-only
// (docs/design.md §4). `PlanFile::open` maps only the prelude and the FlatBuffer header and
// checks them completely (checksum, FlatBuffers verifier, every index and offset), so that
// everything reachable through `plan()` can be used without further checks. A rank's
// weight section is mapped, and its checksum verified, when `section(rank)` first asks
// for it: a rank never touches the other ranks' weights.
//
// What "verified" guarantees to users of `plan()`:
//   * every tensor index in programs and steps is in [0, tensors) (step inputs may be -1),
//     every branch is in [0, programs) and no program reaches itself through branches;
//     an If step has its condition as input 0 and 2 branches whose branch_outputs match
//     its outputs in number;
//   * tensors: valid dtype and kind; dims >= 0 or -1 (dynamic); max_shape, when present,
//     has the shape's rank, non-negative dims and the static dims' sizes; activations have
//     an aligned arena slot inside the arena, large enough for their max shape; weights
//     have a weight_index below every section's weight count, and the weight's dtype or,
//     both being floating-point, one the runtime converts the stored weight to;
//     constants hold exactly elements * dtype size bytes;
//   * attrs of kind tensor hold exactly elements * dtype size bytes, kind type a valid dtype;
//   * one section per rank, in rank order (sections[i].rank == i), page aligned, after the
//     header, inside the file, not overlapping; all sections have the same weights (count,
//     names, dtypes) and each weight lies inside its section, 64-byte aligned, holding
//     exactly elements * dtype size bytes, in ascending non-overlapping order.
#ifndef DSRT_PLAN_PLANFILE_H
#define DSRT_PLAN_PLANFILE_H

#include "PlanFormat.h"
#include "core/Status.h"
#include "core/Tensor.h"
#include "plan_generated.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dsrt {

// One rank's weight section, mapped read-only and checksum-verified. Valid as long as the
// PlanFile that returned it.
class PlanSection {
public:
  int rank() const { return rank_; }
  const uint8_t *data() const { return data_; }  // null when the section is empty
  uint64_t size() const { return size_; }
  const dsp::WeightSection &table() const { return *table_; }

  size_t weightCount() const;
  // `index` < weightCount() (the caller's responsibility; weight_index values in the
  // plan's tensors are already checked).
  const dsp::WeightEntry &entry(size_t index) const;
  const uint8_t *weightData(size_t index) const;  // 64-byte aligned
  // dtype, shape and bytes of a weight. The memory is mapped read-only: never write to it.
  TensorRef weight(size_t index) const;

private:
  friend class PlanFile;
  int rank_ = 0;
  const uint8_t *data_ = nullptr;
  uint64_t size_ = 0;
  const dsp::WeightSection *table_ = nullptr;
};

class PlanFile {
public:
  // Opens and verifies `path` (not the sections' checksums: see section()). Messages
  // start with `path`.
  static Status open(const std::string &path, std::unique_ptr<PlanFile> &out);
  ~PlanFile();
  PlanFile(const PlanFile &) = delete;
  PlanFile &operator=(const PlanFile &) = delete;

  const std::string &path() const { return path_; }
  const dsp::format::Prelude &prelude() const { return prelude_; }
  const dsp::Plan &plan() const { return *plan_; }
  const uint8_t *headerData() const { return header_; }
  uint64_t headerSize() const { return prelude_.headerSize; }
  uint64_t fileSize() const { return prelude_.fileSize; }
  int rankCount() const;

  // Maps rank `rank`'s section and verifies its checksum, once; later calls return the
  // same view (or the same error). Safe to call from several threads.
  Status section(int rank, const PlanSection *&out);
  // Checksums every section (dsp-dump --verify-sections, tests); the first error.
  Status verifyAllSections();

private:
  struct RankState;
  PlanFile();
  Status mapSection(int rank, RankState &state);

  std::string path_;
  int fd_ = -1;
  void *headerMap_ = nullptr;
  size_t headerMapBytes_ = 0;
  dsp::format::Prelude prelude_{};
  const uint8_t *header_ = nullptr;
  const dsp::Plan *plan_ = nullptr;
  std::vector<std::unique_ptr<RankState>> ranks_;
};

// Part of verifyPlanHeader, after the structure is known to be sound: the inputs the
// generator writes (token ids, masks, positions, an encoder's output, past keys and values)
// have dtypes and ranks it can write (PlanRoleInputs.cpp).
Status verifyRoleInputs(const std::string &name, const dsp::Plan &plan);

// The header checks of PlanFile::open on a FlatBuffer in memory (8-byte aligned), for a
// file of `fileSize` bytes whose header occupies [64, 64 + headerSize). The plan writer
// runs them before it streams any weight, so a plan the runtime would reject is never
// written. `name` prefixes the messages. Section checksums are not looked at.
Status verifyPlanHeader(const std::string &name, const uint8_t *header, uint64_t headerSize,
                        uint64_t fileSize);

// The dtype of the plan file as the runtime's DType; Undefined for values outside the enum.
DType planDType(dsp::DType dtype);

// Bytes of `rank`'s weights that one run of `program` reads whole: every weight its steps
// (and their branches) take, counted once. Embedding tables (tfm.embedding's input 1) count
// for nothing: a step reads only its ids' rows. This over the memory bandwidth is the
// least time a weight-bound step (batch-1 decode) can take. A mixture of experts (tfm.moe)
// reads only the experts its tokens choose: with `tokens` (the step's tokens, all
// sequences), min(E, tokens * k) of its E experts' bytes; with 0, all of them.
Status programWeightBytes(const dsp::Plan &plan, int rank, const std::string &program,
                          uint64_t &out, int64_t tokens = 0);

} // namespace dsrt

#endif
