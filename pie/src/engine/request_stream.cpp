#include "request_stream.h"

namespace pie::detail {

void RequestChannel::push(Event event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

std::optional<Event> RequestChannel::pop(std::optional<std::chrono::milliseconds> timeout, bool& timed_out) {
  std::unique_lock<std::mutex> lock(mutex_);
  timed_out = false;
  if (done_returned_) return std::nullopt;
  auto ready = [&] { return !events_.empty(); };
  if (timeout) {
    if (!cv_.wait_for(lock, *timeout, ready)) {
      timed_out = true;
      return std::nullopt;
    }
  } else {
    cv_.wait(lock, ready);
  }
  Event event = std::move(events_.front());
  events_.pop_front();
  if (event.done) done_returned_ = true;
  return event;
}

void RequestChannel::cancel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // After the done event there is nothing left to cancel.
    if (done_returned_) return;
  }
  if (!cancelled_.exchange(true, std::memory_order_acq_rel)) signal_->notify();
}

}  // namespace pie::detail
