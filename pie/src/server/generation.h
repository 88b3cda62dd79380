// One generation request between the engine and an HTTP response: submits the prepared request, turns the
// engine's events into the bytes of the chosen API (OpenAI chat or text completion, Ollama chat or
// generate; streamed as server-sent events or NDJSON, or one JSON body), and keeps what the request log
// and the metrics need (tokens, time to first token).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/choice_output.h"
#include "server/openai_format.h"
#include "server/served_model.h"

namespace pie::server {

enum class Api : std::uint8_t { openai_chat, openai_completion, ollama_chat, ollama_generate };

struct GenerationSetup {
  Api api = Api::openai_chat;
  bool stream = false;
  bool include_usage = false;  // OpenAI streams: a last chunk with the usage
  bool echo = false;           // completions: the prompt before the output
  ResponseHeader header;       // id, created, model
  bool token_detail = false;   // OpenAI routes: each choice's token_detail (server/token_detail.h)
};

class Generation {
 public:
  Generation(const ServedModel& model, PreparedRequest prepared, GenerationSetup setup);

  // Queues the request on the engine. Throws ApiError (400 for a request the engine rejects, 503 when it
  // is at capacity).
  void submit();

  // Streaming: waits up to `wait` for events and returns the bytes to send now (possibly empty).
  std::string next_chunk(std::chrono::milliseconds wait);
  bool finished() const { return done_; }

  // Not streaming: waits for the end and returns the response body. `client_gone` is polled meanwhile:
  // true cancels the request. Throws ApiError: 500 when a sample failed, 499 when the client went away,
  // 503 when the server's shutdown cut the request short.
  std::string response_body(const std::function<bool()>& client_gone = {});

  // The client went away: frees the engine sequence(s). Thread-safe.
  void cancel();
  // The server is shutting down: as cancel(), and the answer ends with an error that says so (a stream's
  // last event, or a 503) rather than looking complete. Thread-safe.
  void cancel_for_shutdown();
  bool cancelled() const { return cancelled_; }

  const std::string& id() const { return setup_.header.id; }
  const std::shared_ptr<RequestStream>& stream() const { return stream_; }
  const Usage& usage() const { return usage_; }
  std::int64_t completion_tokens() const;  // counted from the events (usage once done)
  double ttft_seconds() const;             // < 0 before the first token
  std::chrono::steady_clock::time_point start_time() const { return start_; }

 private:
  std::string on_event(const Event& event);
  std::string echo_chunks() const;  // the echoed prompt, one chunk per choice (with its logprobs if asked)
  std::string choice_finished(ChoiceOutput& choice);
  std::string on_done();
  std::string error_event(const std::string& message, const std::string& code = {}) const;
  // A streamed /api/chat line of the delta's text and thinking (empty when it has neither).
  std::string ollama_chat_line(const StreamDelta& delta) const;
  std::string ollama_final(const ChoiceOutput& choice) const;
  std::string created_at() const;

  const ServedModel& model_;
  PreparedRequest prepared_;
  GenerationSetup setup_;
  std::shared_ptr<RequestStream> stream_;
  std::vector<ChoiceOutput> choices_;
  std::vector<Json> token_detail_;             // per choice, with setup_.token_detail
  std::vector<SampledToken> prompt_logprobs_;  // Event::prompt_logprobs, once received
  bool echo_pending_ = false;                  // streaming echo held back for the prompt logprobs
  Usage usage_;
  std::int64_t tokens_seen_ = 0;
  bool started_ = false;
  std::atomic<bool> done_{false};
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> shutting_down_{false};
  std::string error_;
  std::chrono::steady_clock::time_point start_;
  std::optional<std::chrono::steady_clock::time_point> first_token_;
};

// "chatcmpl-" + 24 alphanumerics (fresh randomness).
std::string make_response_id(const char* prefix);

}  // namespace pie::server
