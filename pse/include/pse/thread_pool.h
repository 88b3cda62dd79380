// A small fixed pool of worker threads for pse's batch mask fill (pse links no other layer of ours).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pse {

class ThreadPool {
 public:
  // n_threads == 0: std::thread::hardware_concurrency(). The calling thread also works in parallel_for.
  explicit ThreadPool(std::size_t n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  std::size_t n_threads() const { return workers_.size() + 1; }
  // Runs fn(i) for i in [0, n), spread over the threads; returns when all are done. The first exception
  // thrown by fn is rethrown here (the other indices still run). Not reentrant.
  void parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn);

 private:
  void work(std::size_t generation);
  void worker_loop();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(std::size_t)>* fn_ = nullptr;
  std::size_t n_ = 0, next_ = 0, active_ = 0, generation_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace pse
