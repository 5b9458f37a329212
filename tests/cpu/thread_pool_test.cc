#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace jitllm::cpu {
namespace {

TEST(ThreadPool, EveryIndexIsVisitedExactlyOnceForManySizesAndThreadCounts) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {int64_t(1), int64_t(2), int64_t(7), int64_t(64), int64_t(1000), int64_t(4097)}) {
      for (int64_t minChunk : {int64_t(1), int64_t(3), int64_t(100)}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        pool.parallelFor(n, minChunk, [&](int64_t begin, int64_t end) {
          ASSERT_LE(0, begin);
          ASSERT_LT(begin, end);
          ASSERT_LE(end, n);
          for (int64_t i = begin; i < end; i++) seen[size_t(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < n; i++) ASSERT_EQ(seen[size_t(i)].load(), 1) << "n " << n << " index " << i;
      }
    }
  }
}

// The first version read the generation in the worker's own start-up, so a pool destroyed before
// a worker ran missed the shutdown generation and hung in join().
TEST(ThreadPool, APoolDestroyedBeforeItsWorkersStartDoesNotHang) {
  for (int i = 0; i < 200; i++) {
    ThreadPool pool(3);
  }
}

TEST(ThreadPool, ManyBackToBackLoopsNeverLoseOrRepeatWork) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int i = 0; i < 20000; i++) {
    pool.parallelFor(16, 1, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
  }
  EXPECT_EQ(total.load(), 20000 * 16);
}

TEST(ThreadPool, AnExceptionInOneRangeIsRethrownAfterAllRangesFinish) {
  ThreadPool pool(2);
  std::atomic<int64_t> done{0};
  EXPECT_THROW(pool.parallelFor(100, 1,
                                [&](int64_t begin, int64_t end) {
                                  done.fetch_add(end - begin);
                                  if (begin == 0) throw std::runtime_error("first range fails");
                                }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> again{0};
  pool.parallelFor(100, 1, [&](int64_t begin, int64_t end) { again.fetch_add(end - begin); });
  EXPECT_EQ(again.load(), 100);
}

}  // namespace
}  // namespace jitllm::cpu
