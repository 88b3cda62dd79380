#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "tensor/error.h"
#include "tensor/thread_pool.h"

namespace {

TEST(ThreadPool, RunCallsEveryThreadOnce) {
  for (int n : {1, 2, 3}) {
    tensor::ThreadPool pool(n);
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    for (int rep = 0; rep < 50; ++rep) {
      pool.run([&](int t, int nt) {
        EXPECT_EQ(nt, n);
        hits[static_cast<std::size_t>(t)]++;
      });
    }
    for (auto& h : hits) EXPECT_EQ(h.load(), 50);
  }
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  tensor::ThreadPool pool(2);
  for (std::int64_t n : {0, 1, 5, 64, 1000, 4097}) {
    for (std::int64_t grain : {1, 7, 64}) {
      std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
      pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) seen[static_cast<std::size_t>(i)]++;
      }, grain);
      for (auto& s : seen) ASSERT_EQ(s.load(), 1) << "n " << n << " grain " << grain;
      std::vector<std::atomic<int>> seen2(static_cast<std::size_t>(n));
      pool.parallel_for_static(n, [&](std::int64_t b, std::int64_t e) {
        EXPECT_EQ(b % grain, 0);
        for (std::int64_t i = b; i < e; ++i) seen2[static_cast<std::size_t>(i)]++;
      }, grain);
      for (auto& s : seen2) ASSERT_EQ(s.load(), 1) << "static n " << n << " grain " << grain;
    }
  }
}

TEST(ThreadPool, ExceptionsReachTheCallerAndThePoolSurvives) {
  tensor::ThreadPool pool(2);
  EXPECT_THROW(pool.run([](int t, int) {
    if (t == 1) throw std::runtime_error("worker failed");
  }), std::runtime_error);
  EXPECT_THROW(pool.parallel_for(100, [](std::int64_t b, std::int64_t) {
    if (b > 0) throw std::logic_error("chunk failed");
  }), std::logic_error);
  std::atomic<int> ok{0};
  pool.run([&](int, int) { ok++; });
  EXPECT_EQ(ok.load(), 2);
}

TEST(ThreadPool, BadArgumentsThrow) {
  EXPECT_THROW(tensor::ThreadPool(-1), tensor::Error);
  tensor::ThreadPool pool(1);
  EXPECT_THROW(pool.parallel_for(10, [](std::int64_t, std::int64_t) {}, 0), tensor::Error);
}

TEST(ThreadPool, ManyShortCallsMixingOptionalAndFullJobs) {
  // parallel_for may finish without a worker that was not scheduled in time; run() never does. Mixing
  // them back to back checks a late worker never runs a job twice or joins a closed one.
  for (std::uint32_t spins : {0u, 200u}) {
    tensor::ThreadPool pool(3);
    pool.set_spin_iterations(spins);
    for (int rep = 0; rep < 300; ++rep) {
      std::atomic<std::int64_t> sum{0};
      pool.parallel_for(97, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) sum += i;
      });
      ASSERT_EQ(sum.load(), 97 * 96 / 2);
      std::atomic<int> mask{0};
      pool.run([&](int t, int) { mask.fetch_or(1 << t); });
      ASSERT_EQ(mask.load(), 7);
    }
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  tensor::ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.run([&](int, int) {
    pool.parallel_for(10, [&](std::int64_t b, std::int64_t e) { inner += static_cast<int>(e - b); });
  });
  EXPECT_EQ(inner.load(), 20);
}

TEST(ThreadPool, SleepingWorkersWakeUp) {
  tensor::ThreadPool pool(2);
  pool.set_spin_iterations(0);  // straight to sleep between calls
  std::atomic<int> total{0};
  for (int rep = 0; rep < 200; ++rep) pool.run([&](int, int) { total++; });
  EXPECT_EQ(total.load(), 400);
}

}  // namespace
