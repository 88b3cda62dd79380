// A thread pool with low overhead for per-layer parallel loops: persistent workers that spin briefly and
// then sleep, work split over ranges, and the calling thread participating as thread 0.
//
//   tensor::ThreadPool pool(2);                      // 2 threads in all: the caller and 1 worker
//   pool.parallel_for(n_rows, [&](std::int64_t begin, std::int64_t end) { ... });
//   pool.run([&](int thread, int n_threads) { ... });  // the same function once on every thread
//
// One parallel call at a time per pool (calls from several threads are serialized by a mutex); a parallel
// call made from inside one of the pool's own tasks runs inline on that thread. The first exception thrown
// by the function on any thread is rethrown to the caller after all threads finish.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace tensor {

// A non-owning reference to a callable (no allocation, one indirect call); the callable must outlive it.
template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit by design
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* obj, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(obj))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  // n_threads counts the caller: n_threads - 1 workers are started. 0 means std::thread::hardware_concurrency.
  // Throws tensor::Error when n_threads < 0 or > 1024.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(thread, n_threads) once on every thread (thread 0 is the caller) and returns when all are done.
  void run(FunctionRef<void(int thread, int n_threads)> fn);

  // Splits [0, n) into contiguous chunks of at least `grain` elements (a few per thread, claimed
  // dynamically so a slow thread does not hold the others back) and calls fn(begin, end) for each. A
  // worker that has not started by the time the caller has finished every chunk is not waited for.
  // Runs inline when n is small or the pool has one thread. Throws tensor::Error when grain < 1.
  void parallel_for(std::int64_t n, FunctionRef<void(std::int64_t begin, std::int64_t end)> fn,
                    std::int64_t grain = 1);

  // Same, with even static ranges, one per thread (thread t gets the t-th range): best when every element
  // costs the same and memory streams should stay contiguous (matrix-vector products).
  void parallel_for_static(std::int64_t n,
                           FunctionRef<void(std::int64_t begin, std::int64_t end)> fn,
                           std::int64_t grain = 1);

  // How long idle workers spin before sleeping (iterations of a pause loop; default about 50 us).
  void set_spin_iterations(std::uint32_t n) { spin_iterations_.store(n, std::memory_order_relaxed); }

 private:
  void worker_main(int thread);
  void run_task(int thread);
  // Publishes fn to the workers, runs it as thread 0, and returns when it is done: on every thread
  // (all_threads) or on the caller plus whichever workers joined before the caller finished.
  void dispatch(FunctionRef<void(int, int)>& fn, bool all_threads);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel call at a time
  FunctionRef<void(int, int)>* task_ = nullptr;
  alignas(64) std::atomic<std::uint32_t> generation_{0};
  alignas(64) std::atomic<std::uint32_t> job_gen_{0};  // generation of the job workers may join
  std::atomic<bool> open_{false};                       // the job still accepts workers
  alignas(64) std::atomic<int> entered_{0};             // workers inside the job protocol now
  alignas(64) std::atomic<int> finished_{0};            // workers that ran the current job
  std::atomic<bool> stop_{false};
  std::atomic<std::uint32_t> spin_iterations_{20000};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace tensor
