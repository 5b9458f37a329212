// The batching step loop every program runs - jitllm-run, jitllm-bench and the daemon's model
// workers: sequences (a session and what to generate in it) are fed their prompts in chunks mixed
// with the decoding of the others, all in one Model::forward per step, and each step's new tokens
// are picked, turned into text, checked against stop strings and handed to each sequence's
// listener, once per step.
//
// What a step costs the host does not grow with the vocabulary: each row of logits is narrowed to
// its sampling candidates on the device that computed it (Device::selectCandidates: one id for a
// greedy sequence, at most Sampler::kMaxCandidates otherwise) and only those cross to the host;
// the full row comes back only to a sequence that asked for its logits (keepLogits: scoring,
// logprobs). Each sequence's tokens depend only on its own session and sampler - never on what
// else shares the step, how the prompt was chunked, or which device picked the candidates
// (docs/architecture.md, "Guarantees").
//
// Ownership: borrows the model (which must outlive it); owns its sequences until takeEnded().
// Thread-safety: one thread (the model's step loop) for everything.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "engine/chat/stop_strings.h"
#include "engine/runtime/model.h"
#include "engine/runtime/sampler.h"
#include "engine/tokenizer/streaming_detokenizer.h"

namespace jitllm::runtime {

enum class StopReason { kMaxTokens, kEndOfGeneration, kStopString, kContextFull };

struct SequenceRequest {
  std::vector<int32_t> prompt;  // fed after what the session already holds (at least one token)
  int32_t maxTokens = 128;      // at least 1
  SamplingParams sampling;
  std::vector<std::string> stops;     // the reply ends before the first (needs the model's tokenizer)
  bool stopAtEndOfGeneration = true;  // an EOS/EOT token ends it (the token is kept, not its text)
  bool keepLogits = false;            // each generated token's row of logits comes to the host too
  // Control tokens' text (an EOS's "</s>") in the reply: jitllm-run shows it as llama-greedy does;
  // the daemon's replies leave it out.
  bool renderSpecialTokens = true;
  // How urgent it is: 0 first (the daemon's interactive tier), larger later. Decides the order in
  // which a step's token budget is handed out, and an urgent sequence's decoding limits the others'
  // prefill (Options::urgentStepMs). Never changes a sequence's tokens.
  int priority = 1;
};

// What a sequence's owner hears, on the loop's thread.
class SequenceListener {
 public:
  virtual ~SequenceListener() = default;
  // Whether the sequence sits this step out (a reader that fell behind).
  virtual bool paused() { return false; }
  // A step's new token, the text it completed (whole characters, stop strings held back and cut)
  // and, with keepLogits, the row of logits it was picked from.
  virtual void generated(int32_t token, std::string_view text, std::span<const float> logits) = 0;
  // It ended (how: Sequence::stopReason): the text held back until now (a character's last bytes,
  // a possible stop string that was not one). Not called when it failed.
  virtual void ended(std::string_view text) {}
};

class Sequence final {
 public:
  using Clock = std::chrono::steady_clock;

  Session& session() { return *session_; }
  const Session& session() const { return *session_; }
  // Its session, for the owner to keep (an idle session) once the sequence has ended; null when
  // the session was lent (the second add()).
  std::unique_ptr<Session> releaseSession() { return std::move(owned_); }
  const SequenceRequest& request() const { return request_; }
  SequenceListener* listener() const { return listener_; }
  // Prompt then generated tokens; `fed` of them are in the KV cache.
  const std::vector<int32_t>& history() const { return history_; }
  size_t fed() const { return fed_; }
  int32_t generated() const { return generated_; }
  // Set once it has ended: how, or the error that ended it.
  const std::optional<StopReason>& stopReason() const { return stop_; }
  const std::optional<Error>& error() const { return error_; }
  bool ended() const { return stop_.has_value() || error_.has_value(); }
  // When it was added, and when its first token was picked.
  Clock::time_point added() const { return added_; }
  Clock::time_point firstToken() const { return firstToken_; }
  // Preempted (Options::onSuspend): it has no session until StepLoop::resume gives one back, and
  // sits the steps out meanwhile. session() must not be called then.
  bool suspended() const { return suspended_; }

 private:
  friend class StepLoop;
  Sequence(Session& session, std::unique_ptr<Session> owned, SequenceRequest request, SequenceListener* listener,
           const tokenizer::Tokenizer* tokenizer, size_t fed);

  Session* session_;
  std::unique_ptr<Session> owned_;
  SequenceRequest request_;
  SequenceListener* listener_;
  Sampler sampler_;
  std::optional<tokenizer::StreamingDetokenizer> detokenizer_;
  StopStringMatcher stops_;
  std::vector<int32_t> history_;
  size_t fed_ = 0;
  int32_t generated_ = 0;
  std::optional<StopReason> stop_;
  std::optional<Error> error_;
  Clock::time_point added_, firstToken_;
  bool suspended_ = false;
  bool promptPath_ = false;  // its prompt takes the devices' prompt path (Options::promptPathMinTokens)
};

class StepLoop final {
 public:
  struct Options {
    // Prompt tokens one sequence feeds per step: a long prompt is fed over several steps, so the
    // other sequences' tokens keep coming meanwhile (a few milliseconds of delay on a GPU, not
    // seconds). One value for the daemon and the tools that measure it (jitllm-bench).
    int64_t prefillChunk = 256;
    // Tokens one step takes at most, over all sequences.
    int64_t stepTokens = Model::kMaxStepTokens;
    // A sequence with at least this many prompt tokens to feed feeds them on the devices' prompt
    // path (SequenceInput::promptTokens), all but the last; shorter prompts ride along on decode's
    // kernels, where a prompt path's cost per step (CUDA decodes every weight to fp16 for it) would
    // outweigh what it saves. Decided from the sequence's own prompt, so its tokens never depend on
    // what else is in its steps. 0: every prompt; INT64_MAX: none.
    int64_t promptPathMinTokens = kPromptPathMinTokens;
    // A session could not reserve KV pages (OVERLOADED): free some and return true to try again,
    // or false to end that sequence with the error. Unset: false.
    std::function<bool()> onOutOfMemory;
    // forward() failed: the error ends every sequence of the step; this hears it first.
    std::function<void(const Error&)> onStepError;
    // While a priority-0 sequence decodes, a step should take at most this long (its time per
    // output token): the prompts of less urgent sequences then get a budget of tokens that the
    // loop steers by its own step times (prefillBudget()), at least kMinUrgentPrefill. 0: no limit.
    double urgentStepMs = 0;
    // Preemption: when a sequence cannot reserve KV pages (and onOutOfMemory freed none), a less
    // urgent sequence that owns its session is suspended - taken out of the step if it was in it -
    // and its session handed here, for the owner to park its KV (HostKv) and destroy it, which
    // frees its pages; resume() brings it back. The least urgent goes first, the latest added of
    // those. Unset: no preemption (the sequence that found no pages fails, as before).
    std::function<void(Sequence&, std::unique_ptr<Session>)> onSuspend;
  };
  // What a less urgent prompt gets per step at least, so that it always advances.
  static constexpr int64_t kMinUrgentPrefill = 16;

  StepLoop(Model& model, Options options);
  StepLoop(const StepLoop&) = delete;
  StepLoop& operator=(const StepLoop&) = delete;

  // A sequence to run in `session`, whose first `fed` tokens of request.prompt are already in its
  // KV cache (a continued conversation). Error(FAILED) for a bad request (nothing added).
  Sequence& add(std::unique_ptr<Session> session, SequenceRequest request, SequenceListener* listener, size_t fed = 0);
  // The same with a session the caller keeps (it must outlive the sequence).
  Sequence& add(Session& session, SequenceRequest request, SequenceListener* listener, size_t fed = 0);
  // Ends a sequence with `error` (a cancel); it is returned by the next takeEnded().
  void fail(Sequence& sequence, const Error& error);
  // Suspends `sequence` between steps as preemption does (Options::onSuspend gets its session);
  // false when it cannot be (ended, suspended already, a lent session, or no onSuspend).
  bool suspend(Sequence& sequence);
  // Gives a suspended sequence its session back (a restored one, holding exactly the tokens it had
  // fed: its KV), after which it steps on as if it had never stopped. Error(FAILED) otherwise.
  void resume(Sequence& sequence, std::unique_ptr<Session> session);

  // One step over the sequences that are not paused. False when none could run.
  bool step();
  // The sequences that have ended since the last call, in the order they were added.
  std::vector<std::unique_ptr<Sequence>> takeEnded();

  const std::vector<std::unique_ptr<Sequence>>& sequences() const { return sequences_; }
  Model& model() { return model_; }
  void setUrgentStepMs(double ms) { options_.urgentStepMs = ms; }
  // The prompt tokens less urgent sequences may feed in a step that also decodes a priority-0
  // one, under Options::urgentStepMs (INT64_MAX without a limit). It starts at prefillChunk; a
  // step over the limit halves it, one well under it that used it grows it by a quarter. Step
  // times depend on everything in the step (how many decode, how long their contexts are), so the
  // loop steers by what it measures rather than by a model of the cost.
  int64_t prefillBudget() const;

 private:
  void finish(Sequence& s, StopReason reason);
  // Adds sequence s's next tokens (at most n) to the step; false when it cannot reserve them.
  bool take(Sequence& s, int64_t n);
  // Suspends the least urgent sequence below `s`'s priority that owns its session; false when
  // there is none (or no onSuspend).
  bool preemptFor(const Sequence& s);
  // After a step's forward(): each stepping sequence's new token (from the logits when
  // `keepLogits`, else from its candidates, `stride` a row) picked, told to its listener, and the
  // sequence ended where it stops.
  void handOut(bool keepLogits, int64_t stride);

  Model& model_;
  Options options_;
  std::vector<std::unique_ptr<Sequence>> sequences_;
  // A step's working arrays, reused.
  std::vector<SequenceInput> inputs_;
  std::vector<Sequence*> stepping_, returning_;
  std::vector<CandidateRequest> requests_;
  std::vector<int32_t> ids_;
  std::vector<float> values_, logits_;
  std::vector<Sequence*> order_;
  // The prefill budget while an urgent sequence decodes (negative: not steered yet).
  double urgentBudget_ = -1;
};

// One sequence to its end: jitllm-run's loop. `onToken` gets each token and its logits (the row,
// with request.keepLogits; empty otherwise); returning false stops the generation.
struct GenerationStats {
  int64_t promptTokens = 0;
  int64_t generatedTokens = 0;
  double promptSeconds = 0;    // until the first token was picked
  double generateSeconds = 0;  // the rest
};
using TokenCallback = std::function<bool(int32_t token, std::span<const float> logits)>;
GenerationStats generate(Model& model, Session& session, const SequenceRequest& request, const TokenCallback& onToken);

}  // namespace jitllm::runtime
