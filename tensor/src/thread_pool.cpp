#include "tensor/thread_pool.h"

#include <algorithm>
#include <string>

#include "tensor/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ORCHARD_CPU_RELAX() _mm_pause()
#else
#define ORCHARD_CPU_RELAX() ((void)0)
#endif

namespace tensor {
namespace {
// The pool whose task the current thread is running (a parallel call made from inside a task runs inline
// instead of waiting on workers that are busy with the outer call).
thread_local const ThreadPool* tl_active_pool = nullptr;
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads < 0 || n_threads > 1024) {
    throw Error("[tensor::ThreadPool] n_threads " + std::to_string(n_threads) +
                " is out of range [0, 1024]");
  }
  if (n_threads == 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  workers_.reserve(static_cast<std::size_t>(n_threads - 1));
  for (int t = 1; t < n_threads; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::run_task(int thread) {
  const ThreadPool* outer = tl_active_pool;
  tl_active_pool = this;
  try {
    (*task_)(thread, n_threads_);
    tl_active_pool = outer;
  } catch (...) {
    tl_active_pool = outer;
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_main(int thread) {
  std::uint32_t seen = 0;
  for (;;) {
    // Spin first: per-layer loops come back within microseconds, and a futex wake costs more than that.
    std::uint32_t gen = generation_.load(std::memory_order_acquire);
    const std::uint32_t spins = spin_iterations_.load(std::memory_order_relaxed);
    for (std::uint32_t i = 0; gen == seen && i < spins; ++i) {
      ORCHARD_CPU_RELAX();
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    // Enter, then check the job is still open and still the one we woke for (a worker that was
    // descheduled may arrive after the caller closed an optional job, or a job later).
    entered_.fetch_add(1, std::memory_order_seq_cst);
    if (open_.load(std::memory_order_seq_cst) && job_gen_.load(std::memory_order_seq_cst) == gen) {
      run_task(thread);
      finished_.fetch_add(1, std::memory_order_acq_rel);
      finished_.notify_one();
    }
    if (entered_.fetch_sub(1, std::memory_order_acq_rel) == 1) entered_.notify_one();
  }
}

namespace {
// Spins, then sleeps, until `a` holds `target`.
void wait_for(std::atomic<int>& a, int target, std::uint32_t spins) {
  int v = a.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; v != target && i < spins; ++i) {
    ORCHARD_CPU_RELAX();
    v = a.load(std::memory_order_acquire);
  }
  while (v != target) {
    a.wait(v, std::memory_order_acquire);
    v = a.load(std::memory_order_acquire);
  }
}
}  // namespace

void ThreadPool::dispatch(FunctionRef<void(int, int)>& fn, bool all_threads) {
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  task_ = &fn;
  error_ = nullptr;
  finished_.store(0, std::memory_order_relaxed);
  job_gen_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
  open_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  run_task(0);
  const std::uint32_t spins = spin_iterations_.load(std::memory_order_relaxed);
  // A job every thread must run waits for all of them; an optional one (chunks claimed from a shared
  // counter, all done by now) is closed at once, so a worker the OS has not scheduled yet is not waited
  // for: on a busy machine the caller finishes the work alone instead of idling.
  if (all_threads) wait_for(finished_, n_threads_ - 1, spins);
  open_.store(false, std::memory_order_seq_cst);
  wait_for(entered_, 0, spins);
  task_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::run(FunctionRef<void(int thread, int n_threads)> fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  if (tl_active_pool == this) {  // nested call from one of our own tasks: run every share here, in order
    for (int t = 0; t < n_threads_; ++t) fn(t, n_threads_);
    return;
  }
  dispatch(fn, true);
}

void ThreadPool::parallel_for(std::int64_t n, FunctionRef<void(std::int64_t, std::int64_t)> fn,
                              std::int64_t grain) {
  if (grain < 1) throw Error("[tensor::ThreadPool::parallel_for] grain " + std::to_string(grain) + " < 1");
  if (n <= 0) return;
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  constexpr std::int64_t kChunksPerThread = 4;
  const std::int64_t chunk =
      std::max(grain, (n + n_threads_ * kChunksPerThread - 1) / (n_threads_ * kChunksPerThread));
  const std::int64_t n_chunks = (n + chunk - 1) / chunk;
  alignas(64) std::atomic<std::int64_t> next{0};
  auto body = [&](int, int) {
    for (;;) {
      const std::int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) return;
      const std::int64_t begin = c * chunk;
      fn(begin, std::min(n, begin + chunk));
    }
  };
  if (tl_active_pool == this) {
    body(0, n_threads_);
    return;
  }
  FunctionRef<void(int, int)> ref(body);
  dispatch(ref, false);
}

void ThreadPool::parallel_for_static(std::int64_t n,
                                     FunctionRef<void(std::int64_t, std::int64_t)> fn,
                                     std::int64_t grain) {
  if (grain < 1) {
    throw Error("[tensor::ThreadPool::parallel_for_static] grain " + std::to_string(grain) + " < 1");
  }
  if (n <= 0) return;
  const std::int64_t n_units = (n + grain - 1) / grain;
  if (n_threads_ == 1 || n_units == 1) {
    fn(0, n);
    return;
  }
  run([&](int thread, int n_threads) {
    const std::int64_t begin = std::min(n, (n_units * thread / n_threads) * grain);
    const std::int64_t end = std::min(n, (n_units * (thread + 1) / n_threads) * grain);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace tensor
