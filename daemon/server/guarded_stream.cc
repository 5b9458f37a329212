#include "daemon/server/guarded_stream.h"

#include <kj/debug.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace jitllm::server {
namespace {

// Cap'n Proto refuses messages of more segments than this; past it we stop following the framing
// and let capnp fail the connection.
constexpr uint32_t kMaxSegments = 512;

uint32_t littleEndian32(const kj::byte* b) {
  return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
}

}  // namespace

bool InflightBudget::take(size_t bytes) {
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ || used > limit_ - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

GuardedStream::GuardedStream(kj::Own<kj::AsyncCapabilityStream> inner, std::shared_ptr<InflightBudget> budget)
    : inner_(kj::mv(inner)), budget_(std::move(budget)) {}

GuardedStream::~GuardedStream() noexcept(false) {
  if (reserved_) budget_->give(reserved_);
}

void GuardedStream::startBody(uint64_t words) {
  const uint64_t bytes = words * 8;
  if (bytes == 0) {
    finishMessage();
    return;
  }
  if (!budget_->take(size_t(bytes))) {
    spdlog::warn("refusing a request of {} bytes: {} of max_inflight_bytes {} are held by unfinished requests", bytes,
                 budget_->used(), budget_->limit());
    // Failing the read fails this connection only; its reply is the disconnect.
    kj::throwFatalException(KJ_EXCEPTION(OVERLOADED,
                                         "request refused: the daemon holds its limit of bytes of "
                                         "unfinished requests (max_inflight_bytes)",
                                         bytes, budget_->used(), budget_->limit()));
  }
  reserved_ = size_t(bytes);
  bodyLeft_ = bytes;
  state_ = State::kBody;
}

void GuardedStream::finishMessage() {
  if (reserved_) budget_->give(reserved_);
  reserved_ = 0;
  state_ = State::kFirstWord;
  headerFill_ = 0;
}

void GuardedStream::consume(const kj::byte* bytes, size_t n) {
  bytesRead_ += n;
  if (n > 0) lastActivity_ = lastRead_ = Clock::now();
  while (n > 0 && !untracked_) {
    switch (state_) {
      case State::kFirstWord: {
        const size_t take = std::min(n, firstWord_.size() - headerFill_);
        std::memcpy(firstWord_.data() + headerFill_, bytes, take);
        headerFill_ += take;
        bytes += take;
        n -= take;
        if (headerFill_ < firstWord_.size()) break;
        segments_ = littleEndian32(firstWord_.data()) + 1;
        if (segments_ == 0 || segments_ > kMaxSegments) {
          untracked_ = true;  // capnp refuses it
          break;
        }
        tableWords_ = littleEndian32(firstWord_.data() + 4);
        // The rest of the table: a size per further segment, then padding to a whole word.
        entriesLeft_ = segments_ - 1;
        paddingLeft_ = segments_ % 2 == 0 ? 4 : 0;
        sizeFill_ = 0;
        if (entriesLeft_ == 0 && paddingLeft_ == 0) {
          startBody(tableWords_);
        } else {
          state_ = State::kTable;
        }
        break;
      }
      case State::kTable: {
        while (n > 0 && entriesLeft_ > 0) {
          entry_[sizeFill_++] = *bytes++;
          n--;
          if (sizeFill_ == 4) {
            tableWords_ += littleEndian32(entry_.data());
            sizeFill_ = 0;
            entriesLeft_--;
          }
        }
        const size_t pad = std::min<size_t>(n, paddingLeft_);
        paddingLeft_ -= uint32_t(pad);
        bytes += pad;
        n -= pad;
        if (entriesLeft_ == 0 && paddingLeft_ == 0) startBody(tableWords_);
        break;
      }
      case State::kBody: {
        const size_t take = size_t(std::min<uint64_t>(n, bodyLeft_));
        bodyLeft_ -= take;
        bytes += take;
        n -= take;
        if (bodyLeft_ == 0) finishMessage();
        break;
      }
    }
  }
}

kj::Promise<size_t> GuardedStream::tryRead(void* buffer, size_t minBytes, size_t maxBytes) {
  return inner_->tryRead(buffer, minBytes, maxBytes).then([this, buffer](size_t n) {
    consume(static_cast<const kj::byte*>(buffer), n);
    return n;
  });
}

kj::Promise<GuardedStream::ReadResult> GuardedStream::tryReadWithFds(void* buffer, size_t minBytes, size_t maxBytes,
                                                                     kj::AutoCloseFd* fdBuffer, size_t maxFds) {
  return inner_->tryReadWithFds(buffer, minBytes, maxBytes, fdBuffer, maxFds).then([this, buffer](ReadResult r) {
    consume(static_cast<const kj::byte*>(buffer), r.byteCount);
    return r;
  });
}

kj::Promise<GuardedStream::ReadResult> GuardedStream::tryReadWithStreams(
    void* buffer, size_t minBytes, size_t maxBytes, kj::Own<kj::AsyncCapabilityStream>* streamBuffer,
    size_t maxStreams) {
  return inner_->tryReadWithStreams(buffer, minBytes, maxBytes, streamBuffer, maxStreams)
      .then([this, buffer](ReadResult r) {
        consume(static_cast<const kj::byte*>(buffer), r.byteCount);
        return r;
      });
}

kj::Promise<void> GuardedStream::write(const void* buffer, size_t size) {
  sawWrite();
  return inner_->write(buffer, size).then([this] { sawWrite(); });
}

kj::Promise<void> GuardedStream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  sawWrite();
  return inner_->write(pieces).then([this] { sawWrite(); });
}

kj::Promise<void> GuardedStream::writeWithFds(kj::ArrayPtr<const kj::byte> data,
                                              kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> moreData,
                                              kj::ArrayPtr<const int> fds) {
  sawWrite();
  return inner_->writeWithFds(data, moreData, fds).then([this] { sawWrite(); });
}

kj::Promise<void> GuardedStream::writeWithStreams(kj::ArrayPtr<const kj::byte> data,
                                                  kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> moreData,
                                                  kj::Array<kj::Own<kj::AsyncCapabilityStream>> streams) {
  sawWrite();
  return inner_->writeWithStreams(data, moreData, kj::mv(streams)).then([this] { sawWrite(); });
}

}  // namespace jitllm::server
