// The CUDA JIT: kernel sources embedded in the binary as strings are compiled at run time by NVRTC for the
// GPU in hand (-arch=sm_XY), cached on disk, and loaded as modules. The disk cache is keyed by a hash of
// the source, the options, the architecture and the NVRTC version; it lives in $ORCHARD_CACHE_DIR, else
// ~/.cache/orchard (a kernels/ subfolder). A cache that cannot be written is skipped, never an error.
#pragma once

#include <tensor/cuda/cuda_error.h>
#include <tensor/cuda/stream.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tensor::cuda {

// One embedded source: its file name (for messages and #line) and its text.
struct EmbeddedSource {
  std::string_view name;  // e.g. "decode_attention.cu"
  std::string_view text;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// A kernel entry point of a loaded module. Cheap to copy.
class Kernel {
 public:
  Kernel() = default;
  explicit Kernel(void* function, std::string name) : function_(function), name_(std::move(name)) {}
  // Launches on `stream` (the legacy default stream when null) and checks the launch; args as cuLaunchKernel.
  // Throws DriverError naming the kernel and the grid.
  void launch(Dim3 grid, Dim3 block, unsigned shared_bytes, const Stream* stream, void** args) const;
  // As launch(), but on sm_90+ the kernel may be scheduled before the previous kernel on the stream has
  // finished (programmatic dependent launch): it must wait for it with `griddepcontrol.wait` before
  // reading its results. Saves the launch gap of short follow-up kernels (e.g. a merge).
  void launch_dependent(Dim3 grid, Dim3 block, unsigned shared_bytes, const Stream* stream, void** args) const;
  // Lets a launch use up to `bytes` of dynamic shared memory (needed past 48 KiB).
  void set_max_dynamic_shared(int bytes) const;
  // How many blocks of `threads` threads and `shared_bytes` dynamic shared memory fit on one multiprocessor.
  int max_active_blocks_per_sm(int threads, int shared_bytes) const;
  const std::string& name() const { return name_; }

 private:
  void* function_ = nullptr;  // CUfunction
  std::string name_;
};

// A module loaded on the current device; lives until the process ends.
class Module {
 public:
  Module(void* module, std::string name) : module_(module), name_(std::move(name)) {}
  // The entry point `function` (an extern "C" __global__ name); throws DriverError when absent.
  Kernel kernel(const char* function) const;

 private:
  void* module_ = nullptr;  // CUmodule
  std::string name_;
};

struct JitStats {
  std::uint64_t compiles = 0;     // NVRTC runs
  std::uint64_t disk_hits = 0;    // cubins read from the disk cache
  std::uint64_t memory_hits = 0;  // modules found already loaded
};

// NVRTC's version as "major.minor". Throws CudaUnavailable when built without CUDA.
std::string nvrtc_version();

// The disk cache folder: $ORCHARD_CACHE_DIR/kernels, else $HOME/.cache/orchard/kernels. Never throws.
std::filesystem::path jit_cache_dir();

// The cache key of a compilation (hex); exposed for tests.
std::string jit_cache_key(std::string_view source, const std::vector<std::string>& options, int arch);

// Compiles `source` to a cubin for sm_<arch> with NVRTC (no GPU needed), through the disk cache.
// Throws CompileError whose message holds the NVRTC log, CudaUnavailable when built without CUDA.
std::string compile_cubin(std::string_view name, std::string_view source,
                          const std::vector<std::string>& options, int arch);

// Compiles (cached) for the current device and loads the module; the same (source, options) pair is
// loaded once per process. Throws CompileError, CudaUnavailable or DriverError.
const Module& load_module(std::string_view name, std::string_view source, const std::vector<std::string>& options);

JitStats jit_stats();

}  // namespace tensor::cuda
