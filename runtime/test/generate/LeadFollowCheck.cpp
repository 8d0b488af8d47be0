// Rank 0 drives the generation alone (dsrt_generate_lead / _follow / _finish), through the
// C API on the GPT-2 fixture compiled with --tp 2 (argv[1]) and with one rank (argv[2]).
//
//   mpirun -np 2 dsrt-lead-follow-check tp2.dsp tp1.dsp
//     Rank 0 leads a series of requests, a failing one in the middle (an id outside the
//     vocabulary; a null prompt, which fails before anything is sent), then valid ones, two
//     of them stopped by rank 0's callback, then finishes. Every rank writes down what each
//     request gave it (status, message, tokens, finish reasons); rank 0 gathers them and
//     requires every rank's to equal its own, and the greedy ones the one-rank plan's.
//   mpirun -np 2 dsrt-lead-follow-check --idle S tp2.dsp tp1.dsp
//     The same, rank 0 idle for S seconds before its last request: with S past
//     DSRT_COLLECTIVE_TIMEOUT, the followers must go on waiting (a server between requests).
//   dsrt-lead-follow-check --inprocess tp2.dsp tp1.dsp
//     An in-process group's rank 0 callback stops a sequence on every rank: the tokens and
//     finish reasons equal the one-rank plan's.
// Exit status 0 when every check holds; each failure is printed with what differed.
#include "dsrt/dsrt.h"

#ifdef DSRT_TEST_MPI
#include <mpi.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int failures = 0;

void expect(bool condition, const std::string &what) {
  if (!condition) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

struct Request {
  std::vector<std::vector<int64_t>> prompts;
  dsrt_generate_options options;
  bool nullPrompt = false;  // a null pointer for prompt 0: fails before it is sent
  // Rank 0's callback stops sequence 1 at its 2nd token, or every sequence at its 2nd.
  enum class Stop { None, Second, All } stop = Stop::None;
};

struct Seen {
  Request::Stop stop;
  std::vector<int> tokens;  // per sequence
};

int stopAtTheSecondToken(void *user, size_t sequence, int64_t) {
  auto *seen = static_cast<Seen *>(user);
  bool mine = seen->stop == Request::Stop::All || sequence == 1;
  return ++seen->tokens[sequence] == 2 && mine;
}

std::vector<Request> requests() {
  std::vector<Request> all;
  auto add = [&](std::vector<std::vector<int64_t>> prompts) -> Request & {
    all.emplace_back();
    all.back().prompts = std::move(prompts);
    dsrt_generate_options_init(&all.back().options);
    all.back().options.max_new_tokens = 6;
    all.back().options.ignore_eos = 1;
    return all.back();
  };
  add({{1, 2, 3}, {4, 5}});                          // greedy, prompts of two lengths
  add({{1, 2}, {7, 300000}});                        // an id outside the vocabulary
  add({{1, 2}}).nullPrompt = true;                   // fails before it is sent
  Request &sampled = add({{9, 8, 7, 6}, {3}});       // the next one after failures
  sampled.options.temperature = 0.9f;
  sampled.options.top_k = 20;
  sampled.options.top_p = 0.9f;
  sampled.options.seed = 7;
  add({{11, 12}, {13, 14, 15}}).stop = Request::Stop::Second;
  // Without the stop shared, rank 0 would end the loop and the others run on.
  add({{16, 17}, {18}}).stop = Request::Stop::All;
  add({{21}}).options.max_new_tokens = 3;            // a batch of one, after the callback
  return all;
}

// What one request gave: its status, message and each sequence's tokens and reason.
std::string transcript(dsrt_status status, dsrt_generation *generation) {
  std::ostringstream out;
  out << dsrt_status_name(status);
  if (status != DSRT_OK) {
    out << " " << dsrt_last_error() << "\n";
    return out.str();
  }
  for (size_t i = 0; i < dsrt_generation_count(generation); ++i) {
    const int64_t *tokens = nullptr;
    size_t count = 0;
    dsrt_finish_reason reason = DSRT_FINISH_LENGTH;
    dsrt_generation_tokens(generation, i, &tokens, &count, &reason);
    out << " | sequence " << i << " (reason " << reason << "):";
    for (size_t t = 0; t < count; ++t)
      out << " " << tokens[t];
  }
  out << "\n";
  return out.str();
}

// Generates `request` on `session` through `generate` (dsrt_generate_lead, dsrt_generate
// or dsrt_group_generate's shape), with the callback where the request has one.
template <typename Generate>
std::string run(const Request &request, Generate generate) {
  std::vector<const int64_t *> pointers;
  std::vector<size_t> lengths;
  for (const auto &prompt : request.prompts) {
    pointers.push_back(prompt.data());
    lengths.push_back(prompt.size());
  }
  if (request.nullPrompt)
    pointers[0] = nullptr;
  dsrt_generate_options options = request.options;
  Seen seen{request.stop, std::vector<int>(request.prompts.size(), 0)};
  if (request.stop != Request::Stop::None) {
    options.on_token = stopAtTheSecondToken;
    options.user_data = &seen;
  }
  dsrt_generation *generation = nullptr;
  dsrt_status status =
      generate(request.prompts.size(), pointers.data(), lengths.data(), &options, &generation);
  std::string text = transcript(status, generation);
  dsrt_generation_free(generation);
  return text;
}

// The transcripts of the requests on a one-rank session of `path` (the reference).
std::vector<std::string> onOneRank(const char *path, const std::vector<Request> &all) {
  dsrt_plan *plan = nullptr;
  dsrt_session *session = nullptr;
  std::vector<std::string> out;
  if (dsrt_plan_open(path, &plan) != DSRT_OK ||
      dsrt_session_create(plan, 0, DSRT_DEVICE_CPU, &session) != DSRT_OK) {
    expect(false, std::string("the one-rank plan: ") + dsrt_last_error());
    dsrt_plan_close(plan);
    return std::vector<std::string>(all.size());
  }
  expect(dsrt_generate_follow(session, nullptr) == DSRT_INVALID_ARGUMENT &&
             std::strstr(dsrt_last_error(), "no rank 0 to follow"),
         std::string("follow on a one-rank session: ") + dsrt_last_error());
  for (const Request &request : all)
    // Lead on a one-rank session is dsrt_generate.
    out.push_back(run(request, [&](size_t count, const int64_t *const *prompts,
                                   const size_t *lengths, const dsrt_generate_options *options,
                                   dsrt_generation **result) {
      return dsrt_generate_lead(session, count, prompts, lengths, options, result);
    }));
  expect(dsrt_generate_finish(session) == DSRT_OK, "finish on a one-rank session does nothing");
  dsrt_session_destroy(session);
  dsrt_plan_close(plan);
  return out;
}

void compare(const std::string &what, const std::string &got, const std::string &expected) {
  expect(got == expected, what + ":\n  got      " + got + "  expected " + expected);
}

int inProcess(const char *tp2, const char *tp1) {
  std::vector<Request> all = requests();
  std::vector<std::string> reference = onOneRank(tp1, all);
  dsrt_plan *plan = nullptr;
  dsrt_group *group = nullptr;
  if (dsrt_plan_open(tp2, &plan) != DSRT_OK ||
      dsrt_group_create(plan, DSRT_DEVICE_CPU, &group) != DSRT_OK) {
    std::fprintf(stderr, "FAILED: the TP-2 group: %s\n", dsrt_last_error());
    return 1;
  }
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].options.temperature != 0)
      continue;
    std::string got = run(all[r], [&](size_t count, const int64_t *const *prompts,
                                      const size_t *lengths,
                                      const dsrt_generate_options *options,
                                      dsrt_generation **result) {
      return dsrt_group_generate(group, count, prompts, lengths, options, result);
    });
    // A group's errors name the rank that failed: only the status is compared.
    if (reference[r].find("DSRT_OK") == 0)
      compare("request " + std::to_string(r) + " on an in-process group", got, reference[r]);
    else
      compare("request " + std::to_string(r) + "'s status on an in-process group",
              got.substr(0, got.find(' ')), reference[r].substr(0, reference[r].find(' ')));
    if (all[r].stop != Request::Stop::None)
      expect(got.find("sequence 1 (reason 2):") != std::string::npos,
             "the callback stopped sequence 1: " + got);
  }
  dsrt_group_destroy(group);
  dsrt_plan_close(plan);
  std::printf("in-process group: %s\n",
              failures ? "FAILED" : "the one-rank plan's tokens, the callback's stop included");
  return failures ? 1 : 0;
}

#ifdef DSRT_TEST_MPI
// Every rank's `mine`, on rank 0.
std::vector<std::string> gatherOnRank0(const std::string &mine, int rank, int ranks) {
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(ranks), offsets(ranks);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::vector<char> bytes(rank == 0 ? total + 1 : 1);
  MPI_Gatherv(mine.data(), length, MPI_CHAR, bytes.data(), lengths.data(), offsets.data(),
              MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> all;
  if (rank == 0)
    for (int r = 0; r < ranks; ++r)
      all.emplace_back(bytes.data() + offsets[r], lengths[r]);
  return all;
}

int underMpi(const char *tp2, const char *tp1, double idleSeconds) {
  dsrt_plan *plan = nullptr;
  dsrt_session *session = nullptr;
  if (dsrt_plan_open(tp2, &plan) != DSRT_OK ||
      dsrt_session_create_mpi(plan, DSRT_DEVICE_CPU, &session) != DSRT_OK) {
    std::fprintf(stderr, "FAILED: the TP-2 session: %s\n", dsrt_last_error());
    return 1;
  }
  const int rank = dsrt_session_rank(session);
  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::vector<Request> all = requests();
  std::string mine;  // one line per request
  if (rank == 0) {
    // The wrong role is refused at once, with no collective the others would wait in.
    expect(dsrt_generate_follow(session, nullptr) == DSRT_INVALID_ARGUMENT &&
               std::strstr(dsrt_last_error(), "dsrt_generate_follow on rank 0"),
           std::string("follow on rank 0: ") + dsrt_last_error());
    auto lead = [&](size_t count, const int64_t *const *prompts, const size_t *lengths,
                    const dsrt_generate_options *options, dsrt_generation **result) {
      return dsrt_generate_lead(session, count, prompts, lengths, options, result);
    };
    for (const Request &request : all)
      mine += run(request, lead);
    // One more, which the followers run without taking the result.
    std::this_thread::sleep_for(std::chrono::duration<double>(idleSeconds));
    expect(run(all[0], lead).find("DSRT_OK") == 0, "the request followed with out NULL");
    expect(dsrt_generate_finish(session) == DSRT_OK,
           std::string("finish: ") + dsrt_last_error());
  } else {
    int64_t id = 1;
    size_t length = 1;
    const int64_t *prompt = &id;
    dsrt_generate_options options;
    dsrt_generate_options_init(&options);
    dsrt_generation *generation = nullptr;
    expect(dsrt_generate_lead(session, 1, &prompt, &length, &options, &generation) ==
                   DSRT_INVALID_ARGUMENT &&
               std::strstr(dsrt_last_error(), "rank 0 leads"),
           std::string("lead on rank 1: ") + dsrt_last_error());
    expect(dsrt_generate_finish(session) == DSRT_INVALID_ARGUMENT,
           "finish on a rank other than 0 is refused");
    // Exactly as many requests as rank 0 leads: a rank out of step would show here.
    for (size_t r = 0; r < all.size(); ++r) {
      dsrt_generation *result = nullptr;
      dsrt_status status = dsrt_generate_follow(session, &result);
      mine += transcript(status, result);
      dsrt_generation_free(result);
    }
    expect(dsrt_generate_follow(session, nullptr) == DSRT_OK,
           std::string("following with out NULL: ") + dsrt_last_error());
    // A stale pointer in *out shows whether finish sets it to NULL.
    dsrt_generation *result = reinterpret_cast<dsrt_generation *>(&id);
    expect(dsrt_generate_follow(session, &result) == DSRT_LEADER_FINISHED,
           std::string("the follower learns that rank 0 finished: ") + dsrt_last_error());
    expect(result == nullptr, "*out is NULL once rank 0 finishes");
  }
  std::vector<std::string> everyRank = gatherOnRank0(mine, rank, ranks);
  if (rank == 0) {
    std::printf("rank 0 led:\n%s", mine.c_str());
    for (int r = 1; r < ranks; ++r)
      compare("rank " + std::to_string(r) + "'s requests", everyRank[r], mine);
    std::vector<std::string> lines;
    std::istringstream split(mine);
    for (std::string line; std::getline(split, line);)
      lines.push_back(line + "\n");
    expect(lines.size() == all.size(), "one transcript line per request");
    std::vector<std::string> reference = onOneRank(tp1, all);
    for (size_t r = 0; r < lines.size() && r < all.size(); ++r) {
      // Sampling may draw otherwise from logits a TP-2 plan sums in another order.
      if (all[r].options.temperature == 0)
        compare("request " + std::to_string(r) + " against the one-rank plan", lines[r],
                reference[r]);
    }
    if (lines.size() >= 6) {
      expect(lines[1].find("DSRT_INVALID_ARGUMENT") == 0 &&
                 lines[1].find("token id 300000, outside the vocabulary") != std::string::npos,
             "an id outside the vocabulary fails: " + lines[1]);
      expect(lines[2].find("DSRT_INVALID_ARGUMENT a prompt is null") == 0,
             "a null prompt fails before it is sent: " + lines[2]);
      expect(lines[3].find("DSRT_OK") == 0, "a request after failures runs: " + lines[3]);
      expect(lines[4].find("sequence 0 (reason 0):") != std::string::npos &&
                 lines[4].find("sequence 1 (reason 2):") != std::string::npos,
             "rank 0's callback stopped sequence 1: " + lines[4]);
      expect(lines[5].find("sequence 0 (reason 2):") != std::string::npos &&
                 lines[5].find("sequence 1 (reason 2):") != std::string::npos,
             "rank 0's callback stopped every sequence: " + lines[5]);
    }
  }
  // Every rank's verdict, so that the job's status is the check's.
  int mineFailed = failures, anyFailed = 0;
  MPI_Allreduce(&mineFailed, &anyFailed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("%d MPI ranks: %s\n", ranks,
                anyFailed ? "FAILED" : "the followers generated what rank 0 led");
  dsrt_session_destroy(session);
  dsrt_plan_close(plan);
  return anyFailed ? 1 : 0;
}
#endif

} // namespace

int main(int argc, char **argv) {
  if (argc == 4 && std::string(argv[1]) == "--inprocess")
    return inProcess(argv[2], argv[3]);
#ifdef DSRT_TEST_MPI
  if (argc == 3)
    return underMpi(argv[1], argv[2], 0);
  if (argc == 5 && std::string(argv[1]) == "--idle")
    return underMpi(argv[3], argv[4], std::atof(argv[2]));
#endif
  std::fprintf(stderr,
               "usage: mpirun -np 2 dsrt-lead-follow-check [--idle SECONDS] tp2.dsp tp1.dsp\n"
               "       dsrt-lead-follow-check --inprocess tp2.dsp tp1.dsp\n");
  return 2;
}
