// cuBLAS loaded with dlopen (tensor/cuda/blas.h). The declarations below are the few cuBLAS entry
// points and constants the products need, as cublas_api.h and library_types.h of CUDA 12 and 13
// define them (the ABI of these entry points is the same in both).
#include "tensor/cuda/blas.h"

#include <cstdlib>
#include <limits>
#include <string>

#include "driver_api.h"
#include "tensor/cuda/device.h"

#if ORCHARD_HAVE_CUDA
#include <dlfcn.h>
#endif

namespace tensor::cuda {

namespace {

bool hidden_by_env() {
  const char* v = std::getenv("ORCHARD_CUBLAS");
  return v != nullptr && std::string(v) == "0";
}

}  // namespace

#if ORCHARD_HAVE_CUDA
namespace {

// cublas_api.h / library_types.h.
using cublasHandle_t = void*;
using cublasStatus_t = int;
constexpr cublasStatus_t kCublasSuccess = 0;      // CUBLAS_STATUS_SUCCESS
constexpr int kOpN = 0, kOpT = 1;                 // CUBLAS_OP_N, CUBLAS_OP_T
constexpr int kR16F = 2, kR16BF = 14, kR32F = 0;  // CUDA_R_16F, CUDA_R_16BF, CUDA_R_32F
constexpr int kCompute32F = 68;                   // CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;                  // CUBLAS_GEMM_DEFAULT

struct BlasApi {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;               // cublasCreate_v2
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;               // cublasDestroy_v2
  cublasStatus_t (*set_stream)(cublasHandle_t, CUstream) = nullptr;  // cublasSetStream_v2
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*,
                                  std::size_t) = nullptr;  // cublasSetWorkspace_v2
  const char* (*status_name)(cublasStatus_t) = nullptr;    // cublasGetStatusName
  // cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
  // Ctype, ldc,
  //              computeType, algo)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, int, int, int, int, int, const void*, const void*, int,
                            int, const void*, int, int, const void*, void*, int, int, int,
                            int) = nullptr;
  // cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B,
  // Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo)
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, int, int, int, int, int, const void*,
                                            const void*, int, int, long long, const void*, int, int,
                                            long long, const void*, void*, int, int, long long, int,
                                            int, int) = nullptr;
};

struct LoadedBlas {
  BlasApi api;
  std::string error;  // why it could not be loaded; "" when it was
};

template <typename F>
bool load_symbol(void* lib, const char* name, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr) error = std::string("the cuBLAS library found has no ") + name;
  return fn != nullptr;
}

LoadedBlas load_blas() {
  LoadedBlas out;
  void* lib = nullptr;
  std::string tried;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* why = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (why ? why : name);
  }
  if (lib == nullptr) {
    out.error = "libcublas.so.13 / .12 not found (" + tried + ")";
    return out;
  }
  BlasApi& a = out.api;
  std::string& e = out.error;
  (void)(load_symbol(lib, "cublasCreate_v2", a.create, e) &&
         load_symbol(lib, "cublasDestroy_v2", a.destroy, e) &&
         load_symbol(lib, "cublasSetStream_v2", a.set_stream, e) &&
         load_symbol(lib, "cublasSetWorkspace_v2", a.set_workspace, e) &&
         load_symbol(lib, "cublasGetStatusName", a.status_name, e) &&
         load_symbol(lib, "cublasGemmEx", a.gemm_ex, e) &&
         load_symbol(lib, "cublasGemmStridedBatchedEx", a.gemm_strided_batched_ex, e));
  return out;
}

const LoadedBlas& loaded() {
  static const LoadedBlas instance = load_blas();
  return instance;
}

const BlasApi& blas() {
  if (hidden_by_env())
    throw CudaUnavailable("[tensor::cuda::Blas] cuBLAS hidden by ORCHARD_CUBLAS=0");
  const LoadedBlas& l = loaded();
  if (!l.error.empty()) throw CudaUnavailable("[tensor::cuda::Blas] " + l.error);
  return l.api;
}

void check(cublasStatus_t status, const char* what) {
  if (status == kCublasSuccess) return;
  const char* name = loaded().api.status_name ? loaded().api.status_name(status) : nullptr;
  throw CudaError(std::string("[tensor::cuda::Blas] ") + what + ": " +
                  (name ? name : "cuBLAS error") + " (" + std::to_string(status) + ")");
}

// cuBLAS workspace: 32 MiB, NVIDIA's recommendation for Hopper (less suffices for older cards).
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

}  // namespace

std::string blas_unavailable_reason() {
  if (hidden_by_env()) return "hidden by ORCHARD_CUBLAS=0";
  const std::string driver = unavailable_reason();
  if (!driver.empty()) return driver;
  return loaded().error;
}

Blas::Blas(const Stream& stream) {
  const BlasApi& a = blas();
  cublasHandle_t h = nullptr;
  check(a.create(&h), "cublasCreate");
  handle_ = h;
  try {
    workspace_ = MemoryPool::global().allocate(kWorkspaceBytes);
    check(a.set_workspace(h, workspace_.as<void>(), workspace_.bytes()), "cublasSetWorkspace");
    check(a.set_stream(h, static_cast<CUstream>(stream.handle())), "cublasSetStream");
  } catch (...) {
    a.destroy(h);
    throw;
  }
}

Blas::~Blas() {
  if (handle_ != nullptr) loaded().api.destroy(handle_);
}

namespace {

void check_sizes(const char* op, std::int64_t n_out, std::int64_t n_tokens, std::int64_t n_in,
                 std::int64_t ldw, std::int64_t ldx, std::int64_t ldy) {
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  if (n_out <= 0 || n_tokens <= 0 || n_in <= 0 || n_out > kMax || n_tokens > kMax || n_in > kMax ||
      ldw < n_in || ldx < n_in || ldy < n_out || ldw > kMax || ldx > kMax || ldy > kMax) {
    throw ShapeError(std::string("[tensor::cuda::Blas::") + op + "] sizes n_out " +
                     std::to_string(n_out) + ", n_tokens " + std::to_string(n_tokens) + ", n_in " +
                     std::to_string(n_in) + " with strides ldw " + std::to_string(ldw) + ", ldx " +
                     std::to_string(ldx) + ", ldy " + std::to_string(ldy) +
                     ": expected positive sizes below 2^31 and strides at least the rows' lengths");
  }
}

}  // namespace

void Blas::gemm(GemmInput input, const void* w, std::int64_t ldw, const void* x, std::int64_t ldx,
                float* y, std::int64_t ldy, std::int64_t n_out, std::int64_t n_tokens,
                std::int64_t n_in) const {
  check_sizes("gemm", n_out, n_tokens, n_in, ldw, ldx, ldy);
  const int type = input == GemmInput::f16 ? kR16F : kR16BF;
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major, as cuBLAS sees it: y^T [n_out, n_tokens] = (w as [n_in, n_out])^T x^T [n_in,
  // n_tokens].
  check(loaded().api.gemm_ex(handle_, kOpT, kOpN, static_cast<int>(n_out),
                             static_cast<int>(n_tokens), static_cast<int>(n_in), &alpha, w, type,
                             static_cast<int>(ldw), x, type, static_cast<int>(ldx), &beta, y, kR32F,
                             static_cast<int>(ldy), kCompute32F, kGemmDefault),
        "cublasGemmEx");
}

void Blas::gemm_split_k(GemmInput input, const void* w, std::int64_t ldw, const void* x,
                        std::int64_t ldx, float* partials, std::int64_t n_out,
                        std::int64_t n_tokens, std::int64_t n_in, int splits) const {
  check_sizes("gemm_split_k", n_out, n_tokens, n_in, ldw, ldx, n_out);
  if (splits < 1 || n_in % splits != 0 || (n_in / splits) % 8 != 0) {
    throw ShapeError("[tensor::cuda::Blas::gemm_split_k] " + std::to_string(splits) +
                     " parts of n_in " + std::to_string(n_in) +
                     ": expected parts of a multiple of 8 elements each");
  }
  const int type = input == GemmInput::f16 ? kR16F : kR16BF;
  const float alpha = 1.0f, beta = 0.0f;
  const std::int64_t part = n_in / splits;
  // Part s: columns [s part, (s + 1) part) of w and x (an element offset along their rows), its
  // output the s-th [n_tokens, n_out] block of partials.
  check(loaded().api.gemm_strided_batched_ex(
            handle_, kOpT, kOpN, static_cast<int>(n_out), static_cast<int>(n_tokens),
            static_cast<int>(part), &alpha, w, type, static_cast<int>(ldw), part, x, type,
            static_cast<int>(ldx), part, &beta, partials, kR32F, static_cast<int>(n_out),
            n_out * n_tokens, splits, kCompute32F, kGemmDefault),
        "cublasGemmStridedBatchedEx");
}

#else  // !ORCHARD_HAVE_CUDA

std::string blas_unavailable_reason() {
  if (hidden_by_env()) return "hidden by ORCHARD_CUBLAS=0";
  return unavailable_reason();
}
Blas::Blas(const Stream&) { detail::throw_built_without_cuda("tensor::cuda::Blas"); }
Blas::~Blas() = default;
void Blas::gemm(GemmInput, const void*, std::int64_t, const void*, std::int64_t, float*,
                std::int64_t, std::int64_t, std::int64_t, std::int64_t) const {
  detail::throw_built_without_cuda("tensor::cuda::Blas::gemm");
}
void Blas::gemm_split_k(GemmInput, const void*, std::int64_t, const void*, std::int64_t, float*,
                        std::int64_t, std::int64_t, std::int64_t, int) const {
  detail::throw_built_without_cuda("tensor::cuda::Blas::gemm_split_k");
}

#endif

}  // namespace tensor::cuda
