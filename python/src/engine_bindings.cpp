// Engine: a model opened as `orchard run -m` opens it, the engine over it, and one-shot completions
// through the server's request path (pie::Completions). CompletionStream: one request's deltas; next()
// blocks without the GIL, so other threads and asyncio's executor run meanwhile.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "pie/backend.h"
#include "pie/completions.h"
#include "pie/engine.h"
#include "pie/grammar_vocabulary.h"
#include "pie/model_store.h"
#include "vocabulary_bindings.h"

namespace orchard::python {

namespace {

using nb::gil_scoped_release;
using Json = nlohmann::ordered_json;

struct PyEngine {
  std::shared_ptr<pie::Engine> engine;
  std::unique_ptr<pie::Completions> completions;
  std::string store_name;
};

struct PyStream {
  std::unique_ptr<pie::CompletionStream> stream;
};

nb::object delta_object(const pie::StreamDelta& d) {
  nb::list calls;
  for (const pie::ToolCallDelta& c : d.tool_calls) {
    nb::dict call;
    call["index"] = c.index;
    call["id"] = c.id;
    call["name"] = c.name;
    call["arguments"] = c.arguments;
    calls.append(call);
  }
  return nb::make_tuple(d.content, d.reasoning_content, calls);
}

nb::dict reply_dict(const pie::ChatReply& r) {
  nb::dict d;
  d["content"] = r.content;
  d["reasoning"] = r.reasoning;
  d["tool_calls"] = r.tool_calls.dump();  // OpenAI's shape, as JSON text (the Python side parses it)
  d["finish_reason"] = r.finish_reason;
  d["error"] = r.error;
  nb::dict usage;
  usage["prompt_tokens"] = r.usage.prompt_tokens;
  usage["cached_prompt_tokens"] = r.usage.cached_prompt_tokens;
  usage["completion_tokens"] = r.usage.completion_tokens;
  d["usage"] = usage;
  return d;
}

nb::dict lora_dict(const pie::LoraInfo& info) {
  nb::dict d;
  d["name"] = info.name;
  d["path"] = info.path.string();
  d["rank"] = info.rank;
  d["bytes"] = info.bytes;
  d["resident"] = info.resident;
  d["in_use"] = info.in_use;
  return d;
}

Json parse_body(const std::string& text) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw nb::value_error((std::string("[completions] the request is not JSON: ") + e.what()).c_str());
  }
}

}  // namespace

void bind_engine(nb::module_& m) {
  nb::class_<PyStream>(m, "CompletionStream", "One request's answer as it comes; dropping it cancels the request.")
      .def(
          "next",
          [](PyStream& s, std::optional<double> timeout_s) -> nb::object {
            std::optional<pie::StreamDelta> d;
            bool timed_out = false;
            {
              gil_scoped_release release;
              if (timeout_s) {
                d = s.stream->next_for(std::chrono::milliseconds(static_cast<std::int64_t>(*timeout_s * 1000)));
                timed_out = s.stream->timed_out();
              } else {
                d = s.stream->next();
              }
            }
            if (d) return delta_object(*d);
            return timed_out ? nb::object(nb::str("timeout")) : nb::none();
          },
          nb::arg("timeout_s") = nb::none(),
          "(content, reasoning, tool_call_deltas) as it becomes certain; None once the answer is complete; the string "
          "'timeout' when timeout_s passed first.")
      .def("cancel", [](PyStream& s) { s.stream->cancel(); })
      .def("reply", [](const PyStream& s) { return reply_dict(s.stream->reply()); },
           "The whole answer (final once next() returned None).");

  nb::class_<PyEngine>(m, "Engine", "A model and the engine that runs it (continuous batching).")
      .def(
          "__init__",
          [](PyEngine* self, std::optional<std::string> model, std::int32_t threads, std::int32_t max_running,
             std::int32_t max_batch_tokens, std::int32_t context_length, std::int64_t kv_cache_bytes,
             const std::string& device) {
            pie::EngineOptions o;
            o.device = pie::parse_device_request(device);
            o.n_threads = threads;
            o.max_running = max_running;
            o.max_batch_tokens = max_batch_tokens;
            o.context_length = context_length;
            o.kv_cache_bytes = kv_cache_bytes;
            PyEngine e;
            {
              gil_scoped_release release;
              pie::OpenedModel opened = pie::open_model(model);
              e.engine = std::make_shared<pie::Engine>(opened.model, o);
              e.completions = std::make_unique<pie::Completions>(e.engine);
              e.store_name = opened.store_name;
            }
            new (self) PyEngine(std::move(e));
          },
          nb::arg("model") = nb::none(), nb::arg("threads") = 0, nb::arg("max_running") = 16,
          nb::arg("max_batch_tokens") = 512, nb::arg("context_length") = 0, nb::arg("kv_cache_bytes") = 0,
          nb::arg("device") = "auto",
          "model: a .gguf file, a Hugging Face folder, a llama2.c checkpoint, a stored model's name, "
          "'orchard-random', or None for the default model. Raises ModelNotFoundError, ModelError.")
      .def(
          "start",
          [](const PyEngine& e, const std::string& body_text) {
            Json body = parse_body(body_text);
            gil_scoped_release release;
            return PyStream{e.completions->start(body)};
          },
          nb::arg("body"),
          "Submits an OpenAI request body (JSON text: a chat body with 'messages', or a completion body with "
          "'prompt'). Raises RequestError naming the field at fault, CapacityError.")
      .def_prop_ro("tokenizer", [](const PyEngine& e) { return PyTokenizer{e.engine->model().tokenizer}; })
      .def(
          "vocabulary",
          [](const PyEngine& e) {
            gil_scoped_release release;
            const pie::Model& model = e.engine->model();
            return PyVocabulary{pie::grammar_vocabulary(*model.tokenizer, static_cast<std::size_t>(model.config.n_vocab))};
          },
          "The model's vocabulary as its grammars are compiled (logits rows: the model's).")
      .def_prop_ro("name", [](const PyEngine& e) { return e.engine->model().name; })
      .def("device",
           [](const PyEngine& e) {
             const pie::DeviceChoice& d = e.engine->device();
             return nb::make_tuple(d.device == tensor::Device::cuda ? "cuda" : "cpu", d.reason);
           })
      .def_prop_ro("store_name", [](const PyEngine& e) { return e.store_name; })
      .def_prop_ro("path", [](const PyEngine& e) { return e.engine->model().path.string(); })
      .def_prop_ro("n_vocab", [](const PyEngine& e) { return e.engine->model().config.n_vocab; })
      .def("stats",
           [](const PyEngine& e) {
             const pie::EngineStats s = e.engine->stats();
             nb::dict d;
             d["requests"] = s.requests;
             d["requests_failed"] = s.requests_failed;
             d["requests_running"] = s.requests_running;
             d["requests_queued"] = s.requests_queued;
             d["prompt_tokens"] = s.prompt_tokens;
             d["generated_tokens"] = s.generated_tokens;
             d["forced_tokens"] = s.forced_tokens;
             d["steps"] = s.steps;
             d["grammar_compiles"] = s.grammar_compiles;
             d["grammar_cache_hits"] = s.grammar_cache_hits;
             d["mask_seconds"] = s.mask_seconds;
             d["forward_seconds"] = s.forward_seconds;
             return d;
           })
      .def(
          "attach_lora",
          [](PyEngine& e, const std::string& name, const std::string& path) {
            pie::LoraInfo info;
            {
              gil_scoped_release release;
              info = e.engine->attach_lora(name, path);
            }
            return lora_dict(info);
          },
          nb::arg("name"), nb::arg("path"),
          "Attaches a LoRA adapter (a PEFT folder or a GGUF adapter) under `name`, the base untouched. Raises "
          "ModelError when it cannot be read or does not fit the model, RequestError for a bad or taken name.")
      .def(
          "detach_lora", [](PyEngine& e, const std::string& name) { e.engine->detach_lora(name); }, nb::arg("name"),
          nb::call_guard<gil_scoped_release>(),
          "Detaches an adapter: new requests naming it are refused, running ones finish with it. Raises "
          "RequestError when none has that name.")
      .def("loras",
           [](const PyEngine& e) {
             nb::list out;
             for (const pie::LoraInfo& info : e.engine->loras()) out.append(lora_dict(info));
             return out;
           })
      .def(
          "shutdown",
          [](PyEngine& e, bool cancel_running) { e.engine->shutdown(cancel_running); }, nb::arg("cancel_running") = true,
          nb::call_guard<gil_scoped_release>(), "Stops taking requests; returns when the engine is idle.");
}

}  // namespace orchard::python
