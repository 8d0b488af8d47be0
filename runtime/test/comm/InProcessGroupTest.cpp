// The in-process communicator: collectives between threads, and a failing rank that must
// not leave the others waiting forever.
#include "CollectivesCheck.h"
#include "comm/InProcessGroup.h"

#include <gtest/gtest.h>

#include <thread>

namespace dsrt::test {
namespace {

TEST(InProcessGroupTest, CollectivesBetweenThreads) {
  for (int size : {1, 2, 3, 4}) {
    InProcessGroup group(size);
    std::vector<std::string> results(size);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < size; ++rank)
      threads.emplace_back([&, rank] { results[rank] = checkCollectives(group.member(rank)); });
    for (std::thread &thread : threads)
      thread.join();
    for (int rank = 0; rank < size; ++rank)
      EXPECT_EQ(results[rank], "") << "size " << size << " rank " << rank;
  }
}

TEST(InProcessGroupTest, AbortWakesTheWaitingRanks) {
  InProcessGroup group(3);
  std::vector<Status> results(2, Status::ok());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      float value = 1;
      results[rank] = group.member(rank).allReduceSum(&value, 1);
    });
  // Rank 2 "fails" instead of joining the collective.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  group.abort();
  for (std::thread &thread : threads)
    thread.join();
  for (const Status &status : results)
    EXPECT_NE(status.message().find("another rank failed"), std::string::npos);
  group.reset();
  std::vector<std::string> again(3);
  threads.clear();
  for (int rank = 0; rank < 3; ++rank)
    threads.emplace_back([&, rank] { again[rank] = checkCollectives(group.member(rank)); });
  for (std::thread &thread : threads)
    thread.join();
  for (const std::string &result : again)
    EXPECT_EQ(result, "");
}

TEST(InProcessGroupTest, KernelsRefuseToRunWithoutTheirRanks) {
  OwnedTensor x(DType::F32, {2});
  TensorRef in = x.ref();
  std::vector<ops::OutputSpec> specs;
  ops::AttrMap attrs = {{"ranks", ops::Attr::ofInt(2)}};
  ASSERT_TRUE(ops::inferShapes("tfm.all_reduce", attrs, {&in}, 1, specs).isOk());
  OwnedTensor y(DType::F32, {2});
  TensorRef out = y.ref();
  Status status = ops::compute("tfm.all_reduce", attrs, {&in}, {&out});
  EXPECT_NE(status.message().find("mpirun -np 2"), std::string::npos) << status.message();
}

} // namespace
} // namespace dsrt::test
