// NVRTC compilation, the disk cache of cubins, and module loading.
#include "tensor/cuda/jit.h"

#include "driver_api.h"
#include "tensor/cuda/device.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <system_error>

#if ORCHARD_HAVE_CUDA
#include <nvrtc.h>
#include <unistd.h>
#endif

namespace tensor::cuda {
namespace {

constexpr std::string_view kCacheFormat = "orchard-jit-1";

std::atomic<std::uint64_t> g_compiles{0};
std::atomic<std::uint64_t> g_disk_hits{0};
std::atomic<std::uint64_t> g_memory_hits{0};

[[maybe_unused]] std::uint64_t fnv1a(std::uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  // Separate the fields so that ("ab", "c") and ("a", "bc") differ.
  h ^= 0xff;
  h *= 0x100000001b3ull;
  return h;
}

[[maybe_unused]] std::string join_options(const std::vector<std::string>& options) {
  std::string out;
  for (const auto& o : options) {
    if (!out.empty()) out += ' ';
    out += o;
  }
  return out;
}

}  // namespace

std::filesystem::path jit_cache_dir() {
  if (const char* dir = std::getenv("ORCHARD_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    return std::filesystem::path(dir) / "kernels";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "orchard" / "kernels";
  }
  return std::filesystem::temp_directory_path() / "orchard-cache" / "kernels";
}

#if ORCHARD_HAVE_CUDA

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string jit_cache_key(std::string_view source, const std::vector<std::string>& options, int arch) {
  std::uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  const std::string fields[] = {std::string(kCacheFormat), nvrtc_version(), std::to_string(arch),
                                join_options(options)};
  for (const auto& f : fields) {
    a = fnv1a(a, f);
    b = fnv1a(b, f);
  }
  a = fnv1a(a, source);
  b = fnv1a(b ^ 0x9e3779b97f4a7c15ull, source);
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return hex;
}

namespace {

bool read_file(const std::filesystem::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return !out.empty();
}

// Best effort: a cache that cannot be written only costs a recompilation next time.
void write_file_atomically(const std::filesystem::path& path, const std::string& data) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return;
  const std::filesystem::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

void check_nvrtc(nvrtcResult status, std::string_view name, const std::string& opts, const char* what) {
  if (status == NVRTC_SUCCESS) return;
  throw CompileError("[tensor::cuda::compile_cubin] " + std::string(name) + " (" + opts + "): " + what + ": " +
                         nvrtcGetErrorString(status),
                     "");
}

std::string nvrtc_compile(std::string_view name, std::string_view source, const std::vector<std::string>& options,
                          int arch) {
  const std::string src(source);
  const std::string name_str(name);
  std::vector<std::string> all = options;
  all.push_back("-arch=sm_" + std::to_string(arch));
  all.push_back("-std=c++17");
  const std::string opts = join_options(all);
  std::vector<const char*> argv;
  for (const auto& o : all) argv.push_back(o.c_str());

  nvrtcProgram prog = nullptr;
  check_nvrtc(nvrtcCreateProgram(&prog, src.c_str(), name_str.c_str(), 0, nullptr, nullptr), name, opts,
              "nvrtcCreateProgram");
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&prog, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });
  const nvrtcResult status = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  g_compiles.fetch_add(1);
  if (status != NVRTC_SUCCESS) {
    std::size_t log_size = 0;
    nvrtcGetProgramLogSize(prog, &log_size);
    std::string log(log_size, '\0');
    if (log_size > 0) nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    throw CompileError("[tensor::cuda::compile_cubin] " + name_str + " (" + opts + "): " +
                           nvrtcGetErrorString(status) + ":\n" + log,
                       log);
  }
  std::size_t size = 0;
  check_nvrtc(nvrtcGetCUBINSize(prog, &size), name, opts, "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check_nvrtc(nvrtcGetCUBIN(prog, cubin.data()), name, opts, "nvrtcGetCUBIN");
  return cubin;
}

}  // namespace

std::string compile_cubin(std::string_view name, std::string_view source, const std::vector<std::string>& options,
                          int arch) {
  const std::filesystem::path path = jit_cache_dir() / (jit_cache_key(source, options, arch) + ".cubin");
  std::string cubin;
  if (read_file(path, cubin)) {
    g_disk_hits.fetch_add(1);
    return cubin;
  }
  cubin = nvrtc_compile(name, source, options, arch);
  write_file_atomically(path, cubin);
  return cubin;
}

namespace {

struct LoadedModules {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<Module>> modules;  // key: cache key + device ordinal
};

LoadedModules& loaded_modules() {
  static LoadedModules* m = new LoadedModules();  // modules live until exit
  return *m;
}

}  // namespace

const Module& load_module(std::string_view name, std::string_view source, const std::vector<std::string>& options) {
  make_current();
  const int arch = device_info().arch();
  const std::string key = jit_cache_key(source, options, arch);
  LoadedModules& lm = loaded_modules();
  std::lock_guard<std::mutex> lock(lm.mutex);
  if (auto it = lm.modules.find(key); it != lm.modules.end()) {
    g_memory_hits.fetch_add(1);
    return *it->second;
  }
  std::string cubin = compile_cubin(name, source, options, arch);
  CUmodule module = nullptr;
  CUresult status = detail::driver().cuModuleLoadData(&module, cubin.data());
  if (status != CUDA_SUCCESS) {
    // A damaged cache entry: compile afresh once before giving up.
    cubin = nvrtc_compile(name, source, options, arch);
    write_file_atomically(jit_cache_dir() / (key + ".cubin"), cubin);
    status = detail::driver().cuModuleLoadData(&module, cubin.data());
  }
  detail::check(status, "tensor::cuda::load_module", std::string(name) + " for sm_" + std::to_string(arch));
  auto [it, inserted] = lm.modules.emplace(key, std::make_unique<Module>(module, std::string(name)));
  return *it->second;
}

Kernel Module::kernel(const char* function) const {
  make_current();
  CUfunction fn = nullptr;
  detail::check(detail::driver().cuModuleGetFunction(&fn, static_cast<CUmodule>(module_), function),
                "tensor::cuda::Module::kernel", name_ + ": entry point " + function);
  return Kernel(fn, function);
}

void Kernel::launch(Dim3 grid, Dim3 block, unsigned shared_bytes, const Stream* stream, void** args) const {
  const CUstream s = stream != nullptr ? static_cast<CUstream>(stream->handle()) : nullptr;
  const CUresult status = detail::driver().cuLaunchKernel(static_cast<CUfunction>(function_), grid.x, grid.y, grid.z,
                                                          block.x, block.y, block.z, shared_bytes, s, args, nullptr);
  if (status != CUDA_SUCCESS) {
    detail::check(status, "tensor::cuda::Kernel::launch",
                  name_ + " grid (" + std::to_string(grid.x) + ", " + std::to_string(grid.y) + ", " +
                      std::to_string(grid.z) + ") block (" + std::to_string(block.x) + ", " +
                      std::to_string(block.y) + ", " + std::to_string(block.z) + ") shared " +
                      std::to_string(shared_bytes));
  }
}

void Kernel::launch_dependent(Dim3 grid, Dim3 block, unsigned shared_bytes, const Stream* stream,
                              void** args) const {
  if (device_info().arch() < 90) {
    launch(grid, block, shared_bytes, stream, args);
    return;
  }
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = grid.x;
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = block.x;
  config.blockDimY = block.y;
  config.blockDimZ = block.z;
  config.sharedMemBytes = shared_bytes;
  config.hStream = stream != nullptr ? static_cast<CUstream>(stream->handle()) : nullptr;
  config.attrs = &attr;
  config.numAttrs = 1;
  const CUresult status = detail::driver().cuLaunchKernelEx(&config, static_cast<CUfunction>(function_), args, nullptr);
  if (status != CUDA_SUCCESS) {
    detail::check(status, "tensor::cuda::Kernel::launch_dependent",
                  name_ + " grid (" + std::to_string(grid.x) + ", " + std::to_string(grid.y) + ", " +
                      std::to_string(grid.z) + ")");
  }
}

void Kernel::set_max_dynamic_shared(int bytes) const {
  detail::check(detail::driver().cuFuncSetAttribute(static_cast<CUfunction>(function_),
                                                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
                "tensor::cuda::Kernel::set_max_dynamic_shared", name_ + ": " + std::to_string(bytes) + " bytes");
}

int Kernel::max_active_blocks_per_sm(int threads, int shared_bytes) const {
  int blocks = 0;
  detail::check(detail::driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    &blocks, static_cast<CUfunction>(function_), threads, static_cast<std::size_t>(shared_bytes)),
                "tensor::cuda::Kernel::max_active_blocks_per_sm", name_);
  return blocks;
}

#else  // !ORCHARD_HAVE_CUDA

std::string nvrtc_version() { detail::throw_built_without_cuda("tensor::cuda::nvrtc_version"); }
std::string jit_cache_key(std::string_view, const std::vector<std::string>&, int) {
  detail::throw_built_without_cuda("tensor::cuda::jit_cache_key");
}
std::string compile_cubin(std::string_view, std::string_view, const std::vector<std::string>&, int) {
  detail::throw_built_without_cuda("tensor::cuda::compile_cubin");
}
const Module& load_module(std::string_view, std::string_view, const std::vector<std::string>&) {
  detail::throw_built_without_cuda("tensor::cuda::load_module");
}
Kernel Module::kernel(const char*) const { detail::throw_built_without_cuda("tensor::cuda::Module::kernel"); }
void Kernel::launch(Dim3, Dim3, unsigned, const Stream*, void**) const {
  detail::throw_built_without_cuda("tensor::cuda::Kernel::launch");
}
void Kernel::set_max_dynamic_shared(int) const {
  detail::throw_built_without_cuda("tensor::cuda::Kernel::set_max_dynamic_shared");
}
int Kernel::max_active_blocks_per_sm(int, int) const {
  detail::throw_built_without_cuda("tensor::cuda::Kernel::max_active_blocks_per_sm");
}
void Kernel::launch_dependent(Dim3, Dim3, unsigned, const Stream*, void**) const {
  detail::throw_built_without_cuda("tensor::cuda::Kernel::launch_dependent");
}

#endif

JitStats jit_stats() { return JitStats{g_compiles.load(), g_disk_hits.load(), g_memory_hits.load()}; }

}  // namespace tensor::cuda
