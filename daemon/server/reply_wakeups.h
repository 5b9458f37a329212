// Wake-ups from the model workers to the RPC thread, batched: one cross-thread signal per step
// for every reply that step fed, not one per reply.
//
// The RPC side arms a wake-up for a reply that has nothing to send (arm()): it gets a promise and a
// waker to hand to the GenerationJob. A worker that calls wakers inside a StepScope only queues
// their ids; when the outermost scope on that thread ends, the RPC thread is signalled once, and
// its pump fulfils every queued reply's promise in one turn of the event loop. Called outside a
// scope (a failure reported from another thread, a cancel), a waker signals at once.
//
// A waker holds only an id and the shared queue, never a KJ object, so it may be called or
// destroyed on any thread, after its reply is gone, or after the ReplyWakeups itself is gone.
//
// Ownership: the RPC thread owns the ReplyWakeups (the listener, for the daemon's one RPC thread);
// it must be destroyed on that thread, before its event loop.
// Thread-safety: arm() and the destructor on the RPC thread; wakers and StepScope on any thread.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

namespace jitllm::server {

class ReplyWakeups final {
 public:
  ReplyWakeups();
  ~ReplyWakeups();
  ReplyWakeups(const ReplyWakeups&) = delete;
  ReplyWakeups& operator=(const ReplyWakeups&) = delete;

  // A promise fulfilled on this thread some time after the waker is first called (later calls do
  // nothing). Dropping the promise forgets the wake-up.
  std::pair<kj::Promise<void>, std::function<void()>> arm();

  // While one lives on a thread, wakers called on that thread are held back and signalled together
  // when the outermost one ends. Nests.
  class StepScope final {
   public:
    StepScope();
    ~StepScope();
    StepScope(const StepScope&) = delete;
    StepScope& operator=(const StepScope&) = delete;
  };

  // Signals sent to this thread so far (one per batch, however many replies it woke); for tests.
  uint64_t signalsReceived() const { return signals_; }

  struct Queue;  // the part wakers share; defined in the .cc

 private:
  kj::Promise<void> pump();

  std::shared_ptr<Queue> queue_;
  std::unordered_map<uint64_t, kj::Own<kj::PromiseFulfiller<void>>> armed_;
  uint64_t nextId_ = 1;
  uint64_t signals_ = 0;
  kj::Promise<void> pumping_;
};

}  // namespace jitllm::server
