// CUDA graphs of a stream's captured work, and page-locked host memory, over the driver API.
#include "tensor/cuda/graph.h"

#include "driver_api.h"
#include "tensor/cuda/device.h"

#include <string>

namespace tensor::cuda {

#if ORCHARD_HAVE_CUDA
using detail::check;
using detail::driver;

namespace {
CUstream handle(const Stream& s) { return static_cast<CUstream>(s.handle()); }
}  // namespace

GraphCache::GraphCache(std::size_t max_shapes) : max_shapes_(max_shapes < 1 ? 1 : max_shapes) {}

GraphCache::~GraphCache() {
  for (Entry& e : entries_) driver().cuGraphExecDestroy(static_cast<CUgraphExec>(e.exec));
}

void GraphCache::capture_begin(const Stream& stream) {
  ready_ = nullptr;
  check(driver().cuStreamBeginCapture(handle(stream), CU_STREAM_CAPTURE_MODE_RELAXED),
        "tensor::cuda::GraphCache::capture_begin", "cuStreamBeginCapture");
}

void GraphCache::capture_abandon(const Stream& stream) noexcept {
  CUgraph graph = nullptr;
  driver().cuStreamEndCapture(handle(stream), &graph);
  if (graph != nullptr) driver().cuGraphDestroy(graph);
  ready_ = nullptr;
}

bool GraphCache::capture_end(const Stream& stream) {
  CUgraph graph = nullptr;
  const CUresult ended = driver().cuStreamEndCapture(handle(stream), &graph);
  if (ended != CUDA_SUCCESS || graph == nullptr) {
    if (graph != nullptr) driver().cuGraphDestroy(graph);
    return false;
  }
  std::size_t n_nodes = 0;
  CUresult status = driver().cuGraphGetNodes(graph, nullptr, &n_nodes);
  if (status != CUDA_SUCCESS) {
    driver().cuGraphDestroy(graph);
    check(status, "tensor::cuda::GraphCache::capture_end", "cuGraphGetNodes");
  }
  auto it = entries_.begin();
  while (it != entries_.end() && it->n_nodes != n_nodes) ++it;
  if (it != entries_.end()) {
    entries_.splice(entries_.begin(), entries_, it);  // most recently used first
    CUgraphExecUpdateResultInfo info{};
    if (driver().cuGraphExecUpdate(static_cast<CUgraphExec>(it->exec), graph, &info) == CUDA_SUCCESS) {
      driver().cuGraphDestroy(graph);
      ++updates_;
      ready_ = it->exec;
      return true;
    }
    // Another topology of the same size: instantiated afresh below, in this entry's place.
    driver().cuGraphExecDestroy(static_cast<CUgraphExec>(it->exec));
    entries_.erase(entries_.begin());
  }
  CUgraphExec exec = nullptr;
  status = driver().cuGraphInstantiate(&exec, graph, 0);
  driver().cuGraphDestroy(graph);
  check(status, "tensor::cuda::GraphCache::capture_end", "cuGraphInstantiate of " + std::to_string(n_nodes) + " nodes");
  entries_.push_front({n_nodes, exec});
  ++instantiations_;
  while (entries_.size() > max_shapes_) {
    driver().cuGraphExecDestroy(static_cast<CUgraphExec>(entries_.back().exec));
    entries_.pop_back();
  }
  ready_ = exec;
  return true;
}

void GraphCache::launch(const Stream& stream) {
  if (ready_ == nullptr) {
    throw CudaError("[tensor::cuda::GraphCache::launch] no graph: the last capture failed or none was made");
  }
  check(driver().cuGraphLaunch(static_cast<CUgraphExec>(ready_), handle(stream)), "tensor::cuda::GraphCache::launch",
        "cuGraphLaunch");
}

HostBuffer::HostBuffer(std::size_t bytes) {
  if (bytes == 0) return;
  make_current();
  void* p = nullptr;
  check(driver().cuMemAllocHost(&p, bytes), "tensor::cuda::HostBuffer", std::to_string(bytes) + " bytes");
  data_ = p;
  bytes_ = bytes;
}

HostBuffer::~HostBuffer() {
  if (data_ != nullptr) driver().cuMemFreeHost(data_);
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) driver().cuMemFreeHost(data_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

#else

GraphCache::GraphCache(std::size_t max_shapes) : max_shapes_(max_shapes) {}
GraphCache::~GraphCache() = default;
void GraphCache::capture_begin(const Stream&) {
  detail::throw_built_without_cuda("tensor::cuda::GraphCache::capture_begin");
}
bool GraphCache::capture_end(const Stream&) { detail::throw_built_without_cuda("tensor::cuda::GraphCache::capture_end"); }
void GraphCache::capture_abandon(const Stream&) noexcept {}
void GraphCache::launch(const Stream&) { detail::throw_built_without_cuda("tensor::cuda::GraphCache::launch"); }
HostBuffer::HostBuffer(std::size_t bytes) {
  if (bytes != 0) detail::throw_built_without_cuda("tensor::cuda::HostBuffer");
}
HostBuffer::~HostBuffer() = default;
HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  data_ = o.data_;
  bytes_ = o.bytes_;
  o.data_ = nullptr;
  o.bytes_ = 0;
  return *this;
}

#endif

}  // namespace tensor::cuda
