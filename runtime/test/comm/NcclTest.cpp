// NCCL without a GPU: the loader finds the toolkit's libnccl and resolves every function the
// communicator uses, a wrong DSRT_NCCL is a clear error (not a silent fallback to another
// copy), and the unique id that rank 0 creates reaches every rank intact. Each test runs in
// its own process (gtest_discover_tests), so DSRT_NCCL set by one does not leak into another.
#include "comm/InProcessGroup.h"
#include "comm/Nccl.h"
#include "NcclTestSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace dsrt::test {
namespace {

const char *kToolkitNccl = "/usr/local/cuda/lib64/libnccl.so.2";

bool exists(const char *path) { return std::ifstream(path).good(); }

TEST(NcclTest, LoaderResolvesEveryFunction) {
  if (!exists(kToolkitNccl))
    GTEST_SKIP() << kToolkitNccl << " is not installed";
  int version = 0;
  Status status = probeNcclLibrary(kToolkitNccl, version);
  ASSERT_TRUE(status.isOk()) << status.message();
  // NCCL_VERSION(2, x, y) = 20000 + 100 x + y from 2.9 on.
  EXPECT_GE(version, 20900);
}

// The shared search order (core/LibraryLoader.h): the toolkit, then the loader path.
TEST(NcclTest, CandidatesFollowTheSearchOrder) {
  unsetenv("DSRT_NCCL");
  unsetenv("CUDA_HOME");
  unsetenv("CUDA_PATH");
  std::vector<std::string> candidates = ncclLibraryCandidates();
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates.front(), kToolkitNccl);
  auto toolkit = std::find(candidates.begin(), candidates.end(), kToolkitNccl);
  auto loader = std::find(candidates.begin(), candidates.end(), "libnccl.so.2");
  ASSERT_NE(loader, candidates.end());
  EXPECT_LT(toolkit, loader);
}

TEST(NcclTest, WrongLibraryIsAClearError) {
  setenv("DSRT_NCCL", "/nonexistent/libnccl.so.2", 1);
  ASSERT_EQ(ncclLibraryCandidates(), std::vector<std::string>{"/nonexistent/libnccl.so.2"});
  int version = 0;
  Status probe = probeNcclLibrary("/nonexistent/libnccl.so.2", version);
  EXPECT_NE(probe.message().find("cannot open '/nonexistent/libnccl.so.2'"), std::string::npos)
      << probe.message();
  // The communicator's set-up fails on every rank with the same cause, without waiting in
  // NCCL for the rank that could not load it.
  std::vector<std::unique_ptr<NcclCollectives>> comms;
  std::vector<Status> results = createNcclOnEveryRank(2, comms);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(results[rank].isOk());
    EXPECT_EQ(comms[rank], nullptr);
    EXPECT_NE(results[rank].message().find("/nonexistent/libnccl.so.2"), std::string::npos)
        << results[rank].message();
    EXPECT_NE(results[rank].message().find("DSRT_NCCL"), std::string::npos)
        << results[rank].message();
  }
}

TEST(NcclTest, UniqueIdReachesEveryRank) {
  if (!exists(kToolkitNccl))
    GTEST_SKIP() << kToolkitNccl << " is not installed";
  setenv("DSRT_NCCL", kToolkitNccl, 1);
  for (int size : {1, 2, 3}) {
    InProcessGroup group(size);
    std::vector<std::vector<uint8_t>> ids(size);
    std::vector<Status> results(size, Status::ok());
    std::vector<std::thread> threads;
    for (int rank = 0; rank < size; ++rank)
      threads.emplace_back(
          [&, rank] { results[rank] = bootstrapNcclUniqueId(group.member(rank), ids[rank]); });
    for (std::thread &thread : threads)
      thread.join();
    if (!results[0].isOk() && results[0].message().find("ncclGetUniqueId") != std::string::npos)
      GTEST_SKIP() << "ncclGetUniqueId needs what this machine lacks: " << results[0].message();
    for (int rank = 0; rank < size; ++rank) {
      ASSERT_TRUE(results[rank].isOk()) << results[rank].message();
      ASSERT_EQ(ids[rank].size(), 128u);
      EXPECT_EQ(ids[rank], ids[0]) << "rank " << rank;
    }
    EXPECT_NE(ids[0], std::vector<uint8_t>(128, 0));
  }
}

TEST(NcclTest, FailedUniqueIdReachesEveryRank) {
  setenv("DSRT_NCCL", "/nonexistent/libnccl.so.2", 1);
  InProcessGroup group(3);
  std::vector<std::vector<uint8_t>> ids(3);
  std::vector<Status> results(3, Status::ok());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank)
    threads.emplace_back(
        [&, rank] { results[rank] = bootstrapNcclUniqueId(group.member(rank), ids[rank]); });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_NE(results[0].message().find("/nonexistent/libnccl.so.2"), std::string::npos)
      << results[0].message();
  for (int rank = 1; rank < 3; ++rank)
    EXPECT_NE(results[rank].message().find("rank 0 could not create a unique id"),
              std::string::npos)
        << results[rank].message();
}

} // namespace
} // namespace dsrt::test
