// Waiting in tests: for a condition, polled, up to a bound generous enough for a loaded machine
// (a parallel build, stress-ng) and stretched for sanitizer builds, which run several times
// slower. A bound that passes only on an idle machine fails a newcomer's first scripts/test.sh;
// one that never ends hangs CI - so every wait has one, and it is long.
#pragma once

#include <chrono>
#include <thread>

namespace jitllm::testing {

// Sanitizer builds keep freed memory in quarantine and run several times slower: checks of
// resident memory and of wall-clock latency only mean something without them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

inline std::chrono::milliseconds scaled(std::chrono::milliseconds t) { return kSanitized ? 4 * t : t; }

// Polls `done` every `poll` until it holds (true) or scaled(bound) has passed (false).
template <typename Done>
bool waitUntil(Done&& done, std::chrono::milliseconds bound,
               std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + scaled(bound);
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace jitllm::testing
