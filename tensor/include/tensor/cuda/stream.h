// CUDA streams and events (RAII over the driver's CUstream / CUevent, kept opaque so that this header needs
// no CUDA toolkit). All calls throw CudaUnavailable when CUDA cannot be used, DriverError on failure.
#pragma once

#include <tensor/cuda/cuda_error.h>

namespace tensor::cuda {

class Stream {
 public:
  // A new non-blocking stream on the current device.
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  Stream& operator=(Stream&& other) noexcept;

  // Waits for everything queued on this stream; throws DriverError (e.g. a kernel fault).
  void synchronize() const;
  // Whether everything queued is done, without waiting; asking also hands what was queued to the
  // device now (the driver may hold launches back otherwise). Throws DriverError (a kernel fault).
  bool done() const;
  void* handle() const { return handle_; }  // the CUstream

 private:
  void* handle_ = nullptr;
};

class Event {
 public:
  // A new event that records timing.
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void synchronize() const;
  // Makes `stream` wait for this event's last record.
  void wait_on(const Stream& stream) const;
  // Milliseconds between two recorded (and completed) events.
  static float elapsed_ms(const Event& start, const Event& stop);
  void* handle() const { return handle_; }  // the CUevent

 private:
  void* handle_ = nullptr;
};

}  // namespace tensor::cuda
