// A stream's work captured as CUDA graphs and replayed: one launch for what would be hundreds of kernel
// launches (a decode step), so the device no longer waits on the host between kernels.
//
// capture_begin() records what is then queued on the stream (nothing runs); capture_end() turns it into an
// executable graph. Executables are kept per shape (the captured graph's node count): a capture of the same
// shape as a kept one updates it in place (kernel arguments, grids and copy addresses may all differ), which
// costs a fraction of instantiating it; a capture whose topology differs replaces the kept executable. The
// host memory a captured copy reads must be page-locked (HostBuffer) and stay valid until launch() is done.
#pragma once

#include <tensor/cuda/cuda_error.h>
#include <tensor/cuda/stream.h>

#include <cstddef>
#include <cstdint>
#include <list>

namespace tensor::cuda {

class GraphCache {
 public:
  // At most `max_shapes` executables are kept (the least recently used goes first).
  explicit GraphCache(std::size_t max_shapes = 8);
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // Starts capturing `stream` (relaxed mode: allocations and module loads stay allowed meanwhile; a
  // synchronization of the stream or the context invalidates the capture). Throws DriverError.
  void capture_begin(const Stream& stream);
  // Ends the capture and readies its executable. Returns false, with nothing to launch, when the capture
  // was invalidated (something that cannot be captured was queued or waited for); throws DriverError when
  // a valid graph cannot be instantiated.
  bool capture_end(const Stream& stream);
  // Ends a capture being abandoned (after an exception in the middle of it); never throws.
  void capture_abandon(const Stream& stream) noexcept;
  // Queues the executable readied by the last successful capture_end() on `stream`. Throws DriverError.
  void launch(const Stream& stream);

  std::uint64_t instantiations() const { return instantiations_; }
  std::uint64_t updates() const { return updates_; }

 private:
  struct Entry {
    std::size_t n_nodes = 0;
    void* exec = nullptr;  // CUgraphExec
  };
  std::size_t max_shapes_;
  std::list<Entry> entries_;  // most recently used first
  void* ready_ = nullptr;     // the CUgraphExec launch() runs
  std::uint64_t instantiations_ = 0, updates_ = 0;
};

// Page-locked host memory (cuMemAllocHost): copies from it are asynchronous and may be captured in graphs.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(std::size_t bytes);  // throws CudaUnavailable, DriverError
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer(HostBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr, o.bytes_ = 0; }
  HostBuffer& operator=(HostBuffer&& o) noexcept;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace tensor::cuda
