// `orchard perplexity`: a model's perplexity over a text file, computed as llama.cpp's `llama-perplexity`
// computes it (tools/perplexity/perplexity.cpp), so the two figures can be compared: the standard check that
// a quantization or a kernel change kept a model intact.
//
// The method: the whole file is tokenized (BOS as the model's metadata says, special-token text read as
// plain text) and cut into chunks of n_ctx tokens; each chunk is a fresh sequence whose first token becomes
// BOS when the model adds one; the logits of positions n_ctx/2 .. n_ctx-2 predict the tokens after them,
// and PPL = exp(mean negative log-likelihood) over every chunk so far, its error from the spread of the
// per-token negative log-likelihoods.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "commands.h"
#include "device_flag.h"
#include "pie/error.h"
#include "pie/kv_cache.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "read_input.h"
#include "tensor/thread_pool.h"

namespace orchard::cli {

namespace {

struct PerplexitySettings {
  std::int32_t n_ctx = 512;
  std::int32_t max_chunks = -1;  // -1: every whole chunk of the file
  std::int32_t n_batch = 512;    // tokens per forward step
  int n_threads = 0;
  tensor::DType kv_dtype = tensor::DType::f16;
  pie::DeviceRequest device = pie::DeviceRequest::automatic;
  bool json = false;
};

// The one place the model comes from (kept alone so that a default model can replace the required -m).
std::shared_ptr<const pie::Model> load_perplexity_model(const std::string& path) { return pie::load_model(path); }

void write_out(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    throw std::runtime_error("cannot write to standard output");
  }
}

// -log p(token | row) with llama.cpp's arithmetic: the maximum and the shifted logits in float, their
// exponentials summed in double.
double negative_log_likelihood(const float* row, std::int32_t n_vocab, std::int32_t token) {
  float max_logit = row[0];
  for (std::int32_t i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, row[i]);
  double sum_exp = 0.0;
  for (std::int32_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(row[i] - max_logit);
  return -(static_cast<double>(row[token] - max_logit) - std::log(sum_exp));
}

// Running sums of the scored tokens' negative log-likelihoods.
struct NllSums {
  double nll = 0, nll2 = 0;
  std::int64_t count = 0;
  double ppl() const { return std::exp(nll / static_cast<double>(count)); }
  // llama.cpp's error of PPL: the standard error of the mean NLL, times PPL.
  double ppl_error() const {
    const double mean = nll / static_cast<double>(count);
    const double var = nll2 / static_cast<double>(count) - mean * mean;
    return var > 0 && count > 1 ? std::sqrt(var / static_cast<double>(count - 1)) * ppl() : 0.0;
  }
};

int compute_perplexity(const std::string& model_path, const std::string& text_path, const PerplexitySettings& s) {
  const auto t_start = std::chrono::steady_clock::now();
  const std::string text = read_input(text_path);
  const std::shared_ptr<const pie::Model> model = load_perplexity_model(model_path);
  const std::int32_t n_ctx = s.n_ctx;
  if (model->config.context_length > 0 && n_ctx > model->config.context_length) {
    throw UsageError(fmt::format("--ctx {} is over the model's context of {} tokens", n_ctx,
                                 model->config.context_length));
  }
  const tokenizers::Tokenizer& tokenizer = *model->tokenizer;
  const bool add_bos = tokenizer.add_bos_by_default() && tokenizer.special_tokens().bos.has_value();
  const std::vector<std::int32_t> tokens = tokenizer.encode(text, {.add_bos = add_bos});
  // llama.cpp's rule: at least two chunks' worth of tokens.
  if (tokens.size() < 2 * static_cast<std::size_t>(n_ctx)) {
    throw std::runtime_error(fmt::format("{} tokenizes to {} tokens; perplexity at --ctx {} needs at least {}",
                                         text_path, tokens.size(), n_ctx, 2 * n_ctx));
  }
  const std::int32_t n_chunk_max = static_cast<std::int32_t>(tokens.size() / static_cast<std::size_t>(n_ctx));
  const std::int32_t n_chunk = s.max_chunks < 0 ? n_chunk_max : std::min(s.max_chunks, n_chunk_max);
  // Logits rows past the tokenizer's vocabulary (padded output matrices) are no tokens: left out, as
  // llama.cpp's n_vocab is the vocabulary's.
  const std::int32_t n_vocab =
      std::min(model->config.n_vocab, static_cast<std::int32_t>(tokenizer.vocab_size()));
  const std::int32_t n_logits = model->config.n_vocab;
  const std::int32_t first = n_ctx / 2;
  const std::int32_t n_scored = n_ctx - first - 1;  // per chunk
  // Chunks per forward step when the batch holds several; otherwise one chunk over several steps.
  const std::int32_t n_seq = std::max<std::int32_t>(1, s.n_batch / n_ctx);
  const std::int32_t step_tokens = std::min(s.n_batch, n_ctx);

  const pie::DeviceChoice device = pie::choose_device(s.device);
  if (!s.json) log_device(device, s.device);
  tensor::ThreadPool pool(device.device == tensor::Device::cpu ? s.n_threads : 1);
  pie::ModelRunner runner(model, device.device == tensor::Device::cuda ? pie::make_cuda_backend(0)
                                                                       : pie::make_cpu_backend(&pool));
  const std::int32_t pages_per_seq = (n_ctx + pie::kKvPageSize - 1) / pie::kKvPageSize;
  pie::KvCacheConfig kv_config = runner.kv_config(pages_per_seq * n_seq, s.kv_dtype);
  kv_config.prefix_caching = false;
  pie::KvCache kv(runner.make_kv_storage(kv_config));

  if (!s.json) {
    std::fprintf(stderr,
                 "orchard perplexity: %zu tokens, %d chunks of %d (%d scored each), %d per step, %d threads, "
                 "model %s\n",
                 tokens.size(), n_chunk, n_ctx, n_scored, s.n_batch, pool.n_threads(), model->name.c_str());
  }
  NllSums sums;
  std::vector<double> estimates;
  std::vector<float> logits;
  std::vector<std::int32_t> step_ids, qo, lens, page_indptr, pages, rows;
  for (std::int32_t chunk = 0; chunk < n_chunk; chunk += n_seq) {
    const std::int32_t n_seq_step = std::min(n_seq, n_chunk - chunk);
    std::vector<pie::SeqId> seqs;
    for (std::int32_t q = 0; q < n_seq_step; ++q) seqs.push_back(kv.create());
    // The logits of the scored rows of every sequence of this group, [n_seq_step][first..n_ctx-2][n_logits].
    logits.assign(static_cast<std::size_t>(n_seq_step) * n_scored * n_logits, 0.0f);
    for (std::int32_t pos = 0; pos < n_ctx; pos += step_tokens) {
      const std::int32_t n = std::min(step_tokens, n_ctx - pos);
      step_ids.clear(), rows.clear(), pages.clear(), lens.clear();
      qo.assign(1, 0), page_indptr.assign(1, 0);
      for (std::int32_t q = 0; q < n_seq_step; ++q) {
        const std::size_t start = static_cast<std::size_t>(chunk + q) * n_ctx;
        if (!kv.reserve(seqs[q], pos + n)) throw pie::Error("perplexity: the KV cache is too small");
        const auto owned = kv.pages(seqs[q]);
        pages.insert(pages.end(), owned.begin(), owned.begin() + (pos + n + pie::kKvPageSize - 1) / pie::kKvPageSize);
        page_indptr.push_back(static_cast<std::int32_t>(pages.size()));
        for (std::int32_t i = pos; i < pos + n; ++i) {
          // Scored rows only: positions first .. n_ctx - 2 (the last one predicts past the chunk).
          if (i >= first && i < n_ctx - 1) rows.push_back(static_cast<std::int32_t>(step_ids.size()));
          step_ids.push_back(i == 0 && add_bos ? *tokenizer.special_tokens().bos : tokens[start + i]);
        }
        qo.push_back(static_cast<std::int32_t>(step_ids.size()));
        lens.push_back(pos + n);
      }
      if (rows.empty()) {
        runner.forward({step_ids, qo, lens, page_indptr, pages, rows}, kv, {});
        continue;
      }
      // This step's scored rows go to their place among the group's: sequence-major, position order.
      std::vector<float> step_logits(rows.size() * static_cast<std::size_t>(n_logits));
      runner.forward({step_ids, qo, lens, page_indptr, pages, rows}, kv, step_logits);
      const std::int32_t row_lo = std::max(pos, first) - first;
      const std::int32_t rows_per_seq = static_cast<std::int32_t>(rows.size()) / n_seq_step;
      for (std::int32_t q = 0; q < n_seq_step; ++q) {
        std::copy_n(step_logits.begin() + static_cast<std::ptrdiff_t>(q) * rows_per_seq * n_logits,
                    static_cast<std::size_t>(rows_per_seq) * n_logits,
                    logits.begin() + (static_cast<std::ptrdiff_t>(q) * n_scored + row_lo) * n_logits);
      }
    }
    for (pie::SeqId id : seqs) kv.release(id);

    for (std::int32_t q = 0; q < n_seq_step; ++q) {
      const std::size_t start = static_cast<std::size_t>(chunk + q) * n_ctx;
      std::vector<double> nll(static_cast<std::size_t>(n_scored));
      pool.parallel_for(n_scored, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t r = lo; r < hi; ++r) {
          const float* row = logits.data() + (static_cast<std::size_t>(q) * n_scored + r) * n_logits;
          nll[r] = negative_log_likelihood(row, n_vocab, tokens[start + first + r + 1]);
        }
      });
      for (double v : nll) sums.nll += v, sums.nll2 += v * v;
      sums.count += n_scored;
      estimates.push_back(sums.ppl());
      if (!s.json) write_out(fmt::format("[{}]{:.4f},", estimates.size(), estimates.back()));
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (s.json) {
    nlohmann::ordered_json j;
    j["model"] = model->name;
    j["file"] = text_path;
    j["n_tokens"] = tokens.size();
    j["add_bos"] = add_bos;
    j["n_ctx"] = n_ctx;
    j["n_chunks"] = n_chunk;
    j["n_scored"] = sums.count;
    j["ppl"] = sums.ppl();
    j["ppl_error"] = sums.ppl_error();
    j["mean_nll"] = sums.nll / static_cast<double>(sums.count);
    j["estimates"] = estimates;
    j["kv_type"] = std::string(tensor::dtype_name(s.kv_dtype));
    j["threads"] = pool.n_threads();
    j["device"] = device.device == tensor::Device::cuda ? "cuda" : "cpu";
    j["seconds"] = seconds;
    write_out(j.dump() + "\n");
  } else {
    write_out(fmt::format("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", sums.ppl(), sums.ppl_error()));
    std::fprintf(stderr, "orchard perplexity: %lld tokens scored in %.2f s (%.1f tokens/s evaluated)\n",
                 static_cast<long long>(sums.count), seconds,
                 static_cast<double>(n_chunk) * n_ctx / seconds);
  }
  return 0;
}

}  // namespace

int run_perplexity(std::span<const std::string> args) {
  std::optional<std::string> model_path, file, ctx, chunks, threads, batch, kv_type, device;
  bool json = false;
  ArgParser parser(
      "orchard perplexity -m MODEL -f FILE [--ctx N] [--chunks N] [--batch N] [--threads N] [--kv-type T] [--device D]\n"
      "                  [--json]",
      "Computes the model's perplexity over the text of FILE as llama.cpp's llama-perplexity does: the\n"
      "file is tokenized (with BOS when the model's metadata asks for it) and cut into chunks of N\n"
      "tokens; each chunk is evaluated on its own (its first token replaced by BOS when the model adds\n"
      "one), and the second half of its tokens are scored. Prints the running estimate after each chunk\n"
      "([1]12.3456,[2]...) and then 'Final estimate: PPL = X +/- Y'; --json prints one JSON object instead.\n"
      "The figures match llama.cpp's for the same model, file and context, up to the rounding of the\n"
      "forward pass.\n\n"
      "Exit status: 0 success; 2 bad arguments, an unreadable model or file, or a file too short\n"
      "(it must hold at least 2 chunks' worth of tokens, as llama.cpp requires).\n\n"
      "example: orchard perplexity -m model.gguf -f wiki.test.raw --ctx 512 --chunks 16");
  parser.option("model", 'm', "MODEL", "model file or folder (required)", &model_path)
      .option("file", 'f', "FILE", "the text to score (required)", &file)
      .option("ctx", 'c', "N", "tokens per chunk, at least 3 and at most the model's context (default 512)", &ctx)
      .option("chunks", 0, "N", "score only the first N chunks (default: all)", &chunks)
      .option("batch", 'b', "N", "tokens per forward step: several chunks at once when N >= 2 ctx (default 512)",
              &batch)
      .option("threads", 't', "N", "forward-pass threads (default: all cores)", &threads)
      .option("kv-type", 0, "T", "KV cache type, f16 (llama.cpp's default) or f32 (default f16)", &kv_type)
      .option("device", 0, "DEVICE",
              "where the forward pass runs: cuda, cpu, or auto (default: cuda when a usable GPU is present)",
              &device)
      .flag("json", 0, "print one JSON object (ppl, ppl_error, estimates per chunk, ...)", &json);
  if (!parser.parse(args)) return 0;
  if (!model_path) throw UsageError("missing option --model/-m MODEL");
  if (!file) throw UsageError("missing option --file/-f FILE");
  PerplexitySettings s;
  // Under 3 tokens a chunk scores nothing (positions n_ctx/2 .. n_ctx-2 are empty).
  if (ctx) s.n_ctx = static_cast<std::int32_t>(parse_int(*ctx, "--ctx", 3, 1 << 20));
  if (chunks) s.max_chunks = static_cast<std::int32_t>(parse_int(*chunks, "--chunks", 1, 1 << 30));
  if (batch) s.n_batch = static_cast<std::int32_t>(parse_int(*batch, "--batch", 1, 1 << 16));
  if (threads) s.n_threads = static_cast<int>(parse_int(*threads, "--threads", 1, 1024));
  if (kv_type) s.kv_dtype = parse_kv_type(*kv_type);
  s.json = json;
  s.device = DeviceFlag{device}.get();
  return compute_perplexity(*model_path, *file, s);
}

}  // namespace orchard::cli
