// ReplyWakeups: the model worker's wake-ups reach the RPC thread once per step, not once per reply.
#include "daemon/server/reply_wakeups.h"

#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <kj/timer.h>
#include <kj/vector.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/daemon/bounded_wait.h"

namespace jitllm::server {
namespace {

// Waits on the event loop until every promise resolved, or fails after a generous bound.
void waitAll(kj::AsyncIoContext& io, kj::Array<kj::Promise<void>> promises) {
  auto all = kj::joinPromises(kj::mv(promises));
  auto bounded = io.provider->getTimer()
                     .timeoutAfter(jitllm::testing::scaled(std::chrono::seconds(30)).count() * kj::MILLISECONDS, kj::mv(all));
  bounded.wait(io.waitScope);
}

TEST(ReplyWakeups, AWakerCalledOutsideAStepFulfilsItsPromiseAtOnce) {
  auto io = kj::setupAsyncIo();
  ReplyWakeups wakeups;
  auto [promise, waker] = wakeups.arm();
  std::thread([w = waker] { w(); }).join();
  kj::Vector<kj::Promise<void>> p;
  p.add(kj::mv(promise));
  waitAll(io, p.releaseAsArray());
  EXPECT_EQ(wakeups.signalsReceived(), 1u);
}

TEST(ReplyWakeups, EveryReplyOfAStepArrivesWithOneSignal) {
  auto io = kj::setupAsyncIo();
  ReplyWakeups wakeups;
  constexpr int kReplies = 64;
  kj::Vector<kj::Promise<void>> promises;
  std::vector<std::function<void()>> wakers;
  for (int i = 0; i < kReplies; i++) {
    auto [promise, waker] = wakeups.arm();
    promises.add(kj::mv(promise));
    wakers.push_back(waker);
  }
  std::mutex m;
  std::condition_variable cv;
  bool woken = false, stepMayEnd = false;
  std::thread worker([&] {
    const ReplyWakeups::StepScope step;
    for (auto& w : wakers) {
      w();
      w();  // a second call of the same waker does nothing
    }
    std::unique_lock lock(m);
    woken = true;
    cv.notify_all();
    cv.wait(lock, [&] { return stepMayEnd; });
  });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return woken; });
  }
  // Mid-step, nothing has been signalled: the RPC thread finds no event to run.
  io.waitScope.poll();
  EXPECT_EQ(wakeups.signalsReceived(), 0u);
  {
    std::lock_guard lock(m);
    stepMayEnd = true;
    cv.notify_all();
  }
  worker.join();
  waitAll(io, promises.releaseAsArray());
  EXPECT_EQ(wakeups.signalsReceived(), 1u);
}

TEST(ReplyWakeups, OneWorkersLongStepDoesNotHoldBackAnothers) {
  auto io = kj::setupAsyncIo();
  ReplyWakeups wakeups;
  auto [slowPromise, slowWaker] = wakeups.arm();
  auto [fastPromise, fastWaker] = wakeups.arm();
  std::mutex m;
  std::condition_variable cv;
  bool fastDelivered = false;
  std::thread slow([&, w = slowWaker] {
    const ReplyWakeups::StepScope step;
    w();
    std::unique_lock lock(m);
    // Its step lasts until the other worker's reply has arrived on the RPC thread.
    cv.wait_for(lock, jitllm::testing::scaled(std::chrono::seconds(30)), [&] { return fastDelivered; });
  });
  std::thread([w = fastWaker] {
    const ReplyWakeups::StepScope step;
    w();
  }).join();
  kj::Vector<kj::Promise<void>> fast;
  fast.add(fastPromise.then([&] {
    std::lock_guard lock(m);
    fastDelivered = true;
    cv.notify_all();
  }));
  waitAll(io, fast.releaseAsArray());
  slow.join();
  kj::Vector<kj::Promise<void>> rest;
  rest.add(kj::mv(slowPromise));
  waitAll(io, rest.releaseAsArray());
  EXPECT_TRUE(fastDelivered);
}

TEST(ReplyWakeups, WakersOutliveTheirPromisesAndTheWakeupsThemselves) {
  auto io = kj::setupAsyncIo();
  std::function<void()> orphan, afterwards, late;
  {
    ReplyWakeups wakeups;
    auto [dropped, w1] = wakeups.arm();
    orphan = w1;
    { auto gone = kj::mv(dropped); }  // the client left before its reply had anything
    orphan();
    auto [kept, w2] = wakeups.arm();
    afterwards = w2;
    w2();
    kj::Vector<kj::Promise<void>> p;
    p.add(kj::mv(kept));
    waitAll(io, p.releaseAsArray());
    late = wakeups.arm().second;  // its promise dropped at once, its waker kept
  }
  // The RPC thread's wake-ups are gone: calling (and destroying) wakers on another thread is harmless.
  std::thread([&] {
    afterwards();
    orphan();
    {
      const ReplyWakeups::StepScope step;
      late();
    }
    late = nullptr;
    orphan = nullptr;
  }).join();
  EXPECT_FALSE(late);
}

}  // namespace
}  // namespace jitllm::server
