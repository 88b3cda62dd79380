// The CUDA backend's small-token products on the Llama-3.1-8B shapes (4096 -> 4096, 1024, 14336; 14336 ->
// 4096; 4096 -> 128256), and the launches the backend makes of them (q + k + v and gate + up in one launch),
// at 1, 2, 4, 5 and 8 tokens (1 to 512 with --tokens): weight bytes per second against the card's
// device-to-device copy rate measured in the same run; and RMSNorm of as many rows of 4096. The launches are
// product_launch.h's, the backend's own; the q8_1 types include the activations' quantization, as a
// project() call does. One JSON object per line on stdout.
//
//   orchard_bench_products [--types f16,q8_0,q4_0] [--tokens 1,2,4,5,8] [--reps N] [-D NAME=VALUE]...
//                          [--source FILE] [--legacy] [--mma] [--mmq] [--mmq-parts N] [--compile-only]
//
// --mma launches the f16 / bf16 products on tensor cores (matvec_mma_ops.cu, as the backend does from 2
// tokens; the other types as without it); without it they run on the matvec kernels. --mmq launches the q8_0 /
// q4_0 / q4_1 products on int8 tensor cores (mmq_ops.cu) at every token count (the backend sends them q8_0
// products of kMmqMinTokens to kMmqMaxTokens tokens), their lengths in product_launch.h's mmq_parts
// (--mmq-parts N: N parts where the length has that many stages; 1 is the launch before the parts). -D passes a tunable to
// NVRTC: of decoder_ops.cu's matvec kernels (MV_ROWS_NARROW, MV_ROWS_WIDE, MV_UNROLL, MV_SPLIT), or of
// matvec_mma_ops.cu's (MMA_WARPS, MMA_TILES, MMA_UNROLL, MMA_PIPELINE, MMA_PIPELINE_N16, MMA_EXACT_X,
// MMA_MIN_BLOCKS: the MMA_ names go to that source only, so the matvec module stays cached), or of mmq_ops.cu's
// (MMQ_WARPS_M, MMQ_WARPS_N, MMQ_WM, MMQ_WN, MMQ_STAGES, MMQ_KSPLIT); --source reads
// the matvec kernels from FILE instead of the embedded decoder_ops.cu; --legacy launches the products as the
// backend did before the matvec kernels (9bc0eb0: matmul_<type> a block per row, matmul_q8_1_<type> a warp
// per row, one output a launch), for a before/after in one run. --compile-only loads the module (filling the
// JIT cache) and exits: variants can be compiled side by side ahead of a sweep.
//
// Times: median of --reps samples of 20 back-to-back launch sequences between CUDA events; a spin kernel
// queued ahead of each start event lets the host queue the sequence, so launch latency is not counted.
// The weights rotate over copies in a 1.2 GB buffer, so that no launch finds its weights in L2.
#include <tensor/cuda/device.h>
#include <tensor/cuda/jit.h>
#include <tensor/cuda/memory_pool.h>
#include <tensor/cuda/stream.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_sources.h"     // pie/src/backend/cuda: the backend's kernels
#include "product_launch.h"  // and how it launches them

namespace {

namespace tc = tensor::cuda;
namespace pc = pie::cuda;
using tensor::DType;

constexpr const char* kSpinSource = R"(
extern "C" __global__ void spin(long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
}
)";

struct Options {
  std::vector<std::string> types{"f16", "q8_0", "q4_0"};
  std::vector<int> tokens{1, 2, 4, 5, 8};
  std::vector<std::string> defines;
  std::string source_file;
  bool legacy = false;
  bool mma = false;
  bool mmq = false;
  int mmq_parts = 0;  // 0: product_launch.h's rule
  bool compile_only = false;
  int reps = 15;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

DType parse_type(const std::string& t) {
  static const std::map<std::string, DType> types{{"f32", DType::f32},   {"f16", DType::f16},   {"bf16", DType::bf16},
                                                  {"q8_0", DType::q8_0}, {"q4_0", DType::q4_0}, {"q4_1", DType::q4_1}};
  const auto it = types.find(t);
  if (it == types.end()) throw std::runtime_error("unknown type " + t + " (f32 f16 bf16 q8_0 q4_0 q4_1)");
  return it->second;
}

// A launch of the backend's (or the legacy) products: outputs of n_out rows each, sharing one input.
struct Case {
  std::string name;
  int n_in;
  std::vector<int> n_out;
};

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {
    std::string text;
    if (o.source_file.empty()) {
      text = pc::kernel_text("decoder_ops.cu");
    } else {
      std::ifstream f(o.source_file);
      if (!f) throw std::runtime_error("cannot read " + o.source_file);
      text.assign(std::istreambuf_iterator<char>(f), {});
    }
    std::vector<std::string> opts, mma_opts, mmq_opts;
    for (const std::string& d : o.defines) {
      (d.starts_with("MMA_") ? mma_opts : d.starts_with("MMQ_") ? mmq_opts : opts).push_back("-D" + d);
      const auto eq = d.find('=');
      const std::string name = d.substr(0, eq);
      const int value = eq == std::string::npos ? 1 : std::atoi(d.c_str() + eq + 1);
      if (name == "MV_ROWS_NARROW") shape_.rows_narrow = value;
      if (name == "MV_ROWS_WIDE") shape_.rows_wide = value;
      if (name == "MMA_TILES") shape_.mma_rows = 16 * value;
      if (name == "MMA_WARPS") shape_.mma_threads = 32 * value;
      if (name == "MMQ_WARPS_M") mmq_shape_.warps_m = value;
      if (name == "MMQ_WARPS_N") mmq_shape_.warps_n = value;
      if (name == "MMQ_WM") mmq_shape_.wm = value;
      if (name == "MMQ_WN") mmq_shape_.wn = value;
      if (name == "MMQ_STAGES") mmq_shape_.stages = value;
      if (name == "MMQ_KSPLIT") mmq_shape_.ksplit = value;
    }
    for (const std::string& d : o.defines) variant_ += (variant_.empty() ? "" : " ") + d;
    if (o.legacy) variant_ = "legacy";
    if (variant_.empty()) variant_ = "default";
    if (o.mma) variant_ = "mma " + variant_;
    if (o.mmq) variant_ = "mmq " + variant_;
    if (o.mmq && o.mmq_parts > 0) variant_ += " parts " + std::to_string(o.mmq_parts);
    module_ = &tc::load_module(o.source_file.empty() ? "decoder_ops.cu" : "decoder_ops_bench.cu", text, opts);
    if (o.mma) mma_module_ = &tc::load_module("matvec_mma_ops.cu", pc::kernel_text("matvec_mma_ops.cu"), mma_opts);
    if (o.mmq) {
      mmq_module_ = &tc::load_module("mmq_ops.cu", pc::kernel_text("mmq_ops.cu"), mmq_opts);
      for (DType t : {DType::q8_0, DType::q4_0, DType::q4_1}) {
        mmq_module_->kernel(pc::mmq_entry(std::string(tensor::dtype_name(t))).c_str()).set_max_dynamic_shared(mmq_shape_.shared_bytes(t));
      }
    }
    spin_ = tc::load_module("bench_spin.cu", kSpinSource, {}).kernel("spin");
    weights_ = tc::MemoryPool::global().allocate(kWeightBytes);
    weights_.fill_bytes(0x11);
    std::vector<float> x(static_cast<std::size_t>(kMaxTokens) * 14336);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    x_ = tc::MemoryPool::global().allocate(x.size() * sizeof(float));
    x_.copy_from_host(x.data(), x.size() * sizeof(float));
    y_ = tc::MemoryPool::global().allocate(static_cast<std::size_t>(kMaxTokens) * 128256 * 4 * sizeof(float));
    xq_ = tc::MemoryPool::global().allocate(static_cast<std::size_t>(kMaxTokens) * 14336);
    xd_ = tc::MemoryPool::global().allocate(static_cast<std::size_t>(kMaxTokens) * 14336 / 32 * 2 * sizeof(float));
  }

  double copy_gbs() {
    const std::size_t bytes = 1ull << 30;
    tc::DeviceBuffer a = tc::MemoryPool::global().allocate(bytes), b = tc::MemoryPool::global().allocate(bytes);
    a.fill_bytes(1);
    const double ms = time_ms([&] { b.copy_from_device(a, bytes, &stream_); });
    return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  }

  void run(const Case& c, DType type, const std::string& type_name, int n_tokens, double copy) {
    const long long row_bytes = static_cast<long long>(tensor::row_bytes(type, c.n_in));
    long long bytes = 0;
    for (int n : c.n_out) bytes += row_bytes * n;
    const long long copies = std::max<long long>(1, static_cast<long long>(kWeightBytes) / bytes);
    long long next = 0;
    const double ms = time_ms([&] {
      const std::uint8_t* base = weights_.as<std::uint8_t>() + (next++ % copies) * bytes;
      launch(c, type, type_name, n_tokens, base, row_bytes);
    });
    const double gbs = static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
    std::printf(
        "{\"bench\": \"products\", \"variant\": \"%s\", \"type\": \"%s\", \"case\": \"%s\", \"n_in\": %d, "
        "\"n_out\": %lld, \"tokens\": %d, \"time_us\": %.2f, \"weight_gbs\": %.1f, \"copy_gbs\": %.1f, "
        "\"fraction\": %.3f}\n",
        variant_.c_str(), type_name.c_str(), c.name.c_str(), c.n_in, bytes / row_bytes, n_tokens, ms * 1e3, gbs, copy,
        gbs / copy);
    std::fflush(stdout);
    times_[{type_name, n_tokens}][c.name] = ms;
  }

  // RMSNorm of n_tokens rows of 4096 (the step's other kernel a layer runs twice), as the backend launches it.
  void norm(int n_tokens) {
    const float* x = x_.as<float>();
    const float* w = x_.as<float>();
    float eps = 1e-5f;
    int n = 4096;
    float* y = y_.as<float>();
    const tc::Kernel k = module_->kernel("rms_norm");
    const double ms = time_ms([&] {
      void* xq = nullptr;  // no q8_1 blocks alongside
      void* xd = nullptr;
      void* args[] = {&x, &w, &eps, &n, &y, &xq, &xd};
      k.launch({static_cast<unsigned>(n_tokens), 1, 1}, {256, 1, 1}, 0, &stream_, args);
    });
    std::printf("{\"bench\": \"rms_norm\", \"variant\": \"%s\", \"n\": 4096, \"tokens\": %d, \"time_us\": %.2f}\n",
                variant_.c_str(), n_tokens, ms * 1e3);
    std::fflush(stdout);
  }

  // Per type and token count: the products of one layer (q + k + v, o, gate + up, down) and of a step of 32
  // layers and the output head, and the tokens a second that leaves for everything else taking no time.
  void summary() const {
    for (const auto& [key, t] : times_) {
      const auto get = [&](const char* n) { return t.count(n) ? t.at(n) : 0.0; };
      const double layer = get("qkv") + get("o") + get("gate_up") + get("down");
      const double step = 32 * layer + get("head");
      std::printf(
          "{\"bench\": \"products_step\", \"variant\": \"%s\", \"type\": \"%s\", \"tokens\": %d, \"layer_us\": %.1f, "
          "\"step_ms\": %.3f, \"products_only_steps_per_s\": %.1f}\n",
          variant_.c_str(), key.first.c_str(), key.second, layer * 1e3, step, 1e3 / step);
    }
  }

 private:
  static constexpr std::size_t kWeightBytes = 1200ull << 20;

 public:
  static constexpr int kMaxTokens = 512;

 private:

  void launch(const Case& c, DType type, const std::string& suffix, int n_tokens, const std::uint8_t* base,
              long long row_bytes) {
    int n_in = c.n_in;
    const bool q8 = pc::matvec_reads_q8_1(type);
    const void* xq = xq_.as<void>();
    const void* xd = xd_.as<void>();
    const float* x = x_.as<float>();
    if (q8) {  // quantize_q8_1, once for all outputs (as project() does)
      const long long total = static_cast<long long>(n_in / 32) * n_tokens;
      void* args[] = {&x, &n_in, &n_tokens, &xq, &xd};
      module_->kernel("quantize_q8_1")
          .launch({static_cast<unsigned>((total + 7) / 8), 1, 1}, {256, 1, 1}, 0, &stream_, args);
    }
    if (o_.legacy) {
      const std::uint8_t* w = base;
      for (int n_out : c.n_out) {
        float* y = y_.as<float>();
        const unsigned token_blocks = static_cast<unsigned>((n_tokens + 7) / 8);
        if (q8) {
          void* args[] = {&w, &row_bytes, &n_out, &n_in, &xq, &xd, &n_tokens, &y};
          module_->kernel(("matmul_q8_1_" + suffix).c_str())
              .launch({static_cast<unsigned>((n_out + 3) / 4), token_blocks, 1}, {128, 1, 1}, 0, &stream_, args);
        } else {
          void* args[] = {&w, &row_bytes, &n_out, &n_in, &x, &n_tokens, &y};
          module_->kernel(("matmul_" + suffix).c_str())
              .launch({static_cast<unsigned>(n_out), token_blocks, 1}, {128, 1, 1}, 0, &stream_, args);
        }
        w += row_bytes * n_out;
      }
      return;
    }
    pc::ProductOutputs po;
    const std::uint8_t* w = base;
    float* y = y_.as<float>();
    for (int n_out : c.n_out) {
      const auto j = static_cast<std::size_t>(po.count++);
      po.w[j] = w;
      po.y[j] = y;
      po.row_bytes[j] = row_bytes;
      po.n_out[j] = n_out;
      w += row_bytes * n_out;
      y += static_cast<std::size_t>(n_out) * kMaxTokens;
    }
    if (o_.mmq && pc::mmq_takes(type, n_in, row_bytes, base)) {
      const unsigned grid_x = pc::matvec_layout(po, mmq_shape_.rows());
      int n_parts = pc::mmq_parts(grid_x, n_in, o_.mmq_parts);
      const auto parts_bytes =
          static_cast<std::size_t>(pc::mmq_parts_floats(n_parts, grid_x, mmq_shape_.rows(), n_tokens)) * sizeof(float);
      if (parts_.bytes() < parts_bytes) parts_ = tc::MemoryPool::global().allocate(parts_bytes);  // the first run
      float* parts = n_parts == 1 ? nullptr : parts_.as<float>();
      const tc::Dim3 grid{grid_x, static_cast<unsigned>((n_tokens + mmq_shape_.tokens() - 1) / mmq_shape_.tokens()),
                          static_cast<unsigned>(n_parts)};
      void* args[] = {&po, &n_in, &xq, &xd, &n_tokens, &parts};
      mmq_module_->kernel(pc::mmq_entry(suffix).c_str())
          .launch(grid, {static_cast<unsigned>(mmq_shape_.threads()), 1, 1},
                  static_cast<unsigned>(mmq_shape_.shared_bytes(type)), &stream_, args);
      if (n_parts > 1) {
        int n_blocks_x = static_cast<int>(grid_x);
        void* sum_args[] = {&po, &parts, &n_parts, &n_blocks_x, &n_tokens};
        mmq_module_->kernel("mmq_sum").launch(
            {(grid_x * static_cast<unsigned>(mmq_shape_.rows()) + 255) / 256, static_cast<unsigned>(n_tokens), 1},
            {256, 1, 1}, 0, &stream_, sum_args);
      }
      return;
    }
    if (o_.mma && pc::mma_takes(type, n_in)) {
      const int tile = pc::mma_tile(n_tokens);
      const tc::Dim3 grid{pc::matvec_layout(po, shape_.mma_rows), static_cast<unsigned>((n_tokens + tile - 1) / tile),
                          1};
      void* args[] = {&po, &n_in, &x, &n_tokens};
      mma_module_->kernel(pc::mma_entry(suffix, tile).c_str())
          .launch(grid, {static_cast<unsigned>(shape_.mma_threads), 1, 1}, 0, &stream_, args);
      return;
    }
    const int tile = pc::matvec_tile(n_tokens);
    const tc::Dim3 grid{pc::matvec_layout(po, pc::matvec_rows(tile, shape_)),
                        static_cast<unsigned>((n_tokens + tile - 1) / tile), 1};
    const tc::Kernel k = module_->kernel(pc::matvec_entry(type, suffix, tile).c_str());
    if (q8) {
      void* args[] = {&po, &n_in, &xq, &xd, &n_tokens};
      k.launch(grid, {pc::kMatvecThreads, 1, 1}, 0, &stream_, args);
    } else {
      void* args[] = {&po, &n_in, &x, &n_tokens};
      k.launch(grid, {pc::kMatvecThreads, 1, 1}, 0, &stream_, args);
    }
  }

  double time_ms(const std::function<void()>& fn) {
    constexpr int kInner = 20;
    for (int i = 0; i < 3; ++i) fn();
    stream_.synchronize();
    std::vector<double> ms;
    tc::Event a, b;
    for (int i = 0; i < o_.reps; ++i) {
      long long ns = 300000;
      void* args[] = {&ns};
      spin_.launch({1, 1, 1}, {1, 1, 1}, 0, &stream_, args);
      a.record(stream_);
      for (int j = 0; j < kInner; ++j) fn();
      b.record(stream_);
      b.synchronize();
      ms.push_back(tc::Event::elapsed_ms(a, b) / kInner);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  const Options& o_;
  tc::Stream stream_;
  const tc::Module* module_ = nullptr;
  const tc::Module* mma_module_ = nullptr;
  const tc::Module* mmq_module_ = nullptr;
  tc::Kernel spin_;
  pc::MatvecShape shape_;
  pc::MmqShape mmq_shape_;
  std::string variant_;
  tc::DeviceBuffer weights_, x_, y_, xq_, xd_, parts_;
  std::map<std::pair<std::string, int>, std::map<std::string, double>> times_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--types" && has_value) {
      o.types = split(argv[++i]);
    } else if (a == "--tokens" && has_value) {
      o.tokens.clear();
      for (const std::string& t : split(argv[++i])) {
        const int n = std::atoi(t.c_str());
        if (n < 1 || n > Bench::kMaxTokens) {
          std::fprintf(stderr, "orchard_bench_products: --tokens takes 1 to %d, got '%s'\n", Bench::kMaxTokens, t.c_str());
          return 2;
        }
        o.tokens.push_back(n);
      }
    } else if (a == "--reps" && has_value) {
      o.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "-D" && has_value) {
      o.defines.emplace_back(argv[++i]);
    } else if (a == "--source" && has_value) {
      o.source_file = argv[++i];
    } else if (a == "--legacy") {
      o.legacy = true;
    } else if (a == "--mma") {
      o.mma = true;
    } else if (a == "--mmq") {
      o.mmq = true;
    } else if (a == "--mmq-parts" && has_value) {
      o.mmq_parts = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--compile-only") {
      o.compile_only = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--types f16,q8_0,q4_0] [--tokens 1,2,4,5,8] [--reps N] [-D NAME=VALUE]... "
                   "[--source FILE] [--legacy] [--mma] [--mmq] [--mmq-parts N] [--compile-only]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!tc::available()) {
    std::fprintf(stderr, "orchard_bench_products: no usable CUDA GPU: %s\n", tc::unavailable_reason().c_str());
    return 1;
  }
  try {
    tc::make_current();
    Bench bench(o);
    if (o.compile_only) return 0;
    const double copy = bench.copy_gbs();
    std::printf("{\"measure\": \"copy_bandwidth\", \"gpu\": \"%s\", \"gbs\": %.1f}\n", tc::device_info().name.c_str(),
                copy);
    const std::vector<Case> cases{{"q", 4096, {4096}},           {"k", 4096, {1024}},         {"qkv", 4096, {4096, 1024, 1024}},
                                  {"o", 4096, {4096}},           {"gate", 4096, {14336}},     {"gate_up", 4096, {14336, 14336}},
                                  {"down", 14336, {4096}},       {"head", 4096, {128256}}};
    for (const std::string& t : o.types) {
      const DType type = parse_type(t);
      for (int n : o.tokens) {
        for (const Case& c : cases) bench.run(c, type, t, n, copy);
      }
    }
    for (int n : o.tokens) bench.norm(n);
    bench.summary();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orchard_bench_products: %s\n", e.what());
    return 1;
  }
  return 0;
}
