// Streams and events over the driver API.
#include "tensor/cuda/stream.h"

#include "driver_api.h"
#include "tensor/cuda/device.h"

namespace tensor::cuda {

#if ORCHARD_HAVE_CUDA
using detail::check;
using detail::driver;

Stream::Stream() {
  make_current();
  CUstream s = nullptr;
  check(driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "tensor::cuda::Stream", "cuStreamCreate");
  handle_ = s;
}

Stream::~Stream() {
  if (handle_ != nullptr) driver().cuStreamDestroy(static_cast<CUstream>(handle_));
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) driver().cuStreamDestroy(static_cast<CUstream>(handle_));
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

void Stream::synchronize() const {
  make_current();
  check(driver().cuStreamSynchronize(static_cast<CUstream>(handle_)), "tensor::cuda::Stream::synchronize",
        "cuStreamSynchronize");
}

bool Stream::done() const {
  const CUresult status = driver().cuStreamQuery(static_cast<CUstream>(handle_));
  if (status == CUDA_ERROR_NOT_READY) return false;
  check(status, "tensor::cuda::Stream::done", "cuStreamQuery");
  return true;
}

Event::Event() {
  make_current();
  CUevent e = nullptr;
  check(driver().cuEventCreate(&e, CU_EVENT_DEFAULT), "tensor::cuda::Event", "cuEventCreate");
  handle_ = e;
}

Event::~Event() {
  if (handle_ != nullptr) driver().cuEventDestroy(static_cast<CUevent>(handle_));
}

void Event::record(const Stream& stream) {
  check(driver().cuEventRecord(static_cast<CUevent>(handle_), static_cast<CUstream>(stream.handle())),
        "tensor::cuda::Event::record", "cuEventRecord");
}

void Event::synchronize() const {
  check(driver().cuEventSynchronize(static_cast<CUevent>(handle_)), "tensor::cuda::Event::synchronize",
        "cuEventSynchronize");
}

void Event::wait_on(const Stream& stream) const {
  check(driver().cuStreamWaitEvent(static_cast<CUstream>(stream.handle()), static_cast<CUevent>(handle_), 0),
        "tensor::cuda::Event::wait_on", "cuStreamWaitEvent");
}

float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.0f;
  check(driver().cuEventElapsedTime(&ms, static_cast<CUevent>(start.handle_), static_cast<CUevent>(stop.handle_)),
        "tensor::cuda::Event::elapsed_ms", "cuEventElapsedTime");
  return ms;
}

#else

Stream::Stream() { detail::throw_built_without_cuda("tensor::cuda::Stream"); }
Stream::~Stream() = default;
Stream& Stream::operator=(Stream&& other) noexcept {
  handle_ = other.handle_;
  other.handle_ = nullptr;
  return *this;
}
void Stream::synchronize() const { detail::throw_built_without_cuda("tensor::cuda::Stream::synchronize"); }
bool Stream::done() const { detail::throw_built_without_cuda("tensor::cuda::Stream::done"); }
Event::Event() { detail::throw_built_without_cuda("tensor::cuda::Event"); }
Event::~Event() = default;
void Event::record(const Stream&) { detail::throw_built_without_cuda("tensor::cuda::Event::record"); }
void Event::synchronize() const { detail::throw_built_without_cuda("tensor::cuda::Event::synchronize"); }
void Event::wait_on(const Stream&) const { detail::throw_built_without_cuda("tensor::cuda::Event::wait_on"); }
float Event::elapsed_ms(const Event&, const Event&) {
  detail::throw_built_without_cuda("tensor::cuda::Event::elapsed_ms");
}

#endif

}  // namespace tensor::cuda
