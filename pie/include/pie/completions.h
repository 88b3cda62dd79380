// One-shot completions outside HTTP, through exactly the server's request path: an OpenAI request body in
// (a chat body with "messages", or a text-completion body with "prompt"), the answer's deltas and the
// whole reply out. The chat template, BOS rule, constraints (response_format, grammar, lark, regex) and
// tools (the call grammar, the call parser) are the server's, so a body gives the same tokens here and
// over HTTP. Unlike ChatSession, nothing is remembered between calls: many may run at once, each its own
// engine request (batched with the others by the engine).
//
//   pie::Completions completions(engine);
//   auto stream = completions.start({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
//   while (auto delta = stream->next()) std::cout << delta->content;
//   const pie::ChatReply& reply = stream->reply();
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "pie/chat_session.h"
#include "pie/engine.h"
#include "pie/tool_calls.h"

namespace pie {

// One request's answer as it comes. Thread-safe; dropping it cancels the request.
class CompletionStream {
 public:
  virtual ~CompletionStream() = default;
  // Blocks until more of the answer is certain and returns it (content, reasoning, tool-call pieces;
  // never empty); nullopt once the answer is complete, and from then on reply() is final.
  virtual std::optional<StreamDelta> next() = 0;
  // As next(), giving up after `timeout`: nullopt with timed_out() true.
  virtual std::optional<StreamDelta> next_for(std::chrono::milliseconds timeout) = 0;
  virtual bool timed_out() const = 0;
  // Ends the request early (finish_reason "cancelled").
  virtual void cancel() = 0;
  // The whole answer: valid once next() returned nullopt (before: what has come so far).
  virtual const ChatReply& reply() const = 0;
};

class Completions {
 public:
  // Throws pie::Error when the model's chat template does not parse.
  explicit Completions(std::shared_ptr<Engine> engine);
  ~Completions();
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  // body: an OpenAI /v1/chat/completions body when it has "messages", else a /v1/completions body
  // ("prompt": text or token ids); "n" must be 1 and "stream" is ignored (every answer streams); "lora":
  // [{"id": NAME or index, "scale": S}] runs it with adapters attached to the engine (Engine::attach_lora),
  // as the server reads that field. Validates
  // and submits; throws RequestError naming the field at fault for a request the server answers with a
  // 4xx, CapacityError when the engine's queue is full. Thread-safe.
  std::unique_ptr<CompletionStream> start(const nlohmann::ordered_json& body) const;

  const Engine& engine() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pie
