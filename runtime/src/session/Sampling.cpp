#include "session/Session.h"

#include <algorithm>
#include <numeric>

namespace dsrt {

Status hostTopLogits(const TensorRef &logits, int64_t count,
                     std::vector<std::vector<float>> &values,
                     std::vector<std::vector<int64_t>> &ids) {
  if (logits.shape.size() < 2 || !isFloat(logits.dtype))
    return Status::error("topLogits: logits must be a float tensor [batch, ..., vocab]");
  int64_t batch = logits.shape[0], vocab = logits.shape.back();
  if (count < 1 || count > vocab)
    return Status::error("topLogits: count " + std::to_string(count) + " is not in [1, " +
                         std::to_string(vocab) + "]");
  int64_t perRow = batch > 0 ? logits.elements() / batch : 0;
  values.assign(static_cast<size_t>(batch), {});
  ids.assign(static_cast<size_t>(batch), {});
  std::vector<float> row(static_cast<size_t>(vocab));
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  for (int64_t b = 0; b < batch; ++b) {
    const uint8_t *last = static_cast<const uint8_t *>(logits.data) +
                          (b * perRow + perRow - vocab) * dtypeSize(logits.dtype);
    if (!convertFloats(logits.dtype, last, DType::F32, row.data(), vocab))
      return Status::error("topLogits: cannot convert the logits to f32");
    std::iota(order.begin(), order.end(), 0);
    // The index breaks ties, so that the partial sort gives stable_sort's prefix.
    std::partial_sort(order.begin(), order.begin() + count, order.end(),
                      [&](int64_t a, int64_t c) {
                        return row[a] > row[c] || (!(row[c] > row[a]) && a < c);
                      });
    for (int64_t i = 0; i < count; ++i) {
      values[b].push_back(row[order[i]]);
      ids[b].push_back(order[i]);
    }
  }
  return Status::ok();
}

Status Session::topLogits(std::string_view program, size_t index, int64_t count,
                          std::vector<std::vector<float>> &values,
                          std::vector<std::vector<int64_t>> &ids) {
  TensorRef logits;
  DSRT_RETURN_IF_ERROR(output(program, index, logits));
  return hostTopLogits(logits, count, values, ids);
}

} // namespace dsrt
