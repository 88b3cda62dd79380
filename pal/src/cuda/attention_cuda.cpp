// Host side of the CUDA paged attention: validation, variant selection, split sizing, launches.
#include "pal/cuda/attention_cuda.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "launch_cache.h"
#include "pal/error.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/memory_pool.h"

namespace pal::cuda {
namespace {

constexpr int kDecodeWarps = 4;
constexpr int kDecodeUnroll = 2;
constexpr int kDecodeMmaKeys = 32;  // MMA_KEYS in decode_attention.cu
constexpr int kPrefillWarps = 4;
constexpr std::int32_t kMaxChunk = 4096;  // MAX_CHUNK in decode_attention.cu

// Mirrors DecodeParams in decode_attention.cu field by field.
struct DecodeParams {
  const void* k_pages;
  const void* v_pages;
  const std::int32_t* page_indptr;
  const std::int32_t* page_indices;
  const std::int32_t* seq_lens;
  const float* q;
  float* out;
  float* part_o;
  float* part_ml;
  std::uint32_t* counters;
  std::int32_t n_kv_heads;
  std::int32_t n_q_heads;
  std::int32_t n_splits;
  std::int32_t chunk;
  float scale;
  float soft_cap;
  std::int32_t window;
  const std::int32_t* qo_indptr;
  std::int32_t max_q_len;
};

// Mirrors PrefillParams in prefill_attention.cu.
struct PrefillParams {
  const void* k_pages;
  const void* v_pages;
  const std::int32_t* page_indptr;
  const std::int32_t* page_indices;
  const std::int32_t* seq_lens;
  const std::int32_t* qo_indptr;
  const float* q;
  float* out;
  std::int32_t n_kv_heads;
  std::int32_t n_q_heads;
  float scale;
  float soft_cap;
  std::int32_t window;
};

void validate(const PagedKv& kv, const AttentionParams& p, const char* op) {
  if (kv.dtype != tensor::DType::f16 && kv.dtype != tensor::DType::bf16 && kv.dtype != tensor::DType::f32) {
    throw Error(fmt::format("[{}] KV dtype {} is not supported on CUDA (f32, f16 or bf16)", op,
                            tensor::dtype_name(kv.dtype)));
  }
  if (kv.head_dim != 64 && kv.head_dim != 128 && kv.head_dim != 256) {
    throw Error(fmt::format("[{}] head_dim {} is not supported on CUDA (64, 128 or 256)", op, kv.head_dim));
  }
  if (kv.n_kv_heads <= 0 || p.n_q_heads <= 0 || p.n_q_heads % kv.n_kv_heads != 0) {
    throw Error(fmt::format("[{}] n_q_heads {} must be a positive multiple of n_kv_heads {}", op, p.n_q_heads,
                            kv.n_kv_heads));
  }
  if (kv.n_seqs < 0) throw Error(fmt::format("[{}] n_seqs {} is negative", op, kv.n_seqs));
  if (kv.n_seqs > 0 && (kv.k_pages == nullptr || kv.v_pages == nullptr || kv.page_indptr == nullptr ||
                        kv.page_indices == nullptr || kv.seq_lens == nullptr)) {
    throw Error(fmt::format("[{}] a KV cache pointer (pages, page table or seq_lens) is null", op));
  }
  if (!std::isfinite(p.scale)) throw Error(fmt::format("[{}] scale {} is not finite", op, p.scale));
  if (p.sliding_window < 0) throw Error(fmt::format("[{}] sliding_window {} is negative", op, p.sliding_window));
  if (!(p.logit_soft_cap >= 0.0f) || !std::isfinite(p.logit_soft_cap)) {
    throw Error(fmt::format("[{}] logit_soft_cap {} must be finite and >= 0", op, p.logit_soft_cap));
  }
}

// The KV element type's option (one, so that the options keep their places in variant keys).
std::string kv_type_option(tensor::DType t) {
  if (t == tensor::DType::f32) return "-DKV_F32=1";
  return std::string("-DKV_BF16=") + (t == tensor::DType::bf16 ? "1" : "0");
}

std::vector<std::string> base_options(const PagedKv& kv) {
  return {"-DHEAD_DIM=" + std::to_string(kv.head_dim), kv_type_option(kv.dtype)};
}

std::vector<std::string> decode_options(std::int32_t head_dim, tensor::DType kv_type, std::int32_t group,
                                        std::int32_t unroll = kDecodeUnroll) {
  return {"-DHEAD_DIM=" + std::to_string(head_dim), kv_type_option(kv_type),
          "-DGROUP=" + std::to_string(group), "-DN_WARPS=" + std::to_string(kDecodeWarps),
          "-DUNROLL=" + std::to_string(unroll)};
}

// Tokens per split. Splits trade parallelism for merge work and per-block overhead; the cost model counts
// the waves of blocks the machine runs (blocks beyond one full wave wait) times the work of one block,
// with a fixed overhead per block worth about 64 tokens.
std::int32_t decode_chunk(std::int32_t n_seqs, std::int32_t n_kv_heads, std::int32_t max_seq_len,
                          const tensor::cuda::Kernel& kernel, const std::string& variant, int shared_bytes) {
  static std::mutex mutex;
  static std::map<std::string, int> occupancy;  // variant -> blocks per multiprocessor
  int per_sm = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = occupancy.find(variant);
    if (it == occupancy.end()) {
      it = occupancy.emplace(variant, std::max(1, kernel.max_active_blocks_per_sm(kDecodeWarps * 32, shared_bytes)))
               .first;
    }
    per_sm = it->second;
  }
  const std::int64_t wave = static_cast<std::int64_t>(per_sm) * detail::n_sms();
  const std::int64_t pairs = static_cast<std::int64_t>(n_seqs) * n_kv_heads;
  std::int64_t best_chunk = kMaxChunk;
  double best_cost = 1e300;
  for (std::int64_t chunk = 64; chunk <= kMaxChunk; chunk += 64) {
    const std::int64_t splits = (max_seq_len + chunk - 1) / chunk;
    const std::int64_t waves = (pairs * splits + wave - 1) / wave;
    const double cost = static_cast<double>(waves) * (std::min<std::int64_t>(chunk, max_seq_len) + 64) +
                        (splits > 1 ? 32.0 : 0.0);
    if (cost < best_cost) {
      best_cost = cost;
      best_chunk = chunk;
    }
    if (chunk >= max_seq_len) break;
  }
  return static_cast<std::int32_t>(best_chunk);
}

// The decode kernel for these shapes: the tensor-core one (head_dim <= 128, at most 16 query heads per KV
// head) unless the SIMT one is asked for; its dynamic shared memory.
struct DecodeKernel {
  tensor::cuda::Kernel kernel;
  int shared_bytes = 0;
  std::string variant;  // options that change occupancy
};

DecodeKernel decode_kernel(std::int32_t head_dim, tensor::DType kv_type, std::int32_t group, std::int32_t unroll,
                           bool simt, int stages = 2) {
  auto options = decode_options(head_dim, kv_type, group, unroll);
  DecodeKernel k;
  k.variant = options[0] + options[1] + options[2] + options[4] + (simt ? "simt" : "mma") + std::to_string(stages);
  if (!simt && head_dim <= 128 && group <= 16) {
    options.push_back("-DMMA_STAGES=" + std::to_string(stages));
    k.shared_bytes = kDecodeWarps * stages * 2 * kDecodeMmaKeys * (head_dim + 8) * 2;
    k.kernel = detail::kernel("decode_attention.cu", options, "decode_attention_mma", k.shared_bytes);
  } else {
    k.kernel = detail::kernel("decode_attention.cu", options, "decode_attention_split");
  }
  return k;
}

// The split workspace (partial outputs, then max / sum per split) of one stream, and its finish counters
// (one per sequence and KV head, zero between calls: the last block of each resets its own): kept per
// stream and grown as needed, so that work queued on other streams never receives memory a running decode
// still uses.
struct SplitWorkspace {
  float* partials = nullptr;
  std::uint32_t* counters = nullptr;
};

SplitWorkspace split_workspace(const tensor::cuda::Stream* stream, std::size_t floats, std::size_t counters) {
  struct Buffers {
    tensor::cuda::DeviceBuffer partials, counters;
  };
  static std::mutex mutex;
  static auto* buffers = new std::map<const void*, Buffers>();  // lives until exit
  std::lock_guard<std::mutex> lock(mutex);
  Buffers& b = (*buffers)[stream != nullptr ? stream->handle() : nullptr];
  const bool grow_partials = b.partials.bytes() < floats * sizeof(float);
  const bool grow_counters = b.counters.bytes() < counters * sizeof(std::uint32_t);
  if ((grow_partials && !b.partials.empty()) || (grow_counters && !b.counters.empty())) {
    tensor::cuda::synchronize();  // queued work may still use the old buffers
  }
  if (grow_partials) b.partials = tensor::cuda::MemoryPool::global().allocate(floats * sizeof(float));
  if (grow_counters) {
    b.counters = tensor::cuda::MemoryPool::global().allocate(counters * sizeof(std::uint32_t));
    b.counters.fill_bytes(0, stream);
  }
  return {b.partials.as<float>(), b.counters.as<std::uint32_t>()};
}

// Keys per K/V tile of the prefill kernel: 32 where the accumulators of two m16 tiles at head_dim 128 leave
// no registers for 64 keys' scores (with 64 it spills, and measured 5% slower), else 64.
int prefill_block_n(std::int32_t head_dim, int m_tiles) { return head_dim == 128 && m_tiles == 2 ? 32 : 64; }

int prefill_shared_bytes(std::int32_t head_dim, int block_rows, int block_n) {
  return (block_rows + 4 * block_n) * (head_dim + 8) * 2;  // Q, then two stages of K and V
}

// Whether the SIMT kernel runs decode: head_dim 256, f32 KV (the tensor-core kernel reads 16-bit operands), or
// asked for.
bool decode_simt(const PagedKv& kv, bool asked) {
  return asked || kv.head_dim > 128 || kv.dtype == tensor::DType::f32;
}

// The split kernel over query rows (decode: a sequence each, in z; prefill, qo_indptr set: max_q_len per
// sequence, in x with the splits), each row over at most max_seq_len keys. Checks the shapes and tuning, then
// launches.
void launch_split(const PagedKv& kv, const AttentionParams& params, const float* q, float* out,
                  const std::int32_t* qo_indptr, std::int32_t max_q_len, std::int32_t max_seq_len,
                  const tensor::cuda::Stream* stream, const DecodeTuning& tuning, const char* op) {
  if (tuning.chunk < 0 || tuning.chunk % 64 != 0 || tuning.chunk > kMaxChunk) {
    throw Error(fmt::format("[{}] tuning chunk {} must be a multiple of 64 in [0, {}]", op, tuning.chunk, kMaxChunk));
  }
  const std::int32_t group = params.n_q_heads / kv.n_kv_heads;
  // The tensor-core kernel takes up to 16 query heads per KV head (one MMA tile of rows); the SIMT kernel
  // holds group * head_dim floats per warp in its merge buffer.
  const bool simt = decode_simt(kv, tuning.simt);
  const std::int32_t max_group = simt ? 2048 / kv.head_dim : 16;
  if (group > max_group) {
    throw Error(fmt::format("[{}] {} query heads per KV head at head_dim {}: at most {} are supported on CUDA", op,
                            group, kv.head_dim, max_group));
  }
  if (tuning.unroll != 0 && tuning.unroll != 1 && tuning.unroll != 2 && tuning.unroll != 4) {
    throw Error(fmt::format("[{}] tuning unroll {} must be 0, 1, 2 or 4", op, tuning.unroll));
  }
  if (tuning.stages != 0 && tuning.stages != 2 && tuning.stages != 3) {
    throw Error(fmt::format("[{}] tuning stages {} must be 0, 2 or 3", op, tuning.stages));
  }
  const std::int64_t z = static_cast<std::int64_t>(kv.n_seqs) * (qo_indptr != nullptr ? max_q_len : 1);
  if (qo_indptr == nullptr && z > 65535) {
    throw Error(fmt::format("[{}] {} sequences: at most 65,535 a call are supported", op, kv.n_seqs));
  }
  if (z > std::numeric_limits<std::int32_t>::max()) {
    throw Error(fmt::format("[{}] {} sequences of up to {} query rows: too many rows", op, kv.n_seqs, max_q_len));
  }
  const std::int32_t unroll = tuning.unroll == 0 ? kDecodeUnroll : tuning.unroll;
  DecodeKernel dk = decode_kernel(kv.head_dim, kv.dtype, group, unroll, simt);
  const auto n_rows = static_cast<std::int32_t>(z);
  std::int32_t chunk = tuning.chunk;
  if (chunk == 0) chunk = decode_chunk(n_rows, kv.n_kv_heads, max_seq_len, dk.kernel, dk.variant, dk.shared_bytes);
  // A split stages at most kMaxChunk page ids, and a sequence has at most kMaxChunk splits.
  chunk = std::max<std::int32_t>(chunk, static_cast<std::int32_t>((max_seq_len + kMaxChunk - 1) / kMaxChunk + 63) / 64 * 64);
  chunk = std::min(chunk, kMaxChunk);
  const std::int32_t n_splits = (max_seq_len + chunk - 1) / chunk;
  // Two tiles in flight per warp; a third (room for it exists at one block per multiprocessor) measured no
  // faster, and slower at batch 1 with the split kernel launched as a programmatic dependent.
  const int stages = tuning.stages == 0 ? 2 : tuning.stages;
  if (!simt && stages != 2) dk = decode_kernel(kv.head_dim, kv.dtype, group, unroll, simt, stages);

  DecodeParams p{kv.k_pages, kv.v_pages, kv.page_indptr, kv.page_indices, kv.seq_lens, q, out,
                 nullptr, nullptr, nullptr, kv.n_kv_heads, params.n_q_heads, n_splits, chunk, params.scale,
                 params.logit_soft_cap, params.sliding_window, qo_indptr, qo_indptr != nullptr ? max_q_len : 0};
  if (n_splits > 1) {
    const std::size_t rows = static_cast<std::size_t>(n_rows) * params.n_q_heads * n_splits;
    const SplitWorkspace ws = split_workspace(stream, rows * (kv.head_dim + 2),
                                              static_cast<std::size_t>(n_rows) * kv.n_kv_heads);
    p.part_o = ws.partials;
    p.part_ml = ws.partials + rows * kv.head_dim;
    p.counters = ws.counters;
  }
  if (qo_indptr != nullptr && z * n_splits > std::numeric_limits<std::int32_t>::max()) {
    throw Error(fmt::format("[{}] {} sequences of up to {} query rows over {} splits: too many blocks", op, kv.n_seqs,
                            max_q_len, n_splits));
  }
  void* argv[] = {&p};
  // A programmatic dependent launch (sm_90): its launch and block start-up overlap the previous kernel's tail;
  // the tensor-core kernel reads seq_lens and the page table before it waits for that kernel (see the header),
  // the SIMT kernel nothing. Query rows of a prefill go in x with the splits (decode_attention.cu's header).
  const bool rows_in_x = qo_indptr != nullptr;
  dk.kernel.launch_dependent({static_cast<unsigned>(rows_in_x ? static_cast<std::int64_t>(n_splits) * z : n_splits),
                              static_cast<unsigned>(kv.n_kv_heads), static_cast<unsigned>(rows_in_x ? 1 : n_rows)},
                             {kDecodeWarps * 32, 1, 1}, static_cast<unsigned>(dk.shared_bytes), stream, argv);
}

}  // namespace

void decode_attention(const PagedKv& kv, const AttentionParams& params, const DecodeArgs& args,
                      std::int32_t max_seq_len, const tensor::cuda::Stream* stream, const DecodeTuning& tuning) {
  constexpr const char* op = "pal::cuda::decode_attention";
  validate(kv, params, op);
  if (kv.n_seqs == 0) return;
  if (args.q == nullptr || args.out == nullptr) throw Error(fmt::format("[{}] q or out is null", op));
  if (max_seq_len <= 0) throw Error(fmt::format("[{}] max_seq_len {} must be positive", op, max_seq_len));
  launch_split(kv, params, args.q, args.out, nullptr, 0, max_seq_len, stream, tuning, op);
}

void prefill_attention(const PagedKv& kv, const AttentionParams& params, const PrefillArgs& args,
                       std::int32_t max_q_len, const tensor::cuda::Stream* stream, const PrefillTuning& tuning,
                       std::int32_t max_seq_len) {
  constexpr const char* op = "pal::cuda::prefill_attention";
  validate(kv, params, op);
  if (kv.n_seqs == 0) return;
  if (args.q == nullptr || args.out == nullptr || args.qo_indptr == nullptr) {
    throw Error(fmt::format("[{}] q, out or qo_indptr is null", op));
  }
  if (max_q_len <= 0) throw Error(fmt::format("[{}] max_q_len {} must be positive", op, max_q_len));
  if (max_seq_len < 0) throw Error(fmt::format("[{}] max_seq_len {} is negative", op, max_seq_len));
  if (kv.dtype == tensor::DType::f32) {
    // f32 KV: the split kernel over the query rows (the tensor-core kernel reads 16-bit operands), its split
    // grid sized by max_seq_len, or where that is 0 by the pool (every page of it).
    const std::int64_t max_keys =
        max_seq_len > 0 ? max_seq_len
                        : std::min<std::int64_t>(static_cast<std::int64_t>(kv.n_pages) * kPageSize,
                                                 std::numeric_limits<std::int32_t>::max());
    launch_split(kv, params, args.q, args.out, args.qo_indptr, max_q_len, static_cast<std::int32_t>(max_keys), stream,
                 {}, op);
    return;
  }
  if (tuning.warps != 0 && tuning.warps != 4 && tuning.warps != 8) {
    throw Error(fmt::format("[{}] tuning warps {} must be 0, 4 or 8", op, tuning.warps));
  }
  const bool wide_allowed = kv.head_dim <= 128;  // two m16 tiles of accumulators per warp fit the registers
  if (tuning.rows_per_warp != 0 && tuning.rows_per_warp != 16 && !(tuning.rows_per_warp == 32 && wide_allowed)) {
    throw Error(fmt::format("[{}] tuning rows_per_warp {} must be 0, 16 or (head_dim {} <= 128) 32", op,
                            tuning.rows_per_warp, kv.head_dim));
  }
  const int warps = tuning.warps == 0 ? kPrefillWarps : tuning.warps;
  const int m_tiles = tuning.rows_per_warp == 0 ? (wide_allowed ? 2 : 1) : tuning.rows_per_warp / 16;
  const int block_rows = warps * 16 * m_tiles;
  const std::int64_t n_tiles = (static_cast<std::int64_t>(max_q_len) + block_rows - 1) / block_rows;
  if (n_tiles > 65535) {
    throw Error(fmt::format("[{}] max_q_len {} needs {} query tiles of {} rows: at most 65535 are supported", op,
                            max_q_len, n_tiles, block_rows));
  }
  auto options = base_options(kv);
  options.push_back("-DPREFILL_WARPS=" + std::to_string(warps));
  options.push_back("-DPREFILL_M_TILES=" + std::to_string(m_tiles));
  const int block_n = prefill_block_n(kv.head_dim, m_tiles);
  options.push_back("-DPREFILL_BLOCK_N=" + std::to_string(block_n));
  // Soft-cap and window code only where the call uses them.
  options.push_back(std::string("-DPREFILL_SOFT_CAP=") + (params.logit_soft_cap > 0.0f ? "1" : "0"));
  options.push_back(std::string("-DPREFILL_WINDOW=") + (params.sliding_window > 0 ? "1" : "0"));
  PrefillParams p{kv.k_pages, kv.v_pages, kv.page_indptr, kv.page_indices, kv.seq_lens, args.qo_indptr,
                  args.q, args.out, kv.n_kv_heads, params.n_q_heads, params.scale, params.logit_soft_cap,
                  params.sliding_window};
  void* argv[] = {&p};
  const int shared = prefill_shared_bytes(kv.head_dim, block_rows, block_n);
  tensor::cuda::Kernel k = detail::kernel("prefill_attention.cu", options, "prefill_attention", shared);
  // Heads fastest, then sequences, query tiles slowest (the kernel takes them heaviest first).
  k.launch({static_cast<unsigned>(params.n_q_heads), static_cast<unsigned>(kv.n_seqs), static_cast<unsigned>(n_tiles)},
           {static_cast<unsigned>(warps * 32), 1, 1}, static_cast<unsigned>(shared), stream, argv);
}

std::int32_t decode_default_chunk(const PagedKv& kv, const AttentionParams& params, std::int32_t max_seq_len) {
  constexpr const char* op = "pal::cuda::decode_default_chunk";
  validate(kv, params, op);
  if (max_seq_len <= 0) throw Error(fmt::format("[{}] max_seq_len {} must be positive", op, max_seq_len));
  const DecodeKernel dk = decode_kernel(kv.head_dim, kv.dtype, params.n_q_heads / kv.n_kv_heads, kDecodeUnroll,
                                        decode_simt(kv, false));
  std::int32_t chunk = decode_chunk(std::max(1, kv.n_seqs), kv.n_kv_heads, max_seq_len, dk.kernel, dk.variant,
                                    dk.shared_bytes);
  chunk = std::max<std::int32_t>(chunk, static_cast<std::int32_t>((max_seq_len + kMaxChunk - 1) / kMaxChunk + 63) / 64 * 64);
  return std::min(chunk, kMaxChunk);
}

std::vector<KernelVariant> kernel_variants() {
  // Every entry point, head dim and KV type once, without the full cross product (CI compiles each for two
  // architectures): bf16 everywhere, f16 on one variant of each kernel, f32 (SIMT decode, KV writes) at each
  // head dim.
  std::vector<KernelVariant> out;
  auto plain = [](std::int32_t d, bool bf16) {
    return std::vector<std::string>{"-DHEAD_DIM=" + std::to_string(d), std::string("-DKV_BF16=") + (bf16 ? "1" : "0")};
  };
  for (std::int32_t d : {64, 128, 256}) {
    out.push_back({"decode_attention.cu", decode_options(d, tensor::DType::bf16, 4)});
    out.push_back({"decode_attention.cu", decode_options(d, tensor::DType::f16, 1)});
    out.push_back({"decode_attention.cu", decode_options(d, tensor::DType::f32, 4)});
    out.push_back({"kv_write.cu", {"-DHEAD_DIM=" + std::to_string(d), kv_type_option(tensor::DType::f32)}});
    out.push_back({"prefill_attention.cu", plain(d, true)});
    out.push_back({"kv_write.cu", plain(d, true)});
  }
  auto deep = decode_options(128, tensor::DType::bf16, 16);
  deep.push_back("-DMMA_STAGES=3");
  out.push_back({"decode_attention.cu", deep});
  auto wide = plain(128, true);
  wide.push_back("-DPREFILL_WARPS=8");
  out.push_back({"prefill_attention.cu", wide});
  for (std::int32_t d : {64, 128}) {  // two m16 tiles per warp, the default up to head_dim 128
    auto two = plain(d, d == 128);
    two.push_back("-DPREFILL_M_TILES=2");
    two.push_back("-DPREFILL_BLOCK_N=" + std::to_string(prefill_block_n(d, 2)));
    out.push_back({"prefill_attention.cu", two});
    two.push_back("-DPREFILL_SOFT_CAP=0");
    two.push_back("-DPREFILL_WINDOW=0");
    out.push_back({"prefill_attention.cu", two});
  }
  out.push_back({"prefill_attention.cu", plain(128, false)});
  out.push_back({"kv_write.cu", plain(64, false)});
  return out;
}

}  // namespace pal::cuda
