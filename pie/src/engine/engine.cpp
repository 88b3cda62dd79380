// The engine: submit() validates and compiles on the caller's thread; one loop thread owns the KV cache,
// the scheduler and the runner, and runs steps: schedule -> (forward pass || grammar masks) -> sample,
// accept, append forced tokens, detokenize, stop checks -> events. This file builds the engine (options,
// backend, KV pool, drafters), runs its loop, and holds the public API but submit (engine_requests.cpp).
#include "pie/engine.h"

#include <fmt/format.h>

#include <cstdlib>
#include <limits>
#include <string_view>

#include "engine_impl.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/memory_pool.h"

namespace pie {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "unknown";
}

namespace {

// The KV pool's pages on CUDA: what `fraction` of the GPU's memory leaves once the weights are resident
// (free memory now, the pool's cached blocks counted free, less the (1 - fraction) share kept back for
// activations and everything else). Throws pie::Error, with the figures, when it holds no full context.
std::int64_t gpu_kv_pages(double fraction, std::size_t page_bytes, std::int64_t context_pages) {
  const tensor::cuda::MemoryInfo mem = tensor::cuda::memory_info();
  const double free =
      static_cast<double>(mem.free) + static_cast<double>(tensor::cuda::MemoryPool::global().bytes_cached());
  const double budget = free - (1.0 - fraction) * static_cast<double>(mem.total);
  const std::int64_t n_pages = budget > 0 ? static_cast<std::int64_t>(budget / static_cast<double>(page_bytes)) : 0;
  if (n_pages < context_pages + 1) {
    throw Error(fmt::format("[engine] gpu_memory {}: {:.2f} GiB of the GPU's {:.2f} GiB are free after the weights, "
                            "which leaves {:.2f} GiB for the KV pool; one context needs {:.2f} GiB ({} pages of {} "
                            "bytes)",
                            fraction, free / (1 << 30), static_cast<double>(mem.total) / (1 << 30),
                            std::max(budget, 0.0) / (1 << 30),
                            static_cast<double>(context_pages + 1) * static_cast<double>(page_bytes) / (1 << 30),
                            context_pages + 1, page_bytes));
  }
  // At most 2^20 pages (16M tokens): a small model's pages are small, and the host's page tables grow with
  // their count.
  return std::min<std::int64_t>(n_pages, std::int64_t{1} << 20);
}

}  // namespace

Engine::Impl::Impl(std::shared_ptr<const Model> m, EngineOptions o) : model(std::move(m)), options(o) {
  if (!model) throw Error("[engine] no model");
  if (!model->tokenizer) throw ModelError("[engine] model '" + model->name + "' has no tokenizer");
  auto positive = [](const char* name, auto value) {
    if (value < 1) throw Error(fmt::format("[engine] {} must be at least 1, got {}", name, value));
  };
  positive("max_running", options.max_running);
  positive("max_batch_tokens", options.max_batch_tokens);
  positive("max_queued", options.max_queued);
  positive("grammar_cache", options.grammar_cache);
  if (options.grammar_cache_bytes < 0) {
    throw Error(fmt::format("[engine] grammar_cache_bytes must be >= 0, got {}", options.grammar_cache_bytes));
  }
  if (options.n_threads < 0) throw Error(fmt::format("[engine] n_threads must be >= 0, got {}", options.n_threads));
  if (options.context_length < 0) {
    throw Error(fmt::format("[engine] context_length must be >= 0, got {}", options.context_length));
  }
  if (options.kv_cache_bytes < 0) {
    throw Error(fmt::format("[engine] kv_cache_bytes must be >= 0, got {}", options.kv_cache_bytes));
  }
  if (!(options.grammar_compile_ms > 0)) {
    throw Error(fmt::format("[engine] grammar_compile_ms must be > 0, got {}", options.grammar_compile_ms));
  }
  if (options.kv_dtype && *options.kv_dtype != tensor::DType::f32 && *options.kv_dtype != tensor::DType::f16) {
    throw Error(fmt::format("[engine] kv_dtype {}: the KV cache takes f32 or f16",
                            tensor::dtype_name(*options.kv_dtype)));
  }
  options.speculative.validate();
  if (!(options.gpu_memory > 0.0 && options.gpu_memory <= 1.0)) {
    throw Error(fmt::format("[engine] gpu_memory must be a fraction in (0, 1], got {}", options.gpu_memory));
  }
  if (options.speculative_max_batch < 0) {
    throw Error(fmt::format("[engine] speculative_max_batch must be >= 0, got {}", options.speculative_max_batch));
  }
  n_vocab = model->config.n_vocab;
  const std::int32_t trained = model->config.context_length > 0 ? model->config.context_length : 8192;
  context_length = options.context_length > 0 ? options.context_length : std::min(trained, 8192);
  options.context_length = context_length;

  // Masks fill on their own threads while the backend runs the forward pass on its own.
  const unsigned hw = std::max(2u, std::thread::hardware_concurrency());
  mask_pool = std::make_unique<pse::ThreadPool>(std::clamp<std::size_t>(hw / 4, 2, 8));
  device = choose_device(options.device);
  if (!options.kv_dtype) {
    // Unset: each device's default (f16 on CUDA halves a token's pages; the CPU keeps f32).
    options.kv_dtype = device.device == tensor::Device::cuda ? tensor::DType::f16 : tensor::DType::f32;
  }
  const tensor::DType kv_dtype = *options.kv_dtype;
  std::unique_ptr<Backend> backend;
  if (options.draft_model && device.device == tensor::Device::cpu) {
    // The draft model's passes and the target's alternate: one pool of threads serves both.
    cpu_pool = std::make_unique<tensor::ThreadPool>(options.n_threads);
    backend = make_cpu_backend(cpu_pool.get());
  } else {
    backend = make_backend(device.device, options.n_threads, {.batch_invariant = options.batch_invariant});
  }
  if (options.wrap_backend) backend = options.wrap_backend(std::move(backend));
  runner = std::make_unique<ModelRunner>(model, with_injected_faults(std::move(backend)));

  const char* device_sampling_env = std::getenv("ORCHARD_DEVICE_SAMPLING");
  device_sampling = options.device_sampling && runner->backend().samples_on_device() &&
                    !(device_sampling_env != nullptr && std::string_view(device_sampling_env) == "0");

  const std::size_t page_bytes = runner->kv_config(1, kv_dtype).page_bytes();
  const std::int64_t context_pages = (context_length + kKvPageSize - 1) / kKvPageSize;
  std::int64_t n_pages;
  if (options.kv_cache_bytes > 0) {
    n_pages = options.kv_cache_bytes / static_cast<std::int64_t>(page_bytes);
    if (n_pages < context_pages + 1) {
      throw Error(fmt::format("[engine] kv_cache_bytes {} holds {} pages of {} bytes; one context of {} tokens "
                              "needs {}",
                              options.kv_cache_bytes, n_pages, page_bytes, context_length, context_pages + 1));
    }
  } else if (device.device == tensor::Device::cuda && !options.draft_model) {
    // (With a draft model, whose weights and KV pages come later, the CPU's sizing below.)
    n_pages = gpu_kv_pages(options.gpu_memory, page_bytes, context_pages);
    options.kv_cache_bytes = n_pages * static_cast<std::int64_t>(page_bytes);
  } else {
    const std::int64_t cap = (std::int64_t{4} << 30) / static_cast<std::int64_t>(page_bytes);
    n_pages = std::min<std::int64_t>(options.max_running * context_pages + 1, cap);
    if (n_pages < context_pages + 1) {
      // A huge model: shrink the context to what 4 GiB holds rather than fail.
      context_length = static_cast<std::int32_t>((n_pages - 1) * kKvPageSize);
      options.context_length = context_length;
    }
    options.kv_cache_bytes = n_pages * static_cast<std::int64_t>(page_bytes);
  }
  if (n_pages > std::numeric_limits<std::int32_t>::max()) n_pages = std::numeric_limits<std::int32_t>::max();
  KvCacheConfig kv_config = runner->kv_config(static_cast<std::int32_t>(n_pages), kv_dtype);
  kv_config.prefix_caching = options.prefix_caching;
  kv_config.resident = options.kv_resident;
  kv = std::make_unique<KvCache>(runner->make_kv_storage(kv_config));
  pages = std::make_unique<detail::KvCachePages>(*kv);
  scheduler = std::make_unique<Scheduler>(
      SchedulerConfig{options.max_running, std::max(options.max_batch_tokens, options.max_running)}, *pages);

  pse::CompileOptions compile;
  compile.max_compile_ms = options.grammar_compile_ms;
  compile.tables = options.grammar_tables;
  lora_registry = std::make_unique<detail::LoraRegistry>(model, options.lora_memory_bytes);
  grammars = std::make_unique<detail::GrammarCache>(model->tokenizer, static_cast<std::size_t>(n_vocab), compile,
                                                    static_cast<std::size_t>(options.grammar_cache),
                                                    static_cast<std::size_t>(options.grammar_cache_bytes));

  const tokenizers::SpecialTokens& st = model->tokenizer->special_tokens();
  eos_ids.assign(st.end_of_generation.begin(), st.end_of_generation.end());
  if (st.eos && !is_eos(*st.eos)) eos_ids.push_back(*st.eos);
  no_eos_mask.assign((static_cast<std::size_t>(n_vocab) + 31) / 32, 0xFFFFFFFFu);
  for (std::int32_t id : eos_ids) {
    if (id >= 0 && id < n_vocab) no_eos_mask[static_cast<std::size_t>(id) / 32] &= ~(1u << (id % 32));
  }
  stats.kv_pages = static_cast<std::int32_t>(n_pages);
  stats.kv_pages_free = static_cast<std::int32_t>(n_pages);

  ngram_drafter = make_prompt_lookup_drafter(model->tokenizer.get());
  custom_drafter = options.custom_drafter;
  if (options.draft_model) {
    DraftModelOptions d;
    d.device = device.device;
    d.pool = cpu_pool.get();
    d.n_pages = static_cast<std::int32_t>(n_pages);
    d.kv_dtype = kv_dtype;
    d.max_batch_tokens = options.max_batch_tokens;
    d.memory_bytes = options.draft_memory_bytes;
    draft_model_drafter = std::make_unique<DraftModelDrafter>(options.draft_model, *model, d);
  } else if (options.draft_memory_bytes < 0) {
    throw Error(fmt::format("[engine] draft_memory_bytes must be >= 0, got {}", options.draft_memory_bytes));
  }
  if (options.speculative.mode != DraftMode::off && !drafter_for(options.speculative.mode)) {
    throw Error(fmt::format("[engine] speculative mode \"{}\" needs {}", draft_mode_name(options.speculative.mode),
                            options.speculative.mode == DraftMode::draft ? "a draft model (draft_model)"
                                                                         : "a drafter (custom_drafter)"));
  }
}

void Engine::Impl::publish_stats() {
  const KvCacheStats k = kv->stats();
  std::uint64_t running = 0, queued = 0;
  for (const auto& r : active) (r->admitted ? running : queued) += 1;
  grammars->trim();  // cached grammars grow while their tables are built in the background
  const detail::GrammarCacheStats g = grammars->stats();
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats.requests_running = running;
  stats.requests_queued = queued;
  stats.kv_pages = k.n_pages;
  stats.kv_pages_used = k.n_used;
  stats.kv_pages_cached = k.n_cached;
  stats.kv_pages_free = k.n_free;
  stats.prefix_lookup_tokens = k.prefix_lookup_tokens;
  stats.prefix_hit_tokens = k.prefix_hit_tokens;
  stats.grammar_compiles = g.compiles;
  stats.grammar_cache_hits = g.hits;
  stats.grammar_cache_bytes = g.cached_bytes;
  stats.grammar_compile_seconds = g.compile_seconds;
  stats.preemptions = scheduler->n_preemptions();
}

void Engine::Impl::run_loop() {
  std::deque<std::unique_ptr<Request>> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(signal->mutex);
      for (;;) {
        batch.swap(incoming);
        const bool cancels = std::any_of(active.begin(), active.end(), [&](const auto& r) {
          return cancel_all || r->channel->cancelled();
        });
        if (!batch.empty() || !scheduler->idle() || cancels) break;
        loop_idle = true;
        idle_cv.notify_all();
        if (stop_loop) return;
        signal->pending = false;
        signal->cv.wait(lock, [&] { return signal->pending || stop_loop; });
      }
      loop_idle = false;
    }
    take_incoming(batch);
    process_cancellations();
    drop_finished();
    try {
      step();
    } catch (const std::exception& e) {
      // An internal failure of the step: every request in flight fails, the loop goes on.
      for (auto& r : active) fail_request(*r, fmt::format("engine step failed: {}", e.what()));
    }
    drop_finished();
    publish_stats();
  }
}

Engine::Engine(std::shared_ptr<const Model> model, EngineOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), options)) {
  impl_->loop = std::thread([impl = impl_.get()] { impl->run_loop(); });
}

Engine::~Engine() {
  shutdown(true);
  {
    std::lock_guard<std::mutex> lock(impl_->signal->mutex);
    impl_->stop_loop = true;
    impl_->signal->pending = true;
  }
  impl_->signal->cv.notify_all();
  if (impl_->loop.joinable()) impl_->loop.join();
}

CompiledConstraint Engine::compile(const pse::Grammar& grammar, const std::vector<std::string>& special_tokens,
                                   const std::function<bool()>& abandoned) {
  return impl_->grammars->compile_typed(grammar, special_tokens, abandoned);
}

// Attaching places the adapter's pairs where the backend reads them (device memory on a GPU) at once, so
// that the first request naming it does not wait for the copy; detaching drops that copy.
LoraInfo Engine::attach_lora(const std::string& name, const std::filesystem::path& path) {
  LoraInfo info = impl_->lora_registry->attach(name, path);
  if (auto adapter = impl_->lora_registry->find(name)) impl_->runner->backend().prepare_lora(*adapter);
  return info;
}

LoraInfo Engine::attach_lora(const std::string& name, std::shared_ptr<LoraAdapter> adapter) {
  LoraInfo info = impl_->lora_registry->attach(name, std::move(adapter));
  if (auto placed = impl_->lora_registry->find(name)) impl_->runner->backend().prepare_lora(*placed);
  return info;
}

void Engine::detach_lora(const std::string& name) {
  std::shared_ptr<const LoraAdapter> adapter = impl_->lora_registry->find(name);
  impl_->lora_registry->detach(name);
  if (adapter) impl_->runner->backend().release_lora(*adapter);
}

std::vector<LoraInfo> Engine::loras() const { return impl_->lora_registry->list(); }

const Model& Engine::model() const { return *impl_->model; }

const EngineOptions& Engine::options() const { return impl_->options; }
const DeviceChoice& Engine::device() const { return impl_->device; }

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->stats_mutex);
    s = impl_->stats;
  }
  // Read now, not as the loop last published them: compiles run on callers' threads (submit, compile),
  // also while the loop is idle.
  const detail::GrammarCacheStats g = impl_->grammars->stats();
  s.grammar_compiles = g.compiles;
  s.grammar_cache_hits = g.hits;
  s.grammar_compile_seconds = g.compile_seconds;
  return s;
}

void Engine::shutdown(bool cancel_running) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.signal->mutex);
  m.accepting = false;
  if (cancel_running) m.cancel_all = true;
  m.signal->pending = true;
  m.signal->cv.notify_all();
  m.idle_cv.wait(lock, [&] { return m.loop_idle && m.incoming.empty(); });
}

}  // namespace pie
