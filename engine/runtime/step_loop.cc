#include "engine/runtime/step_loop.h"

#include <algorithm>

namespace jitllm::runtime {

Sequence::Sequence(Session& session, std::unique_ptr<Session> owned, SequenceRequest request,
                   SequenceListener* listener, const tokenizer::Tokenizer* tokenizer, size_t fed)
    : session_(&session),
      owned_(std::move(owned)),
      request_(std::move(request)),
      listener_(listener),
      sampler_(request_.sampling),
      stops_(request_.stops),
      history_(request_.prompt),
      fed_(fed),
      added_(Clock::now()) {
  if (tokenizer) {
    detokenizer_.emplace(*tokenizer, tokenizer::StreamingDetokenizer::Options{request_.renderSpecialTokens, false});
  }
}

StepLoop::StepLoop(Model& model, Options options) : model_(model), options_(std::move(options)) {
  JITLLM_REQUIRE(options_.prefillChunk >= 1 && options_.stepTokens >= 1, "step loop: chunks of at least one token");
}

Sequence& StepLoop::add(std::unique_ptr<Session> session, SequenceRequest request, SequenceListener* listener,
                        size_t fed) {
  JITLLM_REQUIRE(session != nullptr, "a sequence needs a session");
  Sequence& s = add(*session, std::move(request), listener, fed);
  s.owned_ = std::move(session);
  return s;
}

Sequence& StepLoop::add(Session& session, SequenceRequest request, SequenceListener* listener, size_t fed) {
  JITLLM_REQUIRE(!request.prompt.empty(), "the prompt is empty");
  JITLLM_REQUIRE(request.maxTokens >= 1, "maxTokens must be at least 1");
  JITLLM_REQUIRE(fed < request.prompt.size(), "a sequence needs at least one prompt token to feed");
  request.sampling.validate();
  const int64_t vocab = model_.config().vocabSize;
  for (int32_t id : request.prompt) {
    JITLLM_REQUIRE(id >= 0 && id < vocab, "token id ", id, " is outside the vocabulary of ", vocab);
  }
  JITLLM_REQUIRE(int64_t(request.prompt.size()) < session.contextLimit(), "the prompt has ", request.prompt.size(),
                 " tokens and does not fit the context of ", session.contextLimit(),
                 " (one more is needed for the reply)");
  const tokenizer::Tokenizer* tok = model_.hasTokenizer() ? &model_.tokenizer() : nullptr;
  JITLLM_REQUIRE(tok != nullptr || request.stops.empty(), "stop strings need the model's tokenizer");
  sequences_.push_back(
      std::unique_ptr<Sequence>(new Sequence(session, nullptr, std::move(request), listener, tok, fed)));
  Sequence& s = *sequences_.back();
  s.promptPath_ = int64_t(s.history_.size() - fed) >= options_.promptPathMinTokens;
  return s;
}

void StepLoop::fail(Sequence& sequence, const Error& error) {
  if (!sequence.ended()) sequence.error_ = error;
}

void StepLoop::finish(Sequence& s, StopReason reason) {
  s.stop_ = reason;
  std::string text;
  if (s.detokenizer_) text = s.stops_.feed(s.detokenizer_->flush());
  text += s.stops_.flush();
  if (s.listener_) s.listener_->ended(text);
}

int64_t StepLoop::prefillBudget() const {
  if (options_.urgentStepMs <= 0) return INT64_MAX;
  return urgentBudget_ < 0 ? options_.prefillChunk : int64_t(urgentBudget_);
}

bool StepLoop::preemptFor(const Sequence& s) {
  if (!options_.onSuspend) return false;
  Sequence* victim = nullptr;
  for (auto& owned : sequences_) {
    Sequence& v = *owned;
    if (&v == &s || v.ended() || v.suspended_ || !v.owned_ || v.request_.priority <= s.request_.priority) continue;
    if (!victim || v.request_.priority >= victim->request_.priority) victim = &v;
  }
  return victim && suspend(*victim);
}

bool StepLoop::suspend(Sequence& victim) {
  if (!options_.onSuspend || victim.ended() || victim.suspended_ || !victim.owned_) return false;
  // Out of this step, if it was in it: its reservation goes with its pages.
  for (size_t i = 0; i < stepping_.size(); i++) {
    if (stepping_[i] == &victim) {
      stepping_.erase(stepping_.begin() + std::ptrdiff_t(i));
      inputs_.erase(inputs_.begin() + std::ptrdiff_t(i));
      break;
    }
  }
  victim.suspended_ = true;
  victim.session_ = nullptr;
  options_.onSuspend(victim, std::move(victim.owned_));
  return true;
}

void StepLoop::resume(Sequence& s, std::unique_ptr<Session> session) {
  JITLLM_REQUIRE(s.suspended_ && session != nullptr, "resume: the sequence is not suspended, or no session");
  JITLLM_REQUIRE(size_t(session->length()) == s.fed_, "resume: the session holds ", session->length(),
                 " tokens, the sequence had fed ", s.fed_);
  s.session_ = session.get();
  s.owned_ = std::move(session);
  s.suspended_ = false;
}

bool StepLoop::take(Sequence& s, int64_t n) {
  try {
    // Out of KV pages: the owner may free some (idle sessions), or a less urgent sequence is
    // suspended, and it tries again.
    for (;;) {
      try {
        s.session_->reserve(n);
        break;
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kOverloaded) throw;
        if (options_.onOutOfMemory && options_.onOutOfMemory()) continue;
        if (!preemptFor(s)) throw;
      }
    }
  } catch (const Error& e) {
    s.error_ = e;  // this sequence only: the others still run
    return false;
  }
  // Unfed tokens beyond the next one are a prompt's (generated tokens are fed one by one as they
  // come): a long prompt's take the prompt path, all but its last token, which is always computed
  // as decode computes it - so each token's path is the same however the prompt was chunked.
  const int64_t promptTokens =
      s.promptPath_ ? std::min<int64_t>(n, int64_t(s.history_.size() - s.fed_) - 1) : int64_t(0);
  inputs_.push_back({s.session_, {s.history_.data() + s.fed_, size_t(n)}, false, promptTokens});
  stepping_.push_back(&s);
  return true;
}

bool StepLoop::step() {
  inputs_.clear();
  stepping_.clear();
  // Runnable sequences, most urgent first (in the order they came within a priority).
  order_.clear();
  for (auto& owned : sequences_) {
    Sequence& s = *owned;
    if (!s.ended() && !s.suspended_ && !(s.listener_ && s.listener_->paused())) order_.push_back(&s);
  }
  std::stable_sort(order_.begin(), order_.end(),
                   [](const Sequence* a, const Sequence* b) { return a->request_.priority < b->request_.priority; });
  // Decoding sequences first (a token each), then the prompts: the budget of tokens goes to the
  // most urgent, and while a priority-0 sequence decodes, the other prompts get what fits its
  // time per token.
  int64_t budget = options_.stepTokens;
  bool urgentDecoding = false;
  for (Sequence* s : order_) {
    if (budget == 0 || s->suspended_ || s->history_.size() - s->fed_ != 1) continue;
    if (take(*s, 1)) {
      budget--;
      urgentDecoding = urgentDecoding || s->request_.priority <= 0;
    }
  }
  int64_t lessUrgent = urgentDecoding ? prefillBudget() : INT64_MAX;
  for (Sequence* s : order_) {
    const int64_t remaining = int64_t(s->history_.size() - s->fed_);
    if (budget == 0 || remaining <= 1 || s->ended() || s->suspended_) continue;
    const bool urgent = s->request_.priority <= 0;
    if (!urgent && lessUrgent <= 0) continue;
    const int64_t n = std::min({remaining, options_.prefillChunk, budget, urgent ? INT64_MAX : lessUrgent});
    if (!take(*s, n)) continue;
    budget -= n;
    if (!urgent) lessUrgent -= n;
  }
  if (inputs_.empty()) return false;
  bool keepLogits = false;
  for (const Sequence* s : stepping_) keepLogits = keepLogits || s->request_.keepLogits;
  const auto started = Sequence::Clock::now();

  // A row per input: the candidates of the sequences whose prompt is fed by this step, a throwaway
  // argmax for those still mid-prompt.
  const int64_t vocab = model_.config().vocabSize;
  requests_.clear();
  int64_t stride = 1;
  for (size_t i = 0; i < stepping_.size(); i++) {
    Sequence& s = *stepping_[i];
    const bool picks = s.fed_ + inputs_[i].tokens.size() == s.history_.size();
    requests_.push_back(picks ? s.sampler_.candidates(s.history_, vocab) : CandidateRequest{});
    stride = std::max<int64_t>(stride, requests_.back().count);
  }
  try {
    if (keepLogits) {
      logits_.clear();
      model_.forward(inputs_, logits_);
    } else {
      model_.forward(inputs_, requests_, stride, ids_, values_);
    }
  } catch (const Error& e) {
    if (options_.onStepError) options_.onStepError(e);
    for (Sequence* s : stepping_) s->error_ = e;
    return true;
  }
  // Steering the prefill budget by this step's time, when an urgent sequence decoded in it.
  if (urgentDecoding && options_.urgentStepMs > 0) {
    const double ms = std::chrono::duration<double, std::milli>(Sequence::Clock::now() - started).count();
    double next = double(prefillBudget());
    const int64_t lessUrgentFed = prefillBudget() - std::max<int64_t>(lessUrgent, 0);
    if (ms > options_.urgentStepMs) {
      next = std::max(double(kMinUrgentPrefill), next * 0.5);
    } else if (ms < 0.75 * options_.urgentStepMs && double(lessUrgentFed) >= 0.9 * next) {
      next = std::min(double(options_.stepTokens), next * 1.25 + 8);
    }
    urgentBudget_ = next;
  }

  handOut(keepLogits, stride);
  return true;
}

void StepLoop::handOut(bool keepLogits, int64_t stride) {
  const int64_t vocab = model_.config().vocabSize;
  const tokenizer::Tokenizer* tok = model_.hasTokenizer() ? &model_.tokenizer() : nullptr;
  for (size_t i = 0; i < stepping_.size(); i++) {
    Sequence& s = *stepping_[i];
    s.fed_ += inputs_[i].tokens.size();
    if (s.fed_ < s.history_.size()) continue;  // more prompt to feed
    std::span<const float> row;
    int32_t token;
    if (keepLogits) {
      row = {logits_.data() + int64_t(i) * vocab, size_t(vocab)};
      token = s.sampler_.sample(row, s.history_);
      if (!s.request_.keepLogits) row = {};
    } else {
      const size_t at = i * size_t(stride), n = size_t(requests_[i].count);
      token = s.sampler_.pick({ids_.data() + at, n}, {values_.data() + at, n});
    }
    if (s.generated_ == 0) s.firstToken_ = Sequence::Clock::now();
    s.generated_++;
    s.history_.push_back(token);
    const bool end = s.request_.stopAtEndOfGeneration && tok && tok->isEndOfGeneration(token);
    std::string text;
    if (s.detokenizer_ && !(end && !s.request_.renderSpecialTokens)) text = s.stops_.feed(s.detokenizer_->feed(token));
    if (s.listener_) s.listener_->generated(token, text, row);
    if (end) {
      finish(s, StopReason::kEndOfGeneration);
    } else if (s.stops_.stopped()) {
      finish(s, StopReason::kStopString);
    } else if (s.generated_ >= s.request_.maxTokens) {
      finish(s, StopReason::kMaxTokens);
    } else if (s.session_->length() + 1 > s.session_->contextLimit()) {
      finish(s, StopReason::kContextFull);
    }
  }
}

std::vector<std::unique_ptr<Sequence>> StepLoop::takeEnded() {
  std::vector<std::unique_ptr<Sequence>> ended;
  for (auto& s : sequences_) {
    if (s->ended()) ended.push_back(std::move(s));
  }
  std::erase(sequences_, nullptr);
  return ended;
}

namespace {

class CallbackListener final : public SequenceListener {
 public:
  explicit CallbackListener(const TokenCallback& onToken) : onToken_(onToken) {}
  void generated(int32_t token, std::string_view, std::span<const float> logits) override {
    if (!onToken_(token, logits)) stopped_ = true;
  }
  bool stopped_ = false;

 private:
  const TokenCallback& onToken_;
};

}  // namespace

GenerationStats generate(Model& model, Session& session, const SequenceRequest& request, const TokenCallback& onToken) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  StepLoop loop(model, {});
  CallbackListener listener(onToken);
  Sequence& s = loop.add(session, request, &listener);
  const auto start = Clock::now();
  while (!s.ended() && !listener.stopped_ && loop.step()) {
  }
  if (s.error()) throw *s.error();
  GenerationStats stats;
  stats.promptTokens = int64_t(request.prompt.size());
  stats.generatedTokens = s.generated();
  const auto end = Clock::now();
  const auto first = s.generated() > 0 ? s.firstToken() : end;
  stats.promptSeconds = seconds(first - start);
  stats.generateSeconds = seconds(end - first);
  return stats;
}

}  // namespace jitllm::runtime
