#include "comm/InProcessGroup.h"

#include <algorithm>
#include <cstring>

namespace dsrt {

class InProcessGroup::Member : public ops::Collectives {
public:
  Member(InProcessGroup &group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }

  // Publish, wait until every rank has, read everyone's, wait until everyone has read, then
  // write: nobody reads a buffer its owner is changing.
  Status allReduceSum(float *data, int64_t count) override {
    group_.published_[rank_] = data;
    DSRT_RETURN_IF_ERROR(group_.barrier());
    std::vector<float> sum(static_cast<size_t>(count), 0.0f);
    // Every rank adds in rank order, so all get bit-identical sums.
    for (int r = 0; r < size(); ++r) {
      const float *other = static_cast<const float *>(group_.published_[r]);
      for (int64_t i = 0; i < count; ++i)
        sum[i] += other[i];
    }
    DSRT_RETURN_IF_ERROR(group_.barrier());
    std::copy(sum.begin(), sum.end(), data);
    return Status::ok();
  }

  Status allReduceMax(uint64_t *data, int64_t count) override {
    group_.published_[rank_] = data;
    DSRT_RETURN_IF_ERROR(group_.barrier());
    std::vector<uint64_t> maximum(data, data + count);
    for (int r = 0; r < size(); ++r) {
      const uint64_t *other = static_cast<const uint64_t *>(group_.published_[r]);
      for (int64_t i = 0; i < count; ++i)
        maximum[i] = std::max(maximum[i], other[i]);
    }
    DSRT_RETURN_IF_ERROR(group_.barrier());
    std::copy(maximum.begin(), maximum.end(), data);
    return Status::ok();
  }

  Status allGather(const void *mine, const std::vector<int64_t> &bytes, void *out) override {
    if (static_cast<int>(bytes.size()) != size())
      return Status::error("all-gather: " + std::to_string(bytes.size()) + " sizes for " +
                           std::to_string(size()) + " ranks");
    group_.published_[rank_] = mine;
    DSRT_RETURN_IF_ERROR(group_.barrier());
    auto *target = static_cast<uint8_t *>(out);
    for (int r = 0; r < size(); ++r) {
      if (bytes[r])
        std::memcpy(target, group_.published_[r], static_cast<size_t>(bytes[r]));
      target += bytes[r];
    }
    return group_.barrier();
  }

private:
  InProcessGroup &group_;
  int rank_;
};

InProcessGroup::InProcessGroup(int size) : published_(size) {
  for (int r = 0; r < size; ++r)
    members_.push_back(std::make_unique<Member>(*this, r));
}

InProcessGroup::~InProcessGroup() = default;

ops::Collectives &InProcessGroup::member(int rank) { return *members_[rank]; }

void InProcessGroup::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  changed_.notify_all();
}

void InProcessGroup::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = false;
  arrived_ = 0;
}

Status InProcessGroup::barrier() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_)
    return Status::error("another rank failed");
  uint64_t generation = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return Status::ok();
  }
  changed_.wait(lock, [&] { return generation_ != generation || aborted_; });
  return generation_ != generation ? Status::ok() : Status::error("another rank failed");
}

} // namespace dsrt
