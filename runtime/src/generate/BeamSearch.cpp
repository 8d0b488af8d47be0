// Beam search as transformers' generate(num_beams=K) does it (its vectorized _beam_search):
// each prompt keeps K running sequences; every step scores all their continuations by summed
// log-probability, keeps the 2K best (more where there are several stop tokens), moves the
// K best that do not stop on as the next running beams (the KV rows reordered to follow
// them), and offers those among the K best that stop (a stop token, or the last step) to
// the prompt's K finished hypotheses, scored by summed log-probability over
// (length ** length_penalty). A prompt stops taking hypotheses once its best running beam
// cannot beat its worst finished one (early_stopping False: at the current length; "never":
// at the longest; True: once K are finished).
#include "generate/GenerateRun.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dsrt::generation {
namespace {

// transformers' score for "not a candidate" (added, so that order among them is kept).
constexpr float kNone = -1.0e9f;

// log_softmax over a row, in f32 as torch computes it from f32 logits.
void logSoftmax(const std::vector<float> &logits, std::vector<float> &out) {
  const float largest = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits)
    sum += std::exp(static_cast<double>(x - largest));
  const float shift = largest + static_cast<float>(std::log(sum));
  out.resize(logits.size());
  for (size_t v = 0; v < logits.size(); ++v)
    out[v] = logits[v] - shift;
}

struct Candidate {
  float score = 0;   // the running score plus the token's log-probability
  int64_t beam = 0;  // which of the prompt's running beams it continues
  int64_t token = 0;
};

struct Hypothesis {
  std::vector<int64_t> tokens;
  float score = 0;
};

} // namespace

Status Run::reorderRows(const std::vector<int64_t> &sources) {
  auto permute = [&](std::vector<std::vector<int64_t>> &rows) {
    std::vector<std::vector<int64_t>> old = rows;
    for (size_t b = 0; b < sources.size(); ++b)
      rows[b] = old[static_cast<size_t>(sources[b])];
  };
  permute(tokens_);
  permute(mask_);
  permute(positions_);
  if (mode_ == Mode::SessionCache) {
    // The cache holds every position so far; an encoder-decoder's cross-attention layers
    // hold the encoder's (the same for the beams of one prompt, moved all the same).
    int64_t positions = static_cast<int64_t>(mask_[0].size());
    if (encoderDecoder_)
      positions = std::max(positions, encoderStates_.shape[1]);
    return session_.reorderKvRows(sources, positions);
  }
  for (std::vector<uint8_t> &past : pastValues_) {  // [batch, heads, length, head_dim]
    if (past.empty())
      continue;
    const size_t row = past.size() / static_cast<size_t>(batch_);
    std::vector<uint8_t> old = past;
    for (size_t b = 0; b < sources.size(); ++b)
      std::copy_n(old.data() + static_cast<size_t>(sources[b]) * row, row, past.data() + b * row);
  }
  return Status::ok();
}

Status Run::beamLoop(std::vector<GeneratedSequence> &out, StepLogits &logits) {
  const int64_t beams = options_.numBeams, prompts = batch_ / beams;
  std::vector<int64_t> stops = stops_;
  std::sort(stops.begin(), stops.end());
  stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
  const int64_t keep = std::min<int64_t>(
      std::max<int64_t>(2, 1 + static_cast<int64_t>(stops.size())) * beams, beams * vocab_);
  const size_t promptLength = tokens_[0].size();  // what precedes the generated tokens
  auto stopsAt = [&](int64_t token) {
    return std::binary_search(stops.begin(), stops.end(), token);
  };

  // Only the first beam of a prompt is live at first: the others would repeat it.
  std::vector<float> running(batch_, kNone);
  for (int64_t p = 0; p < prompts; ++p)
    running[p * beams] = 0;
  std::vector<std::vector<Hypothesis>> finished(prompts);
  std::vector<bool> improvable(prompts, true);
  std::vector<float> rowLogProbs;
  std::vector<Candidate> candidates;
  for (int64_t step = 0; step < options_.maxNewTokens; ++step) {
    const int64_t length = step + 1;  // the generated tokens with this one
    const bool last = length == options_.maxNewTokens;
    const float penalty = std::pow(static_cast<float>(length), options_.lengthPenalty);
    std::vector<int64_t> sources(batch_), chosen(batch_, padToken_);
    std::vector<float> nextRunning(batch_, kNone);
    bool continues = false;
    for (int64_t p = 0; p < prompts; ++p) {
      candidates.clear();
      for (int64_t k = 0; k < beams; ++k) {
        const int64_t row = p * beams + k;
        logSoftmax(logits.full[row], rowLogProbs);
        // transformers processes the log-probabilities in beam search.
        if (options_.processesLogits())
          processLogits(options_, history(row), step, stops_, rowLogProbs.data(), 0, vocab_);
        for (int64_t v = 0; v < vocab_; ++v)
          candidates.push_back({running[row] + rowLogProbs[v], k, v});
      }
      // torch.topk's order: by score, and (as its CPU kernel keeps them) equal scores by
      // their place in the flattened [beam, token] row.
      auto better = [](const Candidate &a, const Candidate &b) {
        return a.score != b.score ? a.score > b.score
                                  : (a.beam != b.beam ? a.beam < b.beam : a.token < b.token);
      };
      std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), better);
      candidates.resize(keep);
      std::vector<bool> hits(keep);
      for (int64_t i = 0; i < keep; ++i) {
        hits[i] = last || stopsAt(candidates[i].token);
        continues |= !hits[i];
      }
      // The next running beams: the best K that do not stop (those that do sink by kNone).
      std::vector<int64_t> order(keep);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return candidates[a].score + (hits[a] ? kNone : 0.0f) >
               candidates[b].score + (hits[b] ? kNone : 0.0f);
      });
      for (int64_t j = 0; j < beams; ++j) {
        const Candidate &c = candidates[order[j]];
        sources[p * beams + j] = p * beams + c.beam;
        chosen[p * beams + j] = c.token;
        nextRunning[p * beams + j] = c.score + (hits[order[j]] ? kNone : 0.0f);
      }
      // The finished: those among the K best that stop, while the prompt may still improve
      // (and, with early_stopping True, until it has K).
      const bool full = static_cast<int64_t>(finished[p].size()) == beams;
      if (improvable[p] &&
          !(full && options_.earlyStopping == GenerateOptions::EarlyStopping::Stop)) {
        std::vector<Hypothesis> merged = std::move(finished[p]);
        for (int64_t i = 0; i < beams && i < keep; ++i) {
          if (!hits[i])
            continue;
          const Candidate &c = candidates[i];
          const std::vector<int64_t> &row = tokens_[p * beams + c.beam];
          Hypothesis hypothesis{{row.begin() + promptLength, row.end()}, c.score / penalty};
          hypothesis.tokens.push_back(c.token);
          merged.push_back(std::move(hypothesis));
        }
        std::stable_sort(merged.begin(), merged.end(),
                         [](const Hypothesis &a, const Hypothesis &b) { return a.score > b.score; });
        if (static_cast<int64_t>(merged.size()) > beams)
          merged.resize(beams);
        finished[p] = std::move(merged);
      }
    }
    // Can a prompt's best running beam still beat its worst finished one? At the current
    // length, or ("never", with a positive penalty) at the longest it may grow to.
    const int64_t hopeful =
        options_.earlyStopping == GenerateOptions::EarlyStopping::Never &&
                options_.lengthPenalty > 0
            ? options_.maxNewTokens
            : length;
    const float hopefulPenalty = std::pow(static_cast<float>(hopeful), options_.lengthPenalty);
    bool anyImprovable = false, allFull = true;
    for (int64_t p = 0; p < prompts; ++p) {
      const bool full = static_cast<int64_t>(finished[p].size()) == beams;
      const float worst = full ? finished[p].back().score : kNone;
      improvable[p] = improvable[p] && nextRunning[p * beams] / hopefulPenalty > worst;
      anyImprovable |= improvable[p];
      allFull &= full;
    }
    const bool openBeam =
        !(allFull && options_.earlyStopping == GenerateOptions::EarlyStopping::Stop);
    if (!(anyImprovable && openBeam && continues))
      break;
    DSRT_RETURN_IF_ERROR(reorderRows(sources));
    running = std::move(nextRunning);
    DSRT_RETURN_IF_ERROR(advance(chosen, logits));
  }

  out.assign(prompts, {});
  for (int64_t p = 0; p < prompts; ++p) {
    if (finished[p].empty())
      continue;  // no step ran (max_new_tokens 0)
    out[p].tokens = finished[p].front().tokens;
    out[p].reason = !out[p].tokens.empty() && stopsAt(out[p].tokens.back())
                        ? FinishReason::Stop
                        : FinishReason::Length;
    // The callback sees the returned sequence once it is known: a beam's tokens change
    // until then.
    if (options_.onToken)
      for (int64_t token : out[p].tokens)
        options_.onToken(static_cast<size_t>(p), token);
  }
  return Status::ok();
}

} // namespace dsrt::generation
