#include "CollectivesCheck.h"

#include <cstring>
#include <numeric>
#include <vector>

namespace dsrt::test {

std::string checkCollectives(ops::Collectives &c) {
  int rank = c.rank(), size = c.size();
  // Sum: rank r contributes (r + 1) * (i + 1); the total is (i + 1) * size (size + 1) / 2.
  std::vector<float> data(1000);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = float((rank + 1) * (i + 1));
  if (Status s = c.allReduceSum(data.data(), data.size()); !s.isOk())
    return s.message();
  for (size_t i = 0; i < data.size(); ++i)
    if (data[i] != float((i + 1) * size * (size + 1) / 2))
      return "all-reduce: element " + std::to_string(i) + " is " + std::to_string(data[i]);

  // Max of uint64 (the distributed argmax's keys): element i's largest value is on rank
  // i % size, with the top bit set so that a signed comparison would pick another rank's.
  std::vector<uint64_t> keys(37);
  for (size_t i = 0; i < keys.size(); ++i)
    keys[i] = int(i % size) == rank ? 0xF000000000000000ull + i : 0x7000000000000000ull + i + rank;
  if (Status s = c.allReduceMax(keys.data(), int64_t(keys.size())); !s.isOk())
    return s.message();
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] != 0xF000000000000000ull + i)
      return "all-reduce max: element " + std::to_string(i) + " is " + std::to_string(keys[i]);

  // Uneven gather: rank r sends r + 1 bytes of value r.
  std::vector<int64_t> bytes;
  for (int r = 0; r < size; ++r)
    bytes.push_back(r + 1);
  std::vector<uint8_t> mine(rank + 1, uint8_t(rank));
  std::vector<uint8_t> all(std::accumulate(bytes.begin(), bytes.end(), int64_t(0)));
  if (Status s = c.allGather(mine.data(), bytes, all.data()); !s.isOk())
    return s.message();
  size_t at = 0;
  for (int r = 0; r < size; ++r)
    for (int k = 0; k <= r; ++k, ++at)
      if (all[at] != r)
        return "all-gather: byte " + std::to_string(at) + " is " + std::to_string(all[at]);

  // tfm.all_gather along the last axis of [2, n_r] with n_r = r + 1: rows interleave.
  int64_t total = int64_t(size) * (size + 1) / 2;
  OwnedTensor shard(DType::F32, {2, rank + 1});
  auto *values = reinterpret_cast<float *>(shard.storage.data());
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t k = 0; k <= rank; ++k)
      values[row * (rank + 1) + k] = float(100 * row + 10 * rank + k);
  std::vector<int64_t> sizes;
  for (int r = 0; r < size; ++r)
    sizes.push_back(r + 1);
  ops::AttrMap attrs = {{"axis", ops::Attr::ofInt(-1)},
                        {"ranks", ops::Attr::ofInt(size)},
                        {"sizes", ops::Attr::ofInts(sizes)}};
  TensorRef in = shard.ref();
  std::vector<ops::OutputSpec> specs;
  if (Status s = ops::inferShapes("tfm.all_gather", attrs, {&in}, 1, specs); !s.isOk())
    return s.message();
  OwnedTensor gathered(specs[0].dtype, specs[0].shape);
  TensorRef out = gathered.ref();
  ops::SessionState state;
  state.collectives = &c;
  if (Status s = ops::compute("tfm.all_gather", attrs, {&in}, {&out}, &state); !s.isOk())
    return s.message();
  const auto *got = reinterpret_cast<const float *>(gathered.storage.data());
  for (int64_t row = 0; row < 2; ++row) {
    int64_t column = 0;
    for (int r = 0; r < size; ++r)
      for (int k = 0; k <= r; ++k, ++column)
        if (got[row * total + column] != float(100 * row + 10 * r + k))
          return "tfm.all_gather: row " + std::to_string(row) + " column " +
                 std::to_string(column) + " is " + std::to_string(got[row * total + column]);
  }
  return "";
}

} // namespace dsrt::test
