// The two ends of a request's event stream: the engine loop pushes events into a RequestChannel; the
// caller reads them through a RequestStream. Cancellation (cancel(), or dropping the stream) sets a flag
// the loop polls each step and wakes the loop through the shared EngineSignal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "pie/engine.h"

namespace pie::detail {

// Wakes the engine loop (new work, a cancellation). Shared by the engine and every channel, so a stream
// that outlives its engine still has something valid to poke.
struct EngineSignal {
  std::mutex mutex;
  std::condition_variable cv;
  bool pending = false;
  void notify() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      pending = true;
    }
    cv.notify_all();
  }
};

class RequestChannel {
 public:
  RequestChannel(std::string id, std::shared_ptr<EngineSignal> signal)
      : id_(std::move(id)), signal_(std::move(signal)) {}
  const std::string& id() const { return id_; }

  // Engine side.
  void push(Event event);
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Caller side. timeout: none to wait for ever.
  std::optional<Event> pop(std::optional<std::chrono::milliseconds> timeout, bool& timed_out);
  void cancel();

 private:
  std::string id_;
  std::shared_ptr<EngineSignal> signal_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool done_returned_ = false;
  std::atomic<bool> cancelled_{false};
};

class ChannelStream final : public RequestStream {
 public:
  explicit ChannelStream(std::shared_ptr<RequestChannel> channel) : channel_(std::move(channel)) {}
  ~ChannelStream() override { channel_->cancel(); }
  std::optional<Event> next() override { return channel_->pop(std::nullopt, timed_out_); }
  std::optional<Event> next_for(std::chrono::milliseconds timeout) override {
    return channel_->pop(timeout, timed_out_);
  }
  bool timed_out() const override { return timed_out_; }
  void cancel() override { channel_->cancel(); }
  const std::string& id() const override { return channel_->id(); }

 private:
  std::shared_ptr<RequestChannel> channel_;
  bool timed_out_ = false;
};

}  // namespace pie::detail
