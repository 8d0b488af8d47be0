// The serving engine over MPI ranks (Engine.h, createRank): rank 0 sends each step's rows,
// the others run them until rank 0's engine is gone.
#include "engine/Engine.h"

#include <cstdio>
#include <cstring>

namespace dsrt::engine {

// A step as rank 0 sends it: [T, R, ids, positions, logits rows, then per row its position
// and its block count and blocks]. Empty: the leader is gone.
Status Engine::sendStep(const std::vector<int64_t> &ids, const std::vector<int64_t> &positions,
                        const std::vector<ops::KvPagedRow> &rows,
                        const std::vector<int64_t> &logitsRows) {
  std::vector<int64_t> record = {static_cast<int64_t>(ids.size()),
                                 static_cast<int64_t>(logitsRows.size())};
  record.insert(record.end(), ids.begin(), ids.end());
  record.insert(record.end(), positions.begin(), positions.end());
  record.insert(record.end(), logitsRows.begin(), logitsRows.end());
  for (const ops::KvPagedRow &row : rows) {
    record.push_back(row.blockCount);
    record.insert(record.end(), row.blocks, row.blocks + row.blockCount);
  }
  std::vector<uint8_t> bytes(record.size() * sizeof(int64_t));
  std::memcpy(bytes.data(), record.data(), bytes.size());
  return group_->broadcastFromRank0(bytes);
}

Status Engine::follow() {
  if (leads())
    return Status::error("rank 0 leads the engine: it steps, the other ranks follow");
  for (;;) {
    std::vector<uint8_t> bytes;
    DSRT_RETURN_IF_ERROR(group_->broadcastFromRank0(bytes));
    if (bytes.empty())
      return Status::ok();
    std::vector<int64_t> record(bytes.size() / sizeof(int64_t));
    std::memcpy(record.data(), bytes.data(), record.size() * sizeof(int64_t));
    // Checked as it is read: a record that does not add up is rank 0's bug, not a crash.
    size_t at = 0;
    auto take = [&](int64_t count, std::vector<int64_t> &into) {
      if (count < 0 || at + static_cast<size_t>(count) > record.size())
        return false;
      into.assign(record.begin() + at, record.begin() + at + count);
      at += static_cast<size_t>(count);
      return true;
    };
    std::vector<int64_t> head, ids, positions, logitsRows;
    if (!take(2, head) || head[0] < 1 || !take(head[0], ids) || !take(head[0], positions) ||
        !take(head[1], logitsRows))
      return Status::error("rank 0's step record is malformed");
    std::vector<std::vector<int32_t>> tables(ids.size());
    std::vector<ops::KvPagedRow> rows(ids.size());
    for (size_t r = 0; r < ids.size(); ++r) {
      std::vector<int64_t> count, blocks;
      if (!take(1, count) || !take(count[0], blocks))
        return Status::error("rank 0's step record is malformed");
      tables[r].assign(blocks.begin(), blocks.end());
      rows[r] = {tables[r].data(), count[0], positions[r]};
    }
    // A failed step fails on rank 0 too, which ends the requests it ran.
    Status ran = runRows(ids, positions, rows, logitsRows);
    if (!ran.isOk())
      std::fprintf(stderr, "dsrt: engine rank %d: %s\n", group_->rank(), ran.message().c_str());
  }
}


} // namespace dsrt::engine
