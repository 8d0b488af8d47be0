// The generation loop's state and steps (Generator.cpp), shared with beam search
// (BeamSearch.cpp). Internal to libdsrt: generate() in Generator.h is the interface.
#ifndef DSRT_GENERATE_GENERATERUN_H
#define DSRT_GENERATE_GENERATERUN_H

#include "generate/Generator.h"
#include "plan/PlanFile.h"

#include <string>
#include <vector>

namespace dsrt::generation {

enum class Mode { SessionCache, ForwardWithPairs, Recompute };

// One named input or output of the program being driven.
struct Binding {
  enum class Role {
    InputIds,
    AttentionMask,
    PositionIds,
    Past,
    UseCacheBranch,
    CrossStates,  // an encoder-decoder's encoder output, read by the decoder
    CrossMask,    // and the encoder's padding mask
    Unknown
  } role = Role::Unknown;
  size_t index = 0;
  std::string name;
  DType dtype = DType::Undefined;
  Shape staticShape;   // -1 for dynamic dimensions
  int presentOutput = -1;  // Past: the output that becomes its next value
  // Past: the symbol of its length; an encoder-decoder's cross-attention pairs share it with
  // the encoder output's length.
  std::string lengthSymbol;
  // Past: a cross-attention's keys and values, computed from the encoder's output at the
  // first step and the same for the rest (optimum's merged decoder returns placeholders for
  // them once it takes the cached branch).
  bool crossAttention = false;
};

// What a step leaves to sample from, per row: the whole last-position logits, or (when
// Run::candidates_ > 0) only the largest few, sorted as sampleFromCandidates takes them.
struct StepLogits {
  std::vector<std::vector<float>> full;
  std::vector<std::vector<float>> values;
  std::vector<std::vector<int64_t>> ids;
};

class Run {
public:
  // `shareStops`: some rank of the group has a callback, so the sequences it stops are
  // shared each step (every rank must run as many steps).
  Run(Session &session, const std::vector<std::vector<int64_t>> &prompts,
      const GenerateOptions &options, bool shareStops)
      : session_(session), plan_(session.plan().plan()), prompts_(prompts), options_(options),
        shareStops_(shareStops) {}

  Status execute(std::vector<GeneratedSequence> &out);

private:
  // Everything up to the first step's logits: the mode, the programs' bindings, the limits,
  // the encoder, the prompts' rows.
  Status start(StepLogits &logits);
  // Sampling or greedy, each row its own sequence.
  Status sampleLoop(std::vector<GeneratedSequence> &out, StepLogits &logits);
  // Beam search (BeamSearch.cpp): options_.numBeams rows per prompt, reordered each step.
  Status beamLoop(std::vector<GeneratedSequence> &out, StepLogits &logits);
  // Appends each row's token and runs the next step for the logits after it.
  Status advance(const std::vector<int64_t> &chosen, StepLogits &logits);
  // Row `row`'s tokens so far without its padding, what the logits processors read.
  std::vector<int64_t> history(int64_t row) const;
  // Row b's sequence becomes row sources[b]'s: its tokens, mask, positions and KV.
  Status reorderRows(const std::vector<int64_t> &sources);
  Status chooseMode();
  Status bindProgram(const char *name, const std::string &logitsName,
                     std::vector<Binding> &bindings, int &logitsOutput);
  Status chooseGreedyShard();
  Status checkLimits();
  Status checkEncoderDecoderLimits(int64_t maxSeq);
  // An encoder-decoder: runs `encode` on the prompts (right-padded, masked) and keeps its
  // output for every decoder step.
  Status runEncoder();
  Status runStep(const char *program, const std::vector<Binding> &bindings, int logitsOutput,
                 const std::vector<int64_t> &ids, int64_t fresh, StepLogits &lastLogits);

  std::vector<Binding> firstBindings_, nextBindings_;
  int firstLogits_ = -1, nextLogits_ = -1;
  const char *next_ = nullptr;
  std::vector<int64_t> stops_;  // the stop tokens and, unless ignored, the plan's EOS
  int64_t padToken_ = 0;

  Session &session_;
  const dsp::Plan &plan_;
  const std::vector<std::vector<int64_t>> &prompts_;
  const GenerateOptions &options_;
  const bool shareStops_;
  const dsp::ModelInfo *model_ = nullptr;
  Mode mode_ = Mode::Recompute;
  int64_t batch_ = 0, longest_ = 0, vocab_ = 0;
  // Greedy with a vocabulary-parallel LM head: the programs end at this rank's shard of the
  // logits (`logitsWidth_` wide, from global index `vocabOffset_`) and the tokens come from a
  // distributed argmax. Otherwise the logits are the whole vocabulary.
  bool greedyShard_ = false;
  int64_t logitsWidth_ = 0, vocabOffset_ = 0;
  // Greedy and top-k need only the largest logits of each row, which the session may select
  // where the logits are (Session::topLogits); 0: the whole row comes to the host.
  int64_t candidates_ = 0;
  // Per row of the batch: attention mask and positions of every token so far.
  std::vector<std::vector<int64_t>> mask_, positions_, tokens_;
  // ForwardWithPairs: each past input's value for the next step.
  std::vector<std::vector<uint8_t>> pastValues_;
  std::vector<Shape> pastShapes_;
  // An encoder-decoder: the prompts go to the encoder; the decoder starts from
  // decoder_start_token_id and reads the encoder's output and padding mask every step.
  bool encoderDecoder_ = false;
  TensorRef encoderStates_;
  std::vector<uint8_t> encoderStatesBytes_;
  std::vector<int64_t> encoderMask_;  // [batch, encoder length]
  std::string encoderLengthSymbol_;
};

} // namespace dsrt::generation

#endif
