// libFuzzer target for the server's request layer, from a request body to an engine request and back: the
// first byte picks the route (OpenAI chat or completions, Ollama chat or generate); the rest is the body.
// It is parsed and validated as the route does (parse_body, the route's parser), prepared against the
// embedded random-weight model (chat template, tokenization with the messages' text kept plain, the
// constraint's or the tools' grammar) and submitted to an engine over that model, which compiles the
// grammar and generates at most two tokens, formatted as the route answers (streamed or not, as the body
// asks). Any ApiError below 500 is a correct answer; a 5xx, another exception, a crash, a hang or a leak
// is a bug.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "pie/engine.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/generation.h"
#include "server/served_model.h"

namespace {

using namespace pie::server;

ServedModel& served() {
  static ServedModel* model = [] {
    pie::EngineOptions options;
    options.n_threads = 1;
    options.max_running = 2;
    options.context_length = 512;
    options.grammar_compile_ms = 2000;  // a hostile grammar stops well inside libFuzzer's -timeout
    options.grammar_cache_bytes = std::int64_t{64} << 20;
    auto engine = std::make_shared<pie::Engine>(pie::random_model(), options);
    return new ServedModel(engine, "fuzz");  // (lives as long as the process)
  }();
  return *model;
}

void run(std::uint8_t selector, const std::string& text) {
  ServedModel& model = served();
  const Json body = parse_body(text);
  PreparedRequest prepared;
  GenerationSetup setup;
  setup.header.id = "fuzz";
  setup.header.model = "fuzz";
  switch (selector % 4) {
    case 0: {
      ChatRequest r = parse_openai_chat(body);
      setup = {Api::openai_chat, r.params.stream, r.params.include_usage, false, setup.header};
      prepared = prepare_chat(model, r);
      break;
    }
    case 1: {
      CompletionRequest r = parse_openai_completion(body);
      setup = {Api::openai_completion, r.params.stream, r.params.include_usage, r.echo, setup.header};
      prepared = prepare_completion(model, r);
      break;
    }
    case 2: {
      ChatRequest r = parse_ollama_chat(body);
      if (r.load_only) return;
      setup = {Api::ollama_chat, r.params.stream, false, false, setup.header};
      prepared = prepare_chat(model, r);
      break;
    }
    default: {
      OllamaGenerate r = parse_ollama_generate(body);
      if (r.load_only) return;
      const GenerationParams& p = r.chat ? r.chat->params : r.completion.params;
      setup = {Api::ollama_generate, p.stream, false, false, setup.header};
      prepared = r.chat ? prepare_chat(model, *r.chat) : prepare_completion(model, r.completion);
      break;
    }
  }
  // Two tokens at most: the formatting of each event is exercised without the cost of a long answer.
  prepared.request.max_tokens = std::min(prepared.request.max_tokens, 2);
  if (prepared.request.n > 2) prepared.request.n = 2;
  Generation generation(model, std::move(prepared), setup);
  generation.submit();
  if (setup.stream) {
    for (int i = 0; i < 10000 && !generation.finished(); ++i) {
      (void)generation.next_chunk(std::chrono::milliseconds(50));
    }
    if (!generation.finished()) __builtin_trap();  // a stream that never ends
  } else {
    (void)generation.response_body();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  try {
    run(data[0], std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  } catch (...) {
    const ApiError error = api_error_from_exception(std::current_exception());
    if (error.status() >= 500) __builtin_trap();  // bad input is always the client's error
  }
  return 0;
}
