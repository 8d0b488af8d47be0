#include "session/Session.h"

#include <algorithm>
#include <numeric>

namespace dsrt {
namespace {

struct Candidate {
  float value;
  int64_t id;
};

// A strict total order on a row without NaN: the larger logit, then the lower index.
bool better(const Candidate &a, const Candidate &b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

// The `count` best of row[0, vocab) (no NaN), best first: the prefix std::partial_sort gives
// under the same order. One pass with a heap of the best so far, the worst on top; once it
// is full, each block of 16 logits is first compared with the worst as a whole (which the
// compiler vectorises), and most blocks of a vocabulary hold nothing better.
void selectBest(const float *row, int64_t vocab, int64_t count, std::vector<float> &values,
                std::vector<int64_t> &ids) {
  constexpr int64_t kBlock = 16;
  std::vector<Candidate> heap;
  heap.reserve(static_cast<size_t>(count));
  for (int64_t block = 0; block < vocab; block += kBlock) {
    const int64_t end = std::min(vocab, block + kBlock);
    if (static_cast<int64_t>(heap.size()) == count) {
      // A later index never beats an equal logit held: only a larger one gets in.
      const float worst = heap.front().value;
      bool any = false;
      for (int64_t i = block; i < end; ++i)
        any |= row[i] > worst;
      if (!any)
        continue;
    }
    for (int64_t i = block; i < end; ++i) {
      Candidate candidate{row[i], i};
      if (static_cast<int64_t>(heap.size()) < count) {
        heap.push_back(candidate);
        std::push_heap(heap.begin(), heap.end(), better);
      } else if (better(candidate, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), better);
        heap.back() = candidate;
        std::push_heap(heap.begin(), heap.end(), better);
      }
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  for (const Candidate &candidate : heap) {
    values.push_back(candidate.value);
    ids.push_back(candidate.id);
  }
}

} // namespace

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
    bool nan = false;
    for (int64_t i = 0; i < vocab; ++i)
      nan |= row[i] != row[i];
    if (!nan) {
      selectBest(row.data(), vocab, count, values[b], ids[b]);
      continue;
    }
    // NaN compares with nothing: the order below is what the selection always meant there.
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
