// pie::Embedder: validation of every input before any work, truncation, batches split by the
// runner's token budget (whole inputs), pooling, dimensions and L2 normalization.
#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "embed/encoder_runner.h"
#include "pie/embedding.h"
#include "pie/error.h"
#include "tensor/thread_pool.h"
#include "tokenizers/error.h"

namespace pie {
namespace {

void normalize_l2(std::vector<float>& v) {
  double sum = 0;
  for (const float x : v) sum += static_cast<double>(x) * x;
  if (sum <= 0)
    return;  // an all-zero vector stays zero (as torch.nn.functional.normalize leaves it)
  const float inv = static_cast<float>(1.0 / std::sqrt(sum));
  for (float& x : v) x *= inv;
}

std::string input_param(std::size_t i, std::size_t n) {
  return n == 1 ? "input" : fmt::format("input[{}]", i);
}

}  // namespace

Embedder::Embedder(std::shared_ptr<const EmbeddingModel> model, std::int32_t n_threads)
    : model_(std::move(model)) {
  if (!model_) throw Error("[embed] no model given");
  if (n_threads < 0) throw Error(fmt::format("[embed] n_threads must be >= 0, got {}", n_threads));
  pool_ = std::make_unique<tensor::ThreadPool>(n_threads);
  runner_ = model_->decoder ? make_decoder_embedding_runner(*model_, pool_.get())
                            : make_bert_runner(*model_, pool_.get());
}

Embedder::~Embedder() = default;

EmbedResult Embedder::embed(std::span<const std::string> texts, const EmbedOptions& options) {
  if (texts.empty()) throw RequestError("[embed] input is empty: give at least one text", "input");
  if (!model_->tokenizer) {
    throw RequestError(fmt::format("[embed] {} has no tokenizer: give token ids", model_->name),
                       "input");
  }
  const tokenizers::Tokenizer& tok = *model_->tokenizer;
  tokenizers::EncodeOptions encode;
  encode.add_bos = tok.add_bos_by_default();
  encode.add_eos = tok.add_eos_by_default();
  std::vector<std::vector<std::int32_t>> inputs;
  inputs.reserve(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].empty()) {
      throw RequestError(fmt::format("[embed] {} is an empty string", input_param(i, texts.size())),
                         input_param(i, texts.size()));
    }
    try {
      inputs.push_back(tok.encode(texts[i], encode));
    } catch (const tokenizers::Error& e) {
      throw RequestError(fmt::format("[embed] {}: {}", input_param(i, texts.size()), e.what()),
                         input_param(i, texts.size()));
    }
  }
  return run(std::move(inputs), options);
}

EmbedResult Embedder::embed_tokens(std::span<const std::vector<std::int32_t>> inputs,
                                   const EmbedOptions& options) {
  if (inputs.empty())
    throw RequestError("[embed] input is empty: give at least one list of token ids", "input");
  const std::int64_t n_vocab = model_->decoder
                                   ? model_->decoder->config.n_vocab
                                   : static_cast<std::int64_t>(model_->encoder->n_vocab);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) {
      throw RequestError(
          fmt::format("[embed] {} is an empty list of token ids", input_param(i, inputs.size())),
          input_param(i, inputs.size()));
    }
    for (std::size_t t = 0; t < inputs[i].size(); ++t) {
      if (inputs[i][t] < 0 || inputs[i][t] >= n_vocab) {
        throw RequestError(
            fmt::format("[embed] {}[{}] is token id {}, outside the vocabulary [0, {})",
                        input_param(i, inputs.size()), t, inputs[i][t], n_vocab),
            input_param(i, inputs.size()));
      }
    }
  }
  return run({inputs.begin(), inputs.end()}, options);
}

EmbedResult Embedder::run(std::vector<std::vector<std::int32_t>> inputs,
                          const EmbedOptions& options) {
  const EmbeddingModel& m = *model_;
  if (options.dimensions < 0 || options.dimensions > m.n_dims) {
    throw RequestError(
        fmt::format("[embed] dimensions must be in [1, {}], got {}", m.n_dims, options.dimensions),
        "dimensions");
  }
  EmbedResult result;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::int32_t>& ids = inputs[i];
    if (static_cast<std::int64_t>(ids.size()) <= m.max_tokens) continue;
    if (!options.truncate) {
      throw RequestError(
          fmt::format(
              "[embed] {} has {} tokens, more than the model's {} (ask for truncation to cut "
              "it)",
              input_param(i, inputs.size()), ids.size(), m.max_tokens),
          input_param(i, inputs.size()), "context_length_exceeded");
    }
    // Cut the text, keeping a closing special token ([SEP], EOS) as the tokenizer would place it.
    const std::int32_t last = ids.back();
    const bool closing = m.tokenizer && m.tokenizer->is_special(last) && ids.size() >= 2;
    ids.resize(static_cast<std::size_t>(m.max_tokens));
    if (closing) ids.back() = last;
    ++result.n_truncated;
  }
  const std::int32_t n_dims = m.n_dims;
  const std::int32_t keep = options.dimensions == 0 ? n_dims : options.dimensions;
  result.embeddings.resize(inputs.size());

  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::int32_t> tokens, indptr;
  std::vector<float> hidden;
  std::size_t next = 0;
  while (next < inputs.size()) {
    // Whole inputs up to the runner's budget (at least one).
    const std::size_t first = next;
    tokens.clear();
    indptr.assign(1, 0);
    while (next < inputs.size() &&
           (next == first || static_cast<std::int64_t>(tokens.size() + inputs[next].size()) <=
                                 runner_->token_budget())) {
      tokens.insert(tokens.end(), inputs[next].begin(), inputs[next].end());
      indptr.push_back(static_cast<std::int32_t>(tokens.size()));
      ++next;
    }
    hidden.resize(tokens.size() * static_cast<std::size_t>(n_dims));
    runner_->hidden_states(tokens, indptr, hidden.data());
    for (std::size_t s = 0; s + 1 < indptr.size(); ++s) {
      const std::int64_t begin = indptr[s], end = indptr[s + 1];
      std::vector<float> pooled(static_cast<std::size_t>(n_dims), 0.0f);
      auto row = [&](std::int64_t t) { return hidden.data() + t * n_dims; };
      switch (m.pooling) {
        case Pooling::mean: {
          std::vector<double> sum(static_cast<std::size_t>(n_dims), 0.0);
          for (std::int64_t t = begin; t < end; ++t) {
            for (std::int32_t e = 0; e < n_dims; ++e) sum[static_cast<std::size_t>(e)] += row(t)[e];
          }
          for (std::int32_t e = 0; e < n_dims; ++e) {
            pooled[static_cast<std::size_t>(e)] =
                static_cast<float>(sum[static_cast<std::size_t>(e)] / double(end - begin));
          }
          break;
        }
        case Pooling::cls:
          pooled.assign(row(begin), row(begin) + n_dims);
          break;
        case Pooling::last:
          pooled.assign(row(end - 1), row(end - 1) + n_dims);
          break;
      }
      if (m.normalize) normalize_l2(pooled);
      pooled.resize(static_cast<std::size_t>(keep));
      if (m.normalize && keep != n_dims) normalize_l2(pooled);
      result.embeddings[first + s] = std::move(pooled);
    }
    result.n_tokens += static_cast<std::int64_t>(tokens.size());
  }
  return result;
}

}  // namespace pie
