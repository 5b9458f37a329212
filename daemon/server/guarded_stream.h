// A client connection's byte stream, watched: what a local user who can reach the socket must not
// be able to do to everyone else - hold memory with messages that never finish, or hold a
// connection that never says anything.
//
// GuardedStream forwards everything to the socket's stream and follows Cap'n Proto's framing as
// the bytes go by (a segment table, then the segments), so it knows when a message starts, how
// large it will be and when it ends:
//  - bytes of messages not yet complete count against one InflightBudget shared by every
//    connection; a message that would take the total past it fails its connection (OVERLOADED)
//    before its bytes arrive, so the daemon's memory for requests in flight is bounded whatever
//    the clients do;
//  - it records when bytes last moved in either direction, and whether a message is half read,
//    for the connection's watchdog (rpc_listener.cc): a connection that sends nothing after
//    connecting, stalls inside a message, or idles with nothing in flight is closed.
//
// Ownership: owns the inner stream; shares the budget.
// Thread-safety: RPC (KJ) thread only; InflightBudget may be read from any thread.
#pragma once

#include <kj/async-io.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace jitllm::server {

// Bytes of incomplete requests across every connection, and the most there may be.
class InflightBudget final {
 public:
  explicit InflightBudget(size_t limit) : limit_(limit) {}
  // Reserves `bytes` or returns false when that would pass the limit.
  bool take(size_t bytes);
  void give(size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

class GuardedStream final : public kj::AsyncCapabilityStream {
 public:
  using Clock = std::chrono::steady_clock;

  GuardedStream(kj::Own<kj::AsyncCapabilityStream> inner, std::shared_ptr<InflightBudget> budget);
  ~GuardedStream() noexcept(false);

  // What the watchdog reads.
  uint64_t bytesRead() const { return bytesRead_; }
  Clock::time_point lastActivity() const { return lastActivity_; }  // a read or a write, either way
  Clock::time_point lastRead() const { return lastRead_; }
  bool insideMessage() const { return state_ != State::kFirstWord || headerFill_ > 0; }

  // kj::AsyncInputStream / AsyncOutputStream / AsyncIoStream
  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, kj::uint* length) override {
    inner_->getsockopt(level, option, value, length);
  }
  void setsockopt(int level, int option, const void* value, kj::uint length) override {
    inner_->setsockopt(level, option, value, length);
  }
  void getsockname(struct sockaddr* addr, kj::uint* length) override { inner_->getsockname(addr, length); }
  void getpeername(struct sockaddr* addr, kj::uint* length) override { inner_->getpeername(addr, length); }
  kj::Maybe<int> getFd() const override { return inner_->getFd(); }

  // kj::AsyncCapabilityStream
  kj::Promise<void> writeWithFds(kj::ArrayPtr<const kj::byte> data,
                                 kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> moreData,
                                 kj::ArrayPtr<const int> fds) override;
  kj::Promise<ReadResult> tryReadWithFds(void* buffer, size_t minBytes, size_t maxBytes, kj::AutoCloseFd* fdBuffer,
                                         size_t maxFds) override;
  kj::Promise<void> writeWithStreams(kj::ArrayPtr<const kj::byte> data,
                                     kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> moreData,
                                     kj::Array<kj::Own<kj::AsyncCapabilityStream>> streams) override;
  kj::Promise<ReadResult> tryReadWithStreams(void* buffer, size_t minBytes, size_t maxBytes,
                                             kj::Own<kj::AsyncCapabilityStream>* streamBuffer,
                                             size_t maxStreams) override;

 private:
  // Where the reader is in Cap'n Proto's framing: the first word (segment count - 1, size of
  // segment 0), the rest of the segment table (with its padding), the segments.
  enum class State { kFirstWord, kTable, kBody };
  // Feeds bytes just read through the framing; throws (OVERLOADED) when a message would pass the
  // budget.
  void consume(const kj::byte* bytes, size_t n);
  void startBody(uint64_t words);
  void finishMessage();
  void sawWrite() { lastActivity_ = Clock::now(); }

  kj::Own<kj::AsyncCapabilityStream> inner_;
  std::shared_ptr<InflightBudget> budget_;
  State state_ = State::kFirstWord;
  std::array<kj::byte, 8> firstWord_{};
  size_t headerFill_ = 0;            // bytes of the first word seen
  uint32_t segments_ = 0;            // from the first word
  uint32_t entriesLeft_ = 0;         // table entries after the first word still to come
  uint32_t paddingLeft_ = 0;         // then bytes of padding
  uint64_t tableWords_ = 0;          // the segment sizes summed so far (words)
  uint32_t sizeFill_ = 0;            // bytes of the current table entry seen
  std::array<kj::byte, 4> entry_{};  // the table entry being assembled, little-endian
  uint64_t bodyLeft_ = 0;            // bytes of segments still to come
  size_t reserved_ = 0;              // taken from the budget for the message being read
  uint64_t bytesRead_ = 0;
  Clock::time_point lastActivity_ = Clock::now();
  Clock::time_point lastRead_ = Clock::now();
  bool untracked_ = false;  // a table capnp refuses anyway: stop following the framing
};

}  // namespace jitllm::server
