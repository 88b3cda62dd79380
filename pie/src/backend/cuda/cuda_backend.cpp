// The CUDA backend: weights copied once to device memory in their file type, f16 KV pages in device
// memory, and each operation a kernel queued on the backend's stream: decoder_ops.cu (embedding, norms,
// products that read the quantized blocks directly, element-wise ops, generic RoPE / attention) and pal's
// CUDA RoPE + append and paged attention where they apply (head dims 64, 128, 256). begin() queues the
// step's kernels from the calling thread and returns; wait() waits for the stream and copies the logits
// to host memory, unless the engine samples the step's rows on the device (cuda_sampling.h): then only
// the tokens and logprobs come back.
//
// The step's host-side tables (tokens, positions, KV slots, page tables) are staged in page-locked memory and
// copied to the device once per step, at their first use, and reused by every layer.
//
// A step is captured as CUDA graphs and replayed (tc::GraphCache: one executable per shape, updated in
// place while the shape holds), so the device runs its ~500 kernels back to back instead of waiting on the
// host's launches. The step is captured in pieces (a layer, then 2, then 4 at most), each launched as soon
// as it is captured on a stream of its own (ordered after the backend's stream's earlier work by an event,
// and the backend's stream after the last piece), so the device works on the first layers while the host
// captures the next ones instead of waiting for the whole step's capture (at batch 64 on an 8B model the
// capture takes about half as long as the device's work). What cannot be captured (a buffer that must grow,
// pal's split workspace growing: both synchronize) abandons the capture and runs the step with plain launches
// (after the pieces already launched are done), which grows what was short, so the next step captures.
// ORCHARD_CUDA_GRAPHS=0 turns capture off, ORCHARD_CUDA_GRAPHS=step captures each step as one graph.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pal/cuda/attention_cuda.h"
#include "pal/cuda/kv_write_cuda.h"
#include "pie/backend.h"
#include "pie/error.h"
#include "cuda_lora.h"
#include "cuda_sampling.h"
#include "cuda_sources.h"
#include "gemm.h"
#include "product_launch.h"
#include "step_times.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/graph.h"
#include "tensor/cuda/jit.h"
#include "tensor/cuda/memory_pool.h"
#include "tensor/cuda/stream.h"

namespace pie {
namespace {

namespace tc = tensor::cuda;

constexpr unsigned kThreads = 256;
constexpr int kMatmulWarps = 4, kMatmulTokens = 8;  // WARPS and TOKENS of decoder_ops.cu
// Keys per split of pal's decode attention: fixed, so a row's sum order depends on its own length only
// (batch invariance), never on how many sequences share the step.
constexpr std::int32_t kDecodeChunk = 512;

// The source holding an entry point: nf4_ops.cu for the nf4 products, matvec_mma_ops.cu for the tensor-core
// products of few tokens, mmq_ops.cu for the int8 tensor-core products of many, decoder_ops.cu for the rest.
const char* source_of(const std::string& entry) {
  if (entry.starts_with("mma_")) return "matvec_mma_ops.cu";
  if (entry.starts_with("mmq_")) return "mmq_ops.cu";
  return entry.ends_with("_nf4") ? "nf4_ops.cu" : "decoder_ops.cu";
}

// NVRTC options for the backend's kernels: none, or for a developer's sweep the tunables in
// ORCHARD_CUDA_KERNEL_DEFINES ("NAME=VALUE ...", e.g. MV_PREFETCH_L2=0), each passed as -DNAME=VALUE.
std::vector<std::string> kernel_options() {
  std::vector<std::string> options;
  if (const char* env = std::getenv("ORCHARD_CUDA_KERNEL_DEFINES"); env != nullptr) {
    std::istringstream defines(env);
    for (std::string d; defines >> d;) options.push_back("-D" + d);
  }
  return options;
}

// An entry point of the backend's kernels for the current device, its module compiled (or read from the
// JIT cache) once for each set of extra NVRTC options (after ORCHARD_CUDA_KERNEL_DEFINES's).
const tc::Kernel& kernel(const std::string& entry, const std::vector<std::string>& extra = {}) {
  static std::mutex mutex;
  static std::map<std::string, tc::Kernel> kernels;
  static const std::vector<std::string> defines = kernel_options();
  std::lock_guard<std::mutex> lock(mutex);
  std::string key = entry;
  for (const std::string& o : extra) key += " " + o;
  if (auto it = kernels.find(key); it != kernels.end()) return it->second;
  std::vector<std::string> options = defines;
  options.insert(options.end(), extra.begin(), extra.end());
  const char* source = source_of(entry);
  const tc::Module& module = tc::load_module(source, cuda::kernel_text(source), options);
  return kernels.emplace(key, module.kernel(entry.c_str())).first->second;
}

// Launches an entry point on `stream`. decoder_ops.cu's entries go with programmatic dependent launch (sm_90
// and later; plain launches before): each waits for the kernel before it where it must (the file's opening),
// so its blocks are scheduled while that kernel still runs and a product loads its first weights meanwhile.
// Every other source's entries start only when the kernel before them has ended. ORCHARD_CUDA_PDL=0 launches
// everything plainly (a before / after).
void launch(const std::string& entry, tc::Dim3 grid, tc::Dim3 block, const tc::Stream* stream, void** args) {
  static const bool pdl = [] {
    const char* env = std::getenv("ORCHARD_CUDA_PDL");
    return env == nullptr || std::string(env) != "0";
  }();
  const tc::Kernel& k = kernel(entry);
  if (pdl && std::string_view(source_of(entry)) == "decoder_ops.cu") {
    k.launch_dependent(grid, block, 0, stream, args);
  } else {
    k.launch(grid, block, 0, stream, args);
  }
}

// The entry-point suffix of a weight type; throws pie::Error for a type the kernels cannot read.
std::string type_suffix(tensor::DType t, const char* what) {
  switch (t) {
    case tensor::DType::f32: return "f32";
    case tensor::DType::f16: return "f16";
    case tensor::DType::bf16: return "bf16";
    case tensor::DType::q8_0: return "q8_0";
    case tensor::DType::q4_0: return "q4_0";
    case tensor::DType::q4_1: return "q4_1";
    case tensor::DType::q4_K: return "q4_K";
    case tensor::DType::q5_K: return "q5_K";
    case tensor::DType::q6_K: return "q6_K";
    case tensor::DType::nf4: return "nf4";  // nf4_ops.cu
    default:
      throw Error(fmt::format("[backend:cuda] {}: weight type {} is not supported on CUDA (f32, f16, bf16, q8_0, "
                              "q4_0, q4_1, q4_K, q5_K, q6_K, nf4)",
                              what, tensor::dtype_name(t)));
  }
}

unsigned grid_for(long long n) {
  return static_cast<unsigned>(std::clamp<long long>((n + kThreads - 1) / kThreads, 1, 65535));
}

bool pal_head_dim(std::int32_t d) { return d == 64 || d == 128 || d == 256; }

// KV pages in device memory: one K and one V pool per layer, f16.
class DeviceKvStorage final : public KvStorage {
 public:
  DeviceKvStorage(const KvCacheConfig& c, const tc::Stream* stream) : config_(c), stream_(stream) {
    const std::size_t pool = c.pool_page_bytes() * static_cast<std::size_t>(c.n_pages);
    for (std::int32_t l = 0; l < c.n_layer; ++l) {
      k_.push_back(tc::MemoryPool::global().allocate(pool));
      v_.push_back(tc::MemoryPool::global().allocate(pool));
      // Zeros, not stale bytes: attention tiles read whole pages and mask the slots past a sequence's end.
      k_.back().fill_bytes(0, stream);
      v_.back().fill_bytes(0, stream);
    }
  }
  const KvCacheConfig& config() const override { return config_; }
  tensor::Device device() const override { return tensor::Device::cuda; }
  void* k_pool(std::int32_t layer) override { return k_[checked(layer)].as<void>(); }
  void* v_pool(std::int32_t layer) override { return v_[checked(layer)].as<void>(); }

  void copy_page(std::int32_t src, std::int32_t dst, std::int32_t n_slots) override {
    if (src < 0 || src >= config_.n_pages || dst < 0 || dst >= config_.n_pages) {
      throw Error(fmt::format("[kv:cuda] copy_page {} -> {}: pages are 0 .. {}", src, dst, config_.n_pages - 1));
    }
    if (n_slots < 0 || n_slots > kKvPageSize) {
      throw Error(fmt::format("[kv:cuda] copy_page: {} slots, expected 0 .. {}", n_slots, kKvPageSize));
    }
    if (n_slots == 0 || src == dst) return;
    tc::make_current();
    // In 16-bit units: an f32 element is two.
    const long long slot_elems = static_cast<long long>(config_.n_kv_head) * config_.head_dim *
                                 (config_.dtype == tensor::DType::f32 ? 2 : 1);
    const long long n = slot_elems * n_slots;
    const long long src_off = static_cast<long long>(src) * kKvPageSize * slot_elems;
    const long long dst_off = static_cast<long long>(dst) * kKvPageSize * slot_elems;
    for (std::int32_t l = 0; l < config_.n_layer; ++l) {
      for (tc::DeviceBuffer* pool : {&k_[static_cast<std::size_t>(l)], &v_[static_cast<std::size_t>(l)]}) {
        const std::uint16_t* s = pool->as<std::uint16_t>() + src_off;
        std::uint16_t* d = pool->as<std::uint16_t>() + dst_off;
        long long count = n;
        void* args[] = {&s, &d, &count};
        launch("copy_u16", {grid_for(n), 1, 1}, {kThreads, 1, 1}, stream_, args);
      }
    }
  }

 private:
  std::size_t checked(std::int32_t layer) const {
    if (layer < 0 || layer >= config_.n_layer) {
      throw Error(fmt::format("[kv:cuda] layer {} out of range [0, {})", layer, config_.n_layer));
    }
    return static_cast<std::size_t>(layer);
  }
  KvCacheConfig config_;
  const tc::Stream* stream_;
  std::vector<tc::DeviceBuffer> k_, v_;
};

// Page-locked staging for a step's host tables: each upload takes the next 256-byte aligned span, so every
// copy of the step reads memory of its own, valid until the step is done (a captured copy reads it when the
// graph runs). Spans are handed out from the first chunk with room; a step that needed several chunks
// leaves one chunk as large as all of them for the next (reset() runs between steps, nothing in flight).
class PinnedStaging {
 public:
  void* take(const void* src, std::size_t n) {
    const std::size_t need = (n + 255) / 256 * 256;
    while (current_ < chunks_.size() && used_ + need > chunks_[current_].bytes()) {
      ++current_;
      used_ = 0;
    }
    if (current_ == chunks_.size()) chunks_.emplace_back(std::max<std::size_t>(need, kMinChunk));
    void* dst = static_cast<std::byte*>(chunks_[current_].data()) + used_;
    std::memcpy(dst, src, n);
    used_ += need;
    return dst;
  }
  void reset() {
    if (chunks_.size() > 1) {
      std::size_t total = 0;
      for (const tc::HostBuffer& c : chunks_) total += c.bytes();
      chunks_.clear();
      chunks_.emplace_back(total);
    }
    current_ = 0;
    used_ = 0;
  }

 private:
  static constexpr std::size_t kMinChunk = 1 << 16;
  std::vector<tc::HostBuffer> chunks_;
  std::size_t current_ = 0, used_ = 0;
};

// Thrown inside a captured step where the step cannot be captured (a buffer must grow): the step is run
// again with plain launches.
struct NotCapturable {};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int ordinal, const CudaOptions& options) : ordinal_(ordinal) {
    tc::make_current(ordinal_);
    stream_ = std::make_unique<tc::Stream>();
    launch_stream_ = std::make_unique<tc::Stream>();
    gemm_ = std::make_unique<cuda::GemmProducts>(
        *stream_, options,
        [this](tc::DeviceBuffer& b, std::size_t bytes) -> tc::DeviceBuffer& { return grown(b, bytes); });
    const char* graphs = std::getenv("ORCHARD_CUDA_GRAPHS");
    graphs_enabled_ = graphs == nullptr || std::string(graphs) != "0";
    // ORCHARD_CUDA_MMA=0 keeps f16 / bf16 products of few tokens on the matvec kernels (a before / after);
    // cards before sm_80 have no bf16 mma.sync and keep them too.
    const char* mma = std::getenv("ORCHARD_CUDA_MMA");
    mma_enabled_ = (mma == nullptr || std::string(mma) != "0") && tc::device_info(ordinal_).arch() >= 80;
    // CudaOptions::int8_products false or ORCHARD_CUDA_MMQ=0 keeps the block types' products of many tokens
    // on the slabs and cuBLAS (a before / after); int8 mma.sync needs sm_80 too.
    const char* mmq = std::getenv("ORCHARD_CUDA_MMQ");
    mmq_enabled_ = options.int8_products && (mmq == nullptr || std::string(mmq) != "0") &&
                   tc::device_info(ordinal_).arch() >= 80 && !options.batch_invariant;
    if (const char* shape = std::getenv("ORCHARD_CUDA_MMQ_SHAPE")) {  // another block shape (a developer's knob)
      try {
        mmq_shape_ = cuda::MmqShape::parse(shape);
        mmq_defines_ = mmq_shape_.defines();
      } catch (const std::invalid_argument& e) {
        throw Error(std::string("[backend:cuda] ORCHARD_CUDA_MMQ_SHAPE: ") + e.what());
      }
    }
    batch_invariant_ = options.batch_invariant;
    piecewise_ = graphs == nullptr || std::string(graphs) != "step";
    times_ = cuda::StepTimes::from_env();
    lora_ = std::make_unique<cuda::CudaLora>(ordinal_, stream_.get());
    sampling_ = std::make_unique<cuda::CudaSampling>(stream_.get());
  }
  ~CudaBackend() override {
    try {
      tc::make_current(ordinal_);
      launch_stream_->synchronize();
      stream_->synchronize();
    } catch (...) {  // a faulted context: nothing left to wait for
    }
  }

  std::string name() const override { return "cuda"; }
  tensor::Device device() const override { return tensor::Device::cuda; }
  bool supports_lora() const override { return true; }

  void prepare_lora(const LoraAdapter& adapter) override { lora_->prepare(adapter); }
  void release_lora(const LoraAdapter& adapter) override { lora_->release(adapter); }

  std::shared_ptr<const ModelWeights> upload(std::shared_ptr<const Model> model) override {
    if (!model) throw Error("[backend:cuda] upload: no model");
    tc::make_current(ordinal_);
    const ModelWeights& host = model->weights;
    // Every distinct tensor once (a tied output head is the embedding's tensor).
    std::map<const std::byte*, std::size_t> sizes;
    auto count = [&](const Weight& w) {
      if (w) sizes[w.data()] = dense_size(w);
    };
    count(host.token_embd);
    count(host.output_norm);
    count(host.output);
    for (const LayerWeights& l : host.layers) {
      for (const Weight* w : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                              &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down}) {
        count(*w);
      }
    }
    std::size_t total = 0;
    for (const auto& [ptr, n] : sizes) total += tc::MemoryPool::size_class(n);
    const tc::MemoryInfo mem = tc::memory_info(ordinal_);
    if (total > mem.free) {
      throw Error(fmt::format("[backend:cuda] the model's weights need {} bytes ({:.2f} GiB) of GPU memory; {} has {} "
                              "bytes ({:.2f} GiB) free of {}",
                              total, static_cast<double>(total) / (1 << 30), tc::device_info(ordinal_).name, mem.free,
                              static_cast<double>(mem.free) / (1 << 30), mem.total));
    }
    auto out = std::make_shared<ModelWeights>();
    std::map<const std::byte*, Weight> placed;
    auto place = [&](const Weight& w) -> Weight {
      if (!w) return {};
      if (auto it = placed.find(w.data()); it != placed.end() && it->second.dtype() == w.dtype() &&
                                           it->second.shape() == w.shape()) {
        return it->second;
      }
      Weight d = to_device(w);
      placed[w.data()] = d;
      return d;
    };
    out->token_embd = place(host.token_embd);
    out->output_norm = place(host.output_norm);
    out->output = place(host.output);
    for (const LayerWeights& l : host.layers) {
      LayerWeights d;
      d.attn_norm = place(l.attn_norm);
      d.wq = place(l.wq);
      d.wk = place(l.wk);
      d.wv = place(l.wv);
      d.wo = place(l.wo);
      d.bq = place(l.bq);
      d.bk = place(l.bk);
      d.bv = place(l.bv);
      d.q_norm = place(l.q_norm);
      d.k_norm = place(l.k_norm);
      d.ffn_norm = place(l.ffn_norm);
      d.w_gate = place(l.w_gate);
      d.w_up = place(l.w_up);
      d.w_down = place(l.w_down);
      out->layers.push_back(std::move(d));
    }
    // Every matrix type is checked here, at load, not at the first step.
    type_suffix(out->token_embd.dtype(), "token_embd");
    type_suffix(out->output.dtype(), "output");
    if (cuda::matvec_reads_q8_1(out->output.dtype())) q8_1_products_ = true;
    for (std::size_t i = 0; i < out->layers.size(); ++i) {
      const LayerWeights& l = out->layers[i];
      for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        type_suffix(w->dtype(), fmt::format("layer {}", i).c_str());
        if (cuda::matvec_reads_q8_1(w->dtype())) q8_1_products_ = true;
      }
    }
    return out;
  }

  std::unique_ptr<KvStorage> make_kv_storage(const KvCacheConfig& config) override {
    config.validate();
    if (config.dtype != tensor::DType::f16 && config.dtype != tensor::DType::f32) {
      throw Error(fmt::format("[backend:cuda] KV dtype {}: the CUDA backend keeps KV pages in f16 or f32",
                              tensor::dtype_name(config.dtype)));
    }
    if (config.dtype == tensor::DType::f32 && !pal_head_dim(config.head_dim)) {
      throw Error(fmt::format("[backend:cuda] KV dtype f32 at head_dim {}: f32 pages take head dims 64, 128 or 256 "
                              "on CUDA (f16 takes any up to 256)",
                              config.head_dim));
    }
    if (config.head_dim > 256) {
      throw Error(fmt::format("[backend:cuda] head_dim {}: the CUDA attention takes head dims up to 256",
                              config.head_dim));
    }
    tc::make_current(ordinal_);
    const std::size_t bytes = config.page_bytes() * static_cast<std::size_t>(config.n_pages);
    // The pool's cached blocks count as free: an allocation that finds the device full gives them back.
    const std::size_t free = tc::memory_info(ordinal_).free + tc::MemoryPool::global().bytes_cached();
    if (bytes > free) {
      throw Error(fmt::format("[backend:cuda] a KV cache of {} pages needs {} bytes of GPU memory; {} bytes are free",
                              config.n_pages, bytes, free));
    }
    return std::make_unique<DeviceKvStorage>(config, stream_.get());
  }

  Rows scratch(int slot, std::int64_t n_rows, std::int64_t n_cols) override {
    if (slot < 0 || slot > kMaxSlot) {
      throw Error(fmt::format("[backend:cuda] scratch slot {} outside [0, {}]", slot, kMaxSlot));
    }
    tc::DeviceBuffer& b = grown(scratch_[static_cast<std::size_t>(slot)],
                                static_cast<std::size_t>(n_rows * n_cols) * sizeof(float));
    return {b.as<float>(), n_rows, n_cols};
  }

  Rows output_rows(std::span<float> host, std::int64_t n_rows, std::int64_t n_cols) override {
    if (static_cast<std::int64_t>(host.size()) < n_rows * n_cols) {
      throw Error(fmt::format("[backend:cuda] output rows: {} floats for [{}, {}]", host.size(), n_rows, n_cols));
    }
    output_host_ = host.first(static_cast<std::size_t>(n_rows * n_cols));
    output_shape_ = {n_rows, n_cols};
    return scratch(kOutput, n_rows, n_cols);
  }

  void embed(const Weight& table, std::span<const std::int32_t> tokens, const Rows& out) override {
    ++ops_;
    if (tokens.empty()) return;
    step_tokens_ = static_cast<std::int64_t>(tokens.size());
    const std::int32_t* dev_tokens = upload_ints(kTokens, tokens);
    const std::uint8_t* w = weight_ptr(table);
    long long row_bytes = table.strides().bytes[0];
    int n_embd = static_cast<int>(out.n_cols);
    float* o = out.data;
    void* args[] = {&w, &row_bytes, &n_embd, &dev_tokens, &o};
    launch("embed_" + type_suffix(table.dtype(), "token_embd"), {static_cast<unsigned>(tokens.size()), 1, 1},
           {64, 1, 1}, stream_.get(), args);
  }

  void rms_norm(const Rows& x, const Weight& weight, float eps, const Rows& out) override {
    ++ops_;
    if (x.n_rows == 0) return;
    piece_boundary();
    const float* xp = x.data;
    const float* w = weight.data_as<const float>();
    int n = static_cast<int>(x.n_cols);
    float* o = out.data;
    void* xq = nullptr;
    void* xd = nullptr;
    q8_1_alongside(out, xq, xd);
    void* args[] = {&xp, &w, &eps, &n, &o, &xq, &xd};
    launch("rms_norm", {static_cast<unsigned>(x.n_rows), 1, 1}, {kThreads, 1, 1}, stream_.get(), args);
  }

  void add_rms_norm(const Rows& acc, const Rows& x, const Weight& weight, float eps, const Rows& out) override {
    ++ops_;
    if (acc.n_rows == 0) return;
    piece_boundary();
    float* a = acc.data;
    const float* xp = x.data;
    const float* w = weight.data_as<const float>();
    int n = static_cast<int>(acc.n_cols);
    float* o = out.data;
    void* xq = nullptr;
    void* xd = nullptr;
    q8_1_alongside(out, xq, xd);
    void* args[] = {&a, &xp, &w, &eps, &n, &o, &xq, &xd};
    launch("add_rms_norm", {static_cast<unsigned>(acc.n_rows), 1, 1}, {kThreads, 1, 1}, stream_.get(), args);
  }

  void project(const Rows& in, std::span<const Projection> outs) override {
    // `in` as q8_1 blocks, made once for all of outs that read them, or already made by the op that wrote it
    bool quantized = q8_1_.op == ops_ && q8_1_.data == in.data && q8_1_.n_rows == in.n_rows &&
                     q8_1_.n_cols == in.n_cols;
    ++ops_;
    if (in.n_rows == 0) return;
    int n_tokens = static_cast<int>(in.n_rows);
    gemm_->new_input();
    // The run of outputs of one type from outs[i] on (up to four), for one launch; i moves past them.
    const auto run_of = [&](std::size_t& i, tensor::DType type) {
      cuda::ProductOutputs po;
      for (; i < outs.size() && po.count < cuda::kMatvecMaxOutputs && outs[i].weight->dtype() == type; ++i) {
        const Weight& wi = *outs[i].weight;
        const auto j = static_cast<std::size_t>(po.count++);
        po.w[j] = weight_ptr(wi);
        po.y[j] = outs[i].out.data;
        po.row_bytes[j] = wi.strides().bytes[0];
        po.n_out[j] = static_cast<int>(wi.dim(0));
      }
      return po;
    };
    for (std::size_t i = 0; i < outs.size();) {
      const Weight& w = *outs[i].weight;
      const tensor::DType type = w.dtype();
      int n_in = static_cast<int>(w.dim(1));
      // f16 / bf16 from 2 tokens on tensor cores (matvec_mma_ops.cu), up to 16 before cuBLAS; with
      // --batch-invariant from 1 token and past 16: one kernel family, a token's result never depending on
      // the others.
      // q8_0 of 32 to 64 tokens on int8 tensor cores (mmq_ops.cu; product_launch.h's mmq_sent), every output of
      // the run it takes in one launch (never with --batch-invariant: the matvec kernels keep every count).
      if (mmq_enabled_ && cuda::mmq_sent(type, n_tokens) &&
          cuda::mmq_takes(type, n_in, w.strides().bytes[0], weight_ptr(w))) {
        cuda::ProductOutputs po;
        for (; i < outs.size() && po.count < cuda::kMatvecMaxOutputs; ++i) {
          const Weight& wi = *outs[i].weight;
          if (wi.dtype() != type || !cuda::mmq_takes(type, n_in, wi.strides().bytes[0], weight_ptr(wi))) break;
          const auto j = static_cast<std::size_t>(po.count++);
          po.w[j] = weight_ptr(wi);
          po.y[j] = outs[i].out.data;
          po.row_bytes[j] = wi.strides().bytes[0];
          po.n_out[j] = static_cast<int>(wi.dim(0));
        }
        if (!quantized) quantize_q8_1(in);
        quantized = true;
        const cuda::MmqShape& shape = mmq_shape_;
        const tc::Kernel& k = kernel(cuda::mmq_entry(type_suffix(type, "projection")), mmq_defines_);
        const unsigned type_bit = 1u << static_cast<unsigned>(type);
        if ((mmq_shared_set_ & type_bit) == 0) {
          k.set_max_dynamic_shared(shape.shared_bytes(type));
          mmq_shared_set_ |= type_bit;
        }
        // The 4096-row products fill the card only with their length in parts (product_launch.h's mmq_parts),
        // added in a fixed order by mmq_sum.
        unsigned grid_x = cuda::matvec_layout(po, shape.rows());
        int n_parts = cuda::mmq_parts(grid_x, n_in);
        float* parts = n_parts == 1 ? nullptr
                                    : grown(mmq_parts_, static_cast<std::size_t>(cuda::mmq_parts_floats(
                                                            n_parts, grid_x, shape.rows(), n_tokens)) *
                                                            sizeof(float))
                                          .as<float>();
        const tc::Dim3 grid{grid_x, static_cast<unsigned>((n_tokens + shape.tokens() - 1) / shape.tokens()),
                            static_cast<unsigned>(n_parts)};
        const void* xq = xq_.as<void>();
        const void* xd = xd_.as<void>();
        void* args[] = {&po, &n_in, &xq, &xd, &n_tokens, &parts};
        k.launch(grid, {static_cast<unsigned>(shape.threads()), 1, 1}, static_cast<unsigned>(shape.shared_bytes(type)),
                 stream_.get(), args);
        if (n_parts > 1) {
          int n_blocks_x = static_cast<int>(grid_x);
          void* sum_args[] = {&po, &parts, &n_parts, &n_blocks_x, &n_tokens};
          kernel("mmq_sum", mmq_defines_)
              .launch({(grid_x * static_cast<unsigned>(shape.rows()) + 255) / 256, static_cast<unsigned>(n_tokens), 1},
                      {256, 1, 1}, 0, stream_.get(), sum_args);
        }
        continue;
      }
      const bool mma =
          mma_enabled_ && cuda::mma_takes(type, n_in) && (batch_invariant_ || n_tokens >= cuda::kMmaMinTokens);
      if (!(mma && n_tokens <= cuda::kMmaMaxTile) && gemm_->project(in, outs[i])) {  // many tokens: cuBLAS
        ++i;
        continue;
      }
      if (mma) {
        cuda::ProductOutputs po = run_of(i, type);
        const int tile = cuda::mma_tile(n_tokens);
        const cuda::MatvecShape shape;
        const tc::Dim3 grid{cuda::matvec_layout(po, shape.mma_rows),
                            static_cast<unsigned>((n_tokens + tile - 1) / tile), 1};
        const float* x = in.data;
        void* args[] = {&po, &n_in, &x, &n_tokens};
        launch(cuda::mma_entry(type_suffix(type, "projection"), tile), grid,
               {static_cast<unsigned>(shape.mma_threads), 1, 1}, stream_.get(), args);
        continue;
      }
      const std::string suffix = type_suffix(type, "projection");
      if (cuda::matvec_takes(type, n_in)) {
        cuda::ProductOutputs po = run_of(i, type);
        const int tile = cuda::matvec_tile(n_tokens);
        const tc::Dim3 grid{cuda::matvec_layout(po, cuda::matvec_rows(tile)),
                            static_cast<unsigned>((n_tokens + tile - 1) / tile), 1};
        if (cuda::matvec_reads_q8_1(type)) {
          if (!quantized) quantize_q8_1(in);
          quantized = true;
          const void* xq = xq_.as<void>();
          const void* xd = xd_.as<void>();
          void* args[] = {&po, &n_in, &xq, &xd, &n_tokens};
          launch(cuda::matvec_entry(type, suffix, tile), grid, {cuda::kMatvecThreads, 1, 1}, stream_.get(), args);
        } else {
          const float* x = in.data;
          void* args[] = {&po, &n_in, &x, &n_tokens};
          launch(cuda::matvec_entry(type, suffix, tile), grid, {cuda::kMatvecThreads, 1, 1}, stream_.get(), args);
        }
        continue;
      }
      const std::uint8_t* wp = weight_ptr(w);
      long long row_bytes = w.strides().bytes[0];
      int n_out = static_cast<int>(w.dim(0));
      const float* x = in.data;
      float* y = outs[i].out.data;
      const auto token_blocks = static_cast<unsigned>((n_tokens + kMatmulTokens - 1) / kMatmulTokens);
      void* args[] = {&wp, &row_bytes, &n_out, &n_in, &x, &n_tokens, &y};
      // A block of kMatmulWarps warps per row.
      launch("matmul_" + suffix, {static_cast<unsigned>(n_out), token_blocks, 1}, {kMatmulWarps * 32, 1, 1},
             stream_.get(), args);
      ++i;
    }
    if (std::any_of(outs.begin(), outs.end(), [](const Projection& p) { return !p.lora.empty(); })) {
      const cuda::LoraStep step{step_id_, capturing_, [this](const void* src, std::size_t n) -> const void* {
                                  return staging_.take(src, n);
                                }};
      for (const Projection& p : outs) lora_->apply(in, p, step);
    }
  }

  void add_bias(const Rows& x, const Weight& bias) override {
    ++ops_;
    long long total = x.n_rows * x.n_cols;
    if (total == 0) return;
    float* xp = x.data;
    const float* b = bias.data_as<const float>();
    int n = static_cast<int>(x.n_cols);
    void* args[] = {&xp, &b, &n, &total};
    launch("add_bias", {grid_for(total), 1, 1}, {kThreads, 1, 1}, stream_.get(), args);
  }

  void add(const Rows& acc, const Rows& x) override {
    ++ops_;
    elementwise("add", acc, x.data);
  }
  void swiglu(const Rows& gate, const Rows& up) override {
    ++ops_;
    void* xq = nullptr;
    void* xd = nullptr;
    q8_1_alongside(gate, xq, xd);
    if (xq == nullptr) {
      elementwise("swiglu", gate, up.data);
      return;
    }
    float* g = gate.data;
    const float* u = up.data;
    long long n_blocks = gate.n_rows * gate.n_cols / 32;
    void* args[] = {&g, &u, &n_blocks, &xq, &xd};
    launch("swiglu_q8_1", {static_cast<unsigned>((n_blocks + 7) / 8), 1, 1}, {kThreads, 1, 1}, stream_.get(), args);
  }

  void rope_append(const StepLayout& layout, const pal::RopeTable& rope, const Rows& q, const Rows& k, const Rows& v,
                   KvStorage& kv, std::int32_t layer) override {
    ++ops_;
    const std::int32_t n_tokens = static_cast<std::int32_t>(k.n_rows);
    if (n_tokens == 0) return;
    const KvCacheConfig& c = kv.config();
    const std::int32_t* positions = upload_ints(kPositions, layout.positions);
    const std::int32_t* slots = upload_ints(kSlots, layout.kv_slots);
    const auto n_q_heads = static_cast<std::int32_t>(q.n_cols / c.head_dim);
    if (pal_head_dim(c.head_dim)) {
      pal::cuda::KvWriteArgs args{c.dtype, c.n_kv_head, c.head_dim, kv.k_pool(layer), kv.v_pool(layer)};
      pal::cuda::rope_append(rope.config(), args, q.data, k.data, v.data, positions, slots, n_tokens, n_q_heads,
                             stream_.get());
      return;
    }
    // Other head dims: the step's cos/sin rows from the table, RoPE on q and k, then the append.
    const float* cos_rows = nullptr;
    const float* sin_rows = nullptr;
    step_rope_rows(layout, rope, cos_rows, sin_rows);
    int n_pairs = rope.n_pairs(), head_dim = c.head_dim, gptj = rope.config().layout == pal::RopeLayout::gptj;
    for (const Rows* x : {&q, &k}) {
      float* xp = x->data;
      int n_heads = static_cast<int>(x->n_cols / head_dim);
      void* args[] = {&xp, &cos_rows, &sin_rows, &n_heads, &head_dim, &n_pairs, &gptj};
      launch("rope_rows", {static_cast<unsigned>(n_tokens), 1, 1}, {128, 1, 1}, stream_.get(), args);
    }
    const float* kp = k.data;
    const float* vp = v.data;
    int row = static_cast<int>(k.n_cols);
    void* kpool = kv.k_pool(layer);
    void* vpool = kv.v_pool(layer);
    void* args[] = {&kp, &vp, &slots, &row, &kpool, &vpool};
    launch("kv_append_f16", {static_cast<unsigned>(n_tokens), 1, 1}, {128, 1, 1}, stream_.get(), args);
  }

  void attention(const StepLayout& layout, const pal::AttentionParams& params, const Rows& q, KvStorage& kv,
                 std::int32_t layer, const Rows& out) override {
    ++ops_;
    const KvCacheConfig& c = kv.config();
    for (const AttentionGroup* g : {&layout.decode, &layout.prefill}) {
      if (g->empty()) continue;
      const bool decode = g == &layout.decode;
      const GroupTables& t = group_tables(layout, *g, decode ? 0 : 1);
      if (pal_head_dim(c.head_dim)) {
        pal_attention(*g, t, decode, params, q, kv, layer, out);
      } else {
        generic_attention(layout, t, params, q, kv, layer, out);
      }
    }
  }

  void gather_rows(const Rows& x, std::span<const std::int32_t> rows, const Rows& out) override {
    ++ops_;
    if (rows.empty()) return;
    const std::int32_t* dev_rows = upload_ints(kGatherRows, rows);
    gather(x, dev_rows, static_cast<unsigned>(rows.size()), out);
  }

  void soft_cap(const Rows& x, float cap) override {
    ++ops_;
    long long total = x.n_rows * x.n_cols;
    if (total == 0) return;
    float* xp = x.data;
    void* args[] = {&xp, &cap, &total};
    launch("soft_cap", {grid_for(total), 1, 1}, {kThreads, 1, 1}, stream_.get(), args);
  }

  void begin(std::function<void()> step) override {
    if (in_flight_) throw Error("[backend:cuda] begin: a step is already under way (wait() first)");
    in_flight_ = true;
    error_ = nullptr;
    logits_ready_ = false;
    step_tokens_ = 0;
    try {
      tc::make_current(ordinal_);
      if (times_) times_->begin_entered(*stream_);
      if (!(graphs_enabled_ && run_captured(step))) {
        new_step();
        step();
      }
      if (times_) times_->begin_left(*stream_, step_tokens_);
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  void wait() override {
    if (!in_flight_) return;
    in_flight_ = false;
    std::exception_ptr error = std::exchange(error_, nullptr);
    try {
      tc::make_current(ordinal_);
      if (times_) times_->wait_entered();
      stream_->synchronize();
      if (times_) times_->wait_left();
      lora_->end_step();
      if (!error && !output_host_.empty() && !keep_logits_) {
        scratch_[kOutput].copy_to_host(output_host_.data(), output_host_.size_bytes(), 0, stream_.get());
        stream_->synchronize();
      }
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    logits_ready_ = !error && !output_host_.empty();
    output_host_ = {};
    keep_logits_ = false;
    if (error) std::rethrow_exception(error);
  }

  bool samples_on_device() const override { return true; }
  void keep_logits_on_device() override { keep_logits_ = true; }
  void sample_rows(std::span<const DeviceSampleRow> rows, std::span<DeviceSampleResult> out) override {
    if (!logits_ready_) throw Error("[backend:cuda] sample_rows: no step's logits to sample (after a step's wait())");
    try {
      tc::make_current(ordinal_);
      if (times_) times_->sample_entered();
      sampling_->sample(scratch_[kOutput].as<const float>(), output_shape_[0], output_shape_[1], rows, out);
      if (times_) times_->sample_left();
    } catch (const tensor::Error& e) {
      throw Error(fmt::format("[backend:cuda] sampling on the device failed: {}", e.what()));
    }
  }

 private:
  // Scratch slots of the backend's own (the builders use the low ones), and upload slots of the step's
  // integer tables.
  static constexpr int kMaxSlot = 64;
  static constexpr int kGatheredQ = 60, kGatheredOut = 61, kRopeCos = 62, kRopeSin = 63, kOutput = 64;
  enum IntSlot : int { kTokens, kPositions, kSlots, kGatherRows, kGroupFirst, kNumIntSlots = kGroupFirst + 2 * 5 };

  // A group's tables on the device: pal's page tables, and the generic kernel's per-query rows and sequences.
  struct GroupTables {
    std::uint64_t step = 0;
    const std::int32_t* page_indptr = nullptr;
    const std::int32_t* page_indices = nullptr;
    const std::int32_t* seq_lens = nullptr;
    const std::int32_t* qo_indptr = nullptr;
    const std::int32_t* rows = nullptr;
    const std::int32_t* seqs = nullptr;
    std::int32_t n_queries = 0, max_seq_len = 0, max_q_len = 0;
    // The group's rows when they are first_row, first_row + 1, ... (a pure decode or prefill step, or a
    // group whose rows come in one run): attention reads and writes them in place; -1 otherwise.
    std::int32_t first_row = -1;
  };

  // `in` quantized to q8_1 blocks into xq_ / xd_ (decoder_ops.cu's quantize_q8_1).
  void quantize_q8_1(const Rows& in) {
    const long long n_blocks = (in.n_cols + 31) / 32;
    const long long total = n_blocks * in.n_rows;
    grow_q8_1(total);
    const float* x = in.data;
    int n_in = static_cast<int>(in.n_cols), n_tokens = static_cast<int>(in.n_rows);
    void* xq = xq_.as<void>();
    void* xd = xd_.as<void>();
    void* args[] = {&x, &n_in, &n_tokens, &xq, &xd};
    launch("quantize_q8_1", {static_cast<unsigned>((total + 7) / 8), 1, 1}, {256, 1, 1}, stream_.get(), args);
  }

  void grow_q8_1(long long n_blocks) {
    grown(xq_, static_cast<std::size_t>(n_blocks) * 32);
    grown(xd_, static_cast<std::size_t>(n_blocks) * 2 * sizeof(float));
  }

  // Where an op writing `rows` also writes them as q8_1 blocks (xq_ / xd_) for the product that reads them
  // next (project() then skips quantize_q8_1): when the model has products that read q8_1 and the rows are
  // whole blocks of 32. Leaves xq / xd null otherwise. Called by the op (after its ++ops_) before its launch.
  void q8_1_alongside(const Rows& rows, void*& xq, void*& xd) {
    if (!q8_1_products_ || rows.n_cols % 32 != 0 || rows.n_rows == 0) return;
    grow_q8_1(rows.n_rows * rows.n_cols / 32);
    xq = xq_.as<void>();
    xd = xd_.as<void>();
    q8_1_ = {rows.data, rows.n_rows, rows.n_cols, ops_};
  }

  // A new step: the staging and the step's upload caches start afresh.
  void new_step() {
    ++step_id_;
    ++ops_;  // q8_1 blocks made by the last step's last op are not the next step's (its rows may be rewritten)
    staging_.reset();
  }

  // The step captured as graphs and launched, piece by piece; false when it could not be captured (what
  // was launched of it done by then: a plain run of the step does it all again). Three failed captures in
  // a row turn capture off for this backend (a step that never captures, e.g. an operation that
  // synchronizes, would otherwise pay for two runs of its host code every time); a capture abandoned
  // because a buffer must grow does not count (the plain run grows it: while a large batch fills, its
  // steps grow the tables step after step, and counting them turned capture off for the whole run).
  bool run_captured(const std::function<void()>& step) {
    new_step();
    grew_ = false;
    piece_ = 0;
    piece_norms_ = 0;
    pieces_launched_ = 0;
    piece_graphs(0).capture_begin(*stream_);
    capturing_ = true;
    bool captured = false;
    try {
      step();
      capturing_ = false;
      captured = piece_graphs(piece_).capture_end(*stream_);
    } catch (...) {
      if (capturing_) piece_graphs(piece_).capture_abandon(*stream_);
      capturing_ = false;
    }
    if (!captured) {
      // The plain run reuses the staging the launched pieces' copies read.
      if (pieces_launched_ > 0) launch_stream_->synchronize();
      if (!grew_ && ++failed_captures_ >= 3) graphs_enabled_ = false;
      return false;
    }
    failed_captures_ = 0;
    launch_piece();
    // The backend's stream (wait(), the logits' copy, the sampling) goes on after the last piece.
    joined_.record(*launch_stream_);
    joined_.wait_on(*stream_);
    return true;
  }

  // The piece just captured, launched on the launch stream (after the backend's stream's earlier work,
  // for the step's first piece) and handed to the device at once.
  void launch_piece() {
    if (pieces_launched_ == 0) {
      forked_.record(*stream_);
      forked_.wait_on(*launch_stream_);
    }
    piece_graphs(piece_).launch(*launch_stream_);
    if (pieces_launched_ == 0 && times_) times_->first_piece_launched(*launch_stream_);
    ++pieces_launched_;
    (void)launch_stream_->done();
  }

  // The executables of the step's `i`-th piece.
  tc::GraphCache& piece_graphs(int i) {
    while (static_cast<int>(graphs_.size()) <= i) graphs_.push_back(std::make_unique<tc::GraphCache>());
    return *graphs_[static_cast<std::size_t>(i)];
  }

  // At each norm (rms_norm or add_rms_norm: a block's start) while capturing: the piece under way is launched,
  // and the next one begun, once it holds 2^(piece + 1) norms (a layer's two, then 2 layers, then 4 at most:
  // the last piece's device time is what the capture leaves unhidden).
  void piece_boundary() {
    if (!capturing_ || !piecewise_) return;
    if (++piece_norms_ <= std::min(2 << std::min(piece_, 8), kMaxPieceNorms)) return;
    capturing_ = false;
    if (!piece_graphs(piece_).capture_end(*stream_)) throw NotCapturable{};
    launch_piece();
    ++piece_;
    piece_norms_ = 1;
    piece_graphs(piece_).capture_begin(*stream_);
    capturing_ = true;
  }

  static std::size_t dense_size(const Weight& w) {
    return static_cast<std::size_t>(w.n_rows()) * tensor::row_bytes(w.dtype(), w.dim(w.rank() - 1));
  }

  // A dense device copy of a host weight, its memory owned by the returned tensor.
  Weight to_device(const Weight& w) {
    const std::size_t row = tensor::row_bytes(w.dtype(), w.dim(w.rank() - 1));
    const std::size_t bytes = dense_size(w);
    auto buf = std::make_shared<tc::DeviceBuffer>(tc::MemoryPool::global().allocate(bytes));
    if (w.is_contiguous()) {
      buf->copy_from_host(w.data(), bytes);
    } else {
      std::vector<std::byte> staged(bytes);
      for (std::int64_t r = 0; r < w.n_rows(); ++r) std::memcpy(staged.data() + r * row, w.row(r), row);
      buf->copy_from_host(staged.data(), bytes);
    }
    void* ptr = buf->as<void>();
    return tensor::Tensor::view(tensor::Buffer::adopt(ptr, bytes, tensor::Device::cuda, buf), 0, w.dtype(), w.shape());
  }

  static const std::uint8_t* weight_ptr(const Weight& w) {
    if (w.buffer().device() != tensor::Device::cuda) {
      throw Error("[backend:cuda] a weight is in host memory (weights must come from this backend's upload())");
    }
    return reinterpret_cast<const std::uint8_t*>(w.data());
  }

  // `b` with at least `bytes`; a buffer that must grow is replaced once the stream is done with it.
  tc::DeviceBuffer& grown(tc::DeviceBuffer& b, std::size_t bytes) {
    if (b.bytes() < bytes) {
      if (capturing_) {
        grew_ = true;
        throw NotCapturable{};
      }
      if (!b.empty()) stream_->synchronize();
      b = tc::MemoryPool::global().allocate(std::max<std::size_t>(bytes, 256));
    }
    return b;
  }

  const std::int32_t* upload_ints(int slot, std::span<const std::int32_t> host) {
    const auto s = static_cast<std::size_t>(slot);
    if (uploaded_step_[s] == step_id_ && uploaded_from_[s] == host.data() && uploaded_size_[s] == host.size() &&
        slot != kTokens && slot != kGatherRows) {
      return ints_[s].as<const std::int32_t>();
    }
    // Room to double: the page tables grow a little most steps while a batch fills, and each growth
    // costs a capture.
    tc::DeviceBuffer& b = grown(ints_[s], std::bit_ceil(host.size_bytes()));
    if (!host.empty()) {
      b.copy_from_host(staging_.take(host.data(), host.size_bytes()), host.size_bytes(), 0, stream_.get());
    }
    uploaded_step_[s] = step_id_;
    uploaded_from_[s] = host.data();
    uploaded_size_[s] = host.size();
    return b.as<const std::int32_t>();
  }

  const GroupTables& group_tables(const StepLayout& layout, const AttentionGroup& g, int which) {
    GroupTables& t = groups_[static_cast<std::size_t>(which)];
    if (t.step == step_id_) return t;
    const int base = kGroupFirst + 5 * which;
    t.step = step_id_;
    t.page_indptr = upload_ints(base + 0, g.page_indptr);
    t.page_indices = upload_ints(base + 1, g.page_indices);
    t.seq_lens = upload_ints(base + 2, g.seq_lens);
    t.qo_indptr = upload_ints(base + 3, g.qo_indptr);
    t.rows = nullptr;
    const auto n_seqs = static_cast<std::int32_t>(g.seq_lens.size());
    t.n_queries = static_cast<std::int32_t>(g.rows.size());
    t.max_seq_len = 0;
    t.max_q_len = 0;
    seqs_host_[static_cast<std::size_t>(which)].clear();
    for (std::int32_t s = 0; s < n_seqs; ++s) {
      t.max_seq_len = std::max(t.max_seq_len, g.seq_lens[static_cast<std::size_t>(s)]);
      const std::int32_t n_q = g.qo_indptr[static_cast<std::size_t>(s) + 1] - g.qo_indptr[static_cast<std::size_t>(s)];
      t.max_q_len = std::max(t.max_q_len, n_q);
      for (std::int32_t i = 0; i < n_q; ++i) seqs_host_[static_cast<std::size_t>(which)].push_back(s);
    }
    // rows and seqs share one upload: [rows..., seqs...].
    std::vector<std::int32_t>& both = rows_seqs_host_[static_cast<std::size_t>(which)];
    both.assign(g.rows.begin(), g.rows.end());
    both.insert(both.end(), seqs_host_[static_cast<std::size_t>(which)].begin(),
                seqs_host_[static_cast<std::size_t>(which)].end());
    const std::int32_t* dev = upload_ints(base + 4, both);
    t.rows = dev;
    t.seqs = dev + g.rows.size();
    t.first_row = g.rows.empty() ? -1 : g.rows.front();
    for (std::size_t i = 1; i < g.rows.size() && t.first_row >= 0; ++i) {
      if (g.rows[i] != g.rows[i - 1] + 1) t.first_row = -1;
    }
    (void)layout;
    return t;
  }

  void pal_attention(const AttentionGroup& g, const GroupTables& t, bool decode, const pal::AttentionParams& params,
                     const Rows& q, KvStorage& kv, std::int32_t layer, const Rows& out) {
    const KvCacheConfig& c = kv.config();
    const auto n = static_cast<unsigned>(g.rows.size());
    // The group's queries and outputs: the rows themselves when they are one run, else gathered copies.
    const bool in_place = t.first_row >= 0;
    const Rows gq = in_place ? Rows{q.row(t.first_row), n, q.n_cols} : scratch(kGatheredQ, n, q.n_cols);
    const Rows go = in_place ? Rows{out.row(t.first_row), n, q.n_cols} : scratch(kGatheredOut, n, q.n_cols);
    if (!in_place) gather(q, t.rows, n, gq);
    pal::PagedKv p;
    p.k_pages = kv.k_pool(layer);
    p.v_pages = kv.v_pool(layer);
    p.dtype = c.dtype;
    p.n_pages = c.n_pages;
    p.n_kv_heads = c.n_kv_head;
    p.head_dim = c.head_dim;
    p.n_seqs = static_cast<std::int32_t>(g.seq_lens.size());
    p.page_indptr = t.page_indptr;
    p.page_indices = t.page_indices;
    p.seq_lens = t.seq_lens;
    if (decode) {
      pal::cuda::DecodeTuning tuning;
      tuning.chunk = kDecodeChunk;
      pal::cuda::decode_attention(p, params, {gq.data, go.data}, t.max_seq_len, stream_.get(), tuning);
    } else {
      pal::cuda::prefill_attention(p, params, {t.qo_indptr, gq.data, go.data}, t.max_q_len, stream_.get(), {},
                                   t.max_seq_len);
    }
    if (in_place) return;
    // Scatter back: out[rows[i]] = go[i].
    const float* src = go.data;
    const std::int32_t* rows = t.rows;
    int cols = static_cast<int>(q.n_cols);
    float* dst = out.data;
    void* args[] = {&src, &rows, &cols, &dst};
    launch("scatter_rows", {n, 1, 1}, {kThreads, 1, 1}, stream_.get(), args);
  }

  void generic_attention(const StepLayout& layout, const GroupTables& t, const pal::AttentionParams& params, const Rows& q, KvStorage& kv,
                         std::int32_t layer, const Rows& out) {
    const KvCacheConfig& c = kv.config();
    const float* qp = q.data;
    float* op = out.data;
    const std::int32_t* rows = t.rows;
    const std::int32_t* seqs = t.seqs;
    const std::int32_t* positions = upload_ints(kPositions, layout.positions);
    int n_queries = t.n_queries, n_q_heads = params.n_q_heads, n_kv_heads = c.n_kv_head, head_dim = c.head_dim;
    const std::int32_t* page_indptr = t.page_indptr;
    const std::int32_t* page_indices = t.page_indices;
    const void* kp = kv.k_pool(layer);
    const void* vp = kv.v_pool(layer);
    float scale = params.scale, cap = params.logit_soft_cap;
    int window = params.sliding_window;
    void* args[] = {&qp,          &op,           &rows, &seqs,       &positions, &n_queries,
                    &page_indptr, &page_indices, &kp,   &vp,         &n_q_heads, &n_kv_heads,
                    &head_dim,    &scale,        &cap,  &window};
    const long long warps = static_cast<long long>(n_queries) * n_q_heads;
    launch("attention_generic", {static_cast<unsigned>((warps + 3) / 4), 1, 1}, {128, 1, 1}, stream_.get(), args);
  }

  void gather(const Rows& x, const std::int32_t* dev_rows, unsigned n, const Rows& out) {
    const float* src = x.data;
    int cols = static_cast<int>(x.n_cols);
    float* dst = out.data;
    void* args[] = {&src, &dev_rows, &cols, &dst};
    launch("gather_rows", {n, 1, 1}, {kThreads, 1, 1}, stream_.get(), args);
  }

  // The cos / sin rows of the step's positions ([n_tokens][n_pairs], attention factor folded in), once a step.
  void step_rope_rows(const StepLayout& layout, const pal::RopeTable& rope, const float*& cos_rows,
                      const float*& sin_rows) {
    const std::size_t n_pairs = static_cast<std::size_t>(rope.n_pairs());
    const std::size_t n = layout.positions.size() * n_pairs;
    tc::DeviceBuffer& cb = grown(scratch_[kRopeCos], n * sizeof(float));
    tc::DeviceBuffer& sb = grown(scratch_[kRopeSin], n * sizeof(float));
    if (rope_step_ != step_id_) {
      rope_cos_.resize(n);
      rope_sin_.resize(n);
      for (std::size_t t = 0; t < layout.positions.size(); ++t) {
        std::memcpy(rope_cos_.data() + t * n_pairs, rope.cos_row(layout.positions[t]), n_pairs * sizeof(float));
        std::memcpy(rope_sin_.data() + t * n_pairs, rope.sin_row(layout.positions[t]), n_pairs * sizeof(float));
      }
      cb.copy_from_host(staging_.take(rope_cos_.data(), n * sizeof(float)), n * sizeof(float), 0, stream_.get());
      sb.copy_from_host(staging_.take(rope_sin_.data(), n * sizeof(float)), n * sizeof(float), 0, stream_.get());
      rope_step_ = step_id_;
    }
    cos_rows = cb.as<const float>();
    sin_rows = sb.as<const float>();
  }

  void elementwise(const char* entry, const Rows& acc, const float* x) {
    long long total = acc.n_rows * acc.n_cols;
    if (total == 0) return;
    float* a = acc.data;
    void* args[] = {&a, &x, &total};
    launch(entry, {grid_for(total), 1, 1}, {kThreads, 1, 1}, stream_.get(), args);
  }

  int ordinal_;
  std::unique_ptr<tc::Stream> stream_;
  std::unique_ptr<cuda::CudaLora> lora_;  // adapters in device memory (cuda_lora.h)
  std::unique_ptr<cuda::CudaSampling> sampling_;  // rows sampled where the logits are (cuda_sampling.h)
  std::unique_ptr<cuda::GemmProducts> gemm_;  // products of many tokens through cuBLAS (gemm.h)
  std::array<tc::DeviceBuffer, kMaxSlot + 1> scratch_;
  tc::DeviceBuffer xq_, xd_;  // the activations of the current product as q8_1 blocks
  // The ops queued so far; the rows xq_ / xd_ hold as q8_1 when the op that wrote them (number `op`) made
  // them too, valid for a project() that comes right after it.
  std::uint64_t ops_ = 0;
  struct {
    const float* data = nullptr;
    std::int64_t n_rows = 0, n_cols = 0;
    std::uint64_t op = 0;
  } q8_1_;
  bool q8_1_products_ = false;  // an uploaded model has products that read q8_1 (cuda::matvec_reads_q8_1)
  std::array<tc::DeviceBuffer, kNumIntSlots> ints_;
  std::array<std::uint64_t, kNumIntSlots> uploaded_step_{};
  std::array<const std::int32_t*, kNumIntSlots> uploaded_from_{};
  std::array<std::size_t, kNumIntSlots> uploaded_size_{};
  std::array<GroupTables, 2> groups_;
  std::array<std::vector<std::int32_t>, 2> seqs_host_, rows_seqs_host_;
  std::vector<float> rope_cos_, rope_sin_;
  std::uint64_t rope_step_ = 0;
  std::uint64_t step_id_ = 0;
  PinnedStaging staging_;
  static constexpr int kMaxPieceNorms = 8;
  std::unique_ptr<tc::Stream> launch_stream_;  // where the pieces run
  tc::Event forked_, joined_;  // the launch stream after the backend's stream, and back
  std::vector<std::unique_ptr<tc::GraphCache>> graphs_;  // per piece of a step
  int piece_ = 0, piece_norms_ = 0, pieces_launched_ = 0;
  bool graphs_enabled_ = true, capturing_ = false, piecewise_ = true;
  bool grew_ = false;  // the capture under way was abandoned for a buffer that must grow
  bool mma_enabled_ = true;      // f16 / bf16 products of few tokens on tensor cores (matvec_mma_ops.cu)
  bool mmq_enabled_ = true;      // block-type products of many tokens on int8 tensor cores (mmq_ops.cu)
  unsigned mmq_shared_set_ = 0;  // the mmq entries (a bit per tensor::DType) whose shared memory limit is raised
  cuda::MmqShape mmq_shape_;     // their block shape (ORCHARD_CUDA_MMQ_SHAPE, else mmq_ops.cu's defaults)
  tc::DeviceBuffer mmq_parts_;   // the parts of their split lengths (product_launch.h's mmq_parts)
  std::vector<std::string> mmq_defines_;  // the NVRTC options of a shape other than the defaults
  bool batch_invariant_ = false;  // CudaOptions::batch_invariant: the mma products at every token count
  std::unique_ptr<cuda::StepTimes> times_;  // ORCHARD_CUDA_STEP_TIMES / _PROFILE_STEP (step_times.h)
  std::int64_t step_tokens_ = 0;
  int failed_captures_ = 0;
  bool in_flight_ = false;
  std::exception_ptr error_;
  std::span<float> output_host_;
  std::array<std::int64_t, 2> output_shape_{};  // the step's logit rows, for sample_rows
  bool keep_logits_ = false;   // the step begun leaves its logits on the device
  bool logits_ready_ = false;  // the last step's logits are in scratch_[kOutput]
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int ordinal, const CudaOptions& options) {
  const std::string why_not = tensor::cuda::unavailable_reason();
  if (!why_not.empty()) throw Error(fmt::format("[backend:cuda] CUDA cannot be used here: {}", why_not));
  try {
    return std::make_unique<CudaBackend>(ordinal, options);
  } catch (const tensor::Error& e) {
    throw Error(fmt::format("[backend:cuda] device {}: {}", ordinal, e.what()));
  }
}

}  // namespace pie
