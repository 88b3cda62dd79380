#include "server/generation.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>
#include <random>

#include "server/api_error.h"
#include "server/token_detail.h"

namespace pie::server {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::int64_t nanoseconds(double seconds) { return static_cast<std::int64_t>(seconds * 1e9); }

// Ollama's tool calls: arguments as an object, no ids.
Json ollama_tool_calls(const std::vector<ToolCall>& calls) {
  Json out = Json::array();
  for (const ToolCall& call : calls) {
    Json arguments = Json::parse(call.arguments, nullptr, false);
    if (arguments.is_discarded()) arguments = call.arguments;
    out.push_back(Json{{"function", Json{{"name", call.name}, {"arguments", std::move(arguments)}}}});
  }
  return out;
}

}  // namespace

std::string make_response_id(const char* prefix) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

Generation::Generation(const ServedModel& model, PreparedRequest prepared, GenerationSetup setup)
    : model_(model), prepared_(std::move(prepared)), setup_(std::move(setup)),
      start_(std::chrono::steady_clock::now()) {
  for (std::int32_t i = 0; i < prepared_.request.n; ++i) choices_.emplace_back(i, prepared_);
  if (setup_.token_detail) token_detail_.assign(choices_.size(), Json::array());
  prepared_.request.id = setup_.header.id;
}

void Generation::submit() {
  GenerateRequest request = prepared_.request;  // keep the prompt for usage before the engine reports it
  try {
    stream_ = model_.engine().submit(std::move(request));
  } catch (...) {
    ApiError error = api_error_from_exception(std::current_exception(), prepared_.constraint_param);
    if (error.status() == 499) cancelled_ = true;  // the client went away while the grammar compiled
    // A chat's prompt is its messages: name the field the client sent.
    bool chat = setup_.api == Api::openai_chat || setup_.api == Api::ollama_chat;
    if (chat && error.param() == "prompt") {
      throw ApiError(error.status(), error.type(), error.what(), "messages", error.code());
    }
    throw error;
  }
  usage_.prompt_tokens = static_cast<std::int32_t>(prepared_.request.prompt.size());
}

void Generation::cancel() {
  if (done_) return;
  cancelled_ = true;
  if (stream_) stream_->cancel();
}

void Generation::cancel_for_shutdown() {
  shutting_down_ = true;
  cancel();
}

std::int64_t Generation::completion_tokens() const {
  return done_ ? usage_.completion_tokens : tokens_seen_;
}

double Generation::ttft_seconds() const { return first_token_ ? seconds_between(start_, *first_token_) : -1; }

std::string Generation::created_at() const {
  // RFC 3339 in UTC, as Ollama writes it.
  auto now = std::chrono::system_clock::now();
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:06}Z", tm, micros);
}

std::string Generation::error_event(const std::string& message, const std::string& code) const {
  if (setup_.api == Api::ollama_chat || setup_.api == Api::ollama_generate) {
    return dump_json(Json{{"error", message}}) + "\n";
  }
  return sse_event(error_body(ApiError(500, "server_error", message, {}, code)));
}

std::string Generation::next_chunk(std::chrono::milliseconds wait) {
  std::string out;
  if (!started_) {
    started_ = true;
    if (setup_.api == Api::openai_chat) {
      // The first chunk of each choice carries the role, as OpenAI's do.
      for (const ChoiceOutput& choice : choices_) {
        out += sse_event(chat_chunk_json(setup_.header, choice.index(),
                                         Json{{"role", "assistant"}, {"content", ""}}, std::nullopt, nullptr,
                                         setup_.include_usage));
      }
    } else if (setup_.api == Api::openai_completion && setup_.echo) {
      // With prompt logprobs the echo waits for them (the stream's first event).
      if (prepared_.request.prompt_logprobs) {
        echo_pending_ = true;
      } else {
        out += echo_chunks();
      }
    }
    if (!out.empty()) return out;
  }
  if (done_) return out;
  std::optional<Event> event = stream_->next_for(wait);
  // Drain what is ready, so that a fast stream is sent in few writes.
  while (event) {
    out += on_event(*event);
    if (done_) break;
    event = stream_->next_for(std::chrono::milliseconds(0));
  }
  if (!event && !stream_->timed_out() && !done_) {
    // The stream ended without a done event: only when the engine went away.
    done_ = true;
    out += error_event("the engine ended the request without finishing it");
  }
  return out;
}

std::string Generation::echo_chunks() const {
  std::string out;
  const Json logprobs = prepared_.request.prompt_logprobs
                            ? prompt_logprobs_json(prepared_.request.prompt, prompt_logprobs_, *model_.model().tokenizer)
                            : Json();
  for (const ChoiceOutput& choice : choices_) {
    out += sse_event(completion_chunk_json(setup_.header, choice.index(), prepared_.prompt_text, std::nullopt,
                                           logprobs, setup_.include_usage));
  }
  return out;
}

std::string Generation::on_event(const Event& event) {
  std::string out;
  if (!event.prompt_logprobs.empty()) prompt_logprobs_ = event.prompt_logprobs;
  if (echo_pending_ && setup_.stream) {
    // The prompt logprobs come first, if at all (a one-token prompt has none): the echo goes out now.
    echo_pending_ = false;
    out += echo_chunks();
  }
  if (!event.tokens.empty() && !first_token_) first_token_ = event.time;
  tokens_seen_ += static_cast<std::int64_t>(event.tokens.size());
  if (event.done) {
    usage_ = event.usage;
    if (usage_.prompt_tokens == 0) usage_.prompt_tokens = static_cast<std::int32_t>(prepared_.request.prompt.size());
  }
  bool per_choice = event.index >= 0 && event.index < static_cast<std::int32_t>(choices_.size()) &&
                    (!event.tokens.empty() || !event.text.empty() || event.finish != FinishReason::none);
  if (per_choice) {
    ChoiceOutput& choice = choices_[static_cast<std::size_t>(event.index)];
    StreamDelta delta = choice.push(event);
    const tokenizers::Tokenizer& tok = *model_.model().tokenizer;
    Json detail = setup_.token_detail ? token_detail_json(event, tok) : Json::array();
    if (setup_.token_detail) {
      for (const Json& d : detail) token_detail_[static_cast<std::size_t>(event.index)].push_back(d);
    }
    // A chunk's detail rides in its choice, beside the delta (a chunk is sent for it alone if need be).
    auto with_detail = [&detail](Json chunk) {
      if (!detail.empty()) chunk["choices"][0]["token_detail"] = detail;
      return chunk;
    };
    if (setup_.stream) {
      bool logprobs = prepared_.request.sampling.logprobs && !event.logprobs.empty();
      switch (setup_.api) {
        case Api::openai_chat:
          if (!delta.empty() || logprobs || !detail.empty()) {
            out += sse_event(with_detail(chat_chunk_json(setup_.header, choice.index(), chat_delta_json(delta),
                                                         std::nullopt,
                                                         logprobs ? chat_logprobs_json(event.logprobs, tok) : Json(),
                                                         setup_.include_usage)));
          }
          break;
        case Api::openai_completion:
          if (!event.text.empty() || logprobs || !detail.empty()) {
            std::size_t offset = choice.text().size() - event.text.size() +
                                 (setup_.echo ? prepared_.prompt_text.size() : 0);
            out += sse_event(with_detail(completion_chunk_json(
                setup_.header, choice.index(), event.text, std::nullopt,
                logprobs ? completion_logprobs_json(event.logprobs, tok, offset) : Json(), setup_.include_usage)));
          }
          break;
        case Api::ollama_chat:
          out += ollama_chat_line(delta);
          break;
        case Api::ollama_generate:
          if (!event.text.empty()) {
            out += dump_json(Json{{"model", setup_.header.model}, {"created_at", created_at()},
                                  {"response", event.text}, {"done", false}}) + "\n";
          }
          break;
      }
    }
    if (event.finish != FinishReason::none) out += choice_finished(choice);
  }
  if (event.done) {
    done_ = true;
    out += on_done();
  }
  return out;
}

std::string Generation::choice_finished(ChoiceOutput& choice) {
  StreamDelta rest = choice.finish();
  if (choice.finish_reason() == FinishReason::error && error_.empty()) {
    error_ = choice.error().empty() ? "generation failed" : choice.error();
  }
  // Cut short by the server's shutdown: the answer must not look complete.
  const bool cut = choice.finish_reason() == FinishReason::cancelled && shutting_down_;
  if (cut && error_.empty()) {
    error_ = fmt::format("the server is shutting down: the answer was cut short after {} tokens",
                         choice.tokens().size());
  }
  if (!setup_.stream) return {};
  std::string out;
  if (choice.finish_reason() == FinishReason::error) return error_event(error_);
  if (cut) return error_event(error_, "server_shutting_down");
  switch (setup_.api) {
    case Api::openai_chat:
      if (!rest.empty()) {
        out += sse_event(chat_chunk_json(setup_.header, choice.index(), chat_delta_json(rest), std::nullopt,
                                         nullptr, setup_.include_usage));
      }
      out += sse_event(chat_chunk_json(setup_.header, choice.index(), Json::object(), choice.finish_reason_name(),
                                       nullptr, setup_.include_usage));
      break;
    case Api::openai_completion:
      out += sse_event(completion_chunk_json(setup_.header, choice.index(), "", choice.finish_reason_name(),
                                             nullptr, setup_.include_usage));
      break;
    case Api::ollama_chat:
      out += ollama_chat_line(rest);
      break;
    case Api::ollama_generate:
      break;
  }
  return out;
}

std::string Generation::ollama_chat_line(const StreamDelta& delta) const {
  if (delta.content.empty() && delta.reasoning_content.empty()) return {};
  Json message{{"role", "assistant"}, {"content", delta.content}};
  if (!delta.reasoning_content.empty()) message["thinking"] = delta.reasoning_content;
  return dump_json(Json{{"model", setup_.header.model}, {"created_at", created_at()}, {"message", std::move(message)},
                        {"done", false}}) +
         "\n";
}

std::string Generation::ollama_final(const ChoiceOutput& choice) const {
  double total = seconds_between(start_, std::chrono::steady_clock::now());
  double ttft = ttft_seconds() < 0 ? total : ttft_seconds();
  Json out;
  out["model"] = setup_.header.model;
  out["created_at"] = created_at();
  if (setup_.api == Api::ollama_chat) {
    Json message{{"role", "assistant"}, {"content", setup_.stream ? "" : choice.parsed().content}};
    if (!setup_.stream && !choice.parsed().reasoning_content.empty()) {
      message["thinking"] = choice.parsed().reasoning_content;
    }
    // Calls are whole only at the end, so the streamed answer carries them in its last line.
    if (!choice.parsed().tool_calls.empty()) message["tool_calls"] = ollama_tool_calls(choice.parsed().tool_calls);
    out["message"] = std::move(message);
  } else {
    out["response"] = setup_.stream ? "" : choice.text();
  }
  out["done"] = true;
  out["done_reason"] = choice.finish_reason() == FinishReason::length ? "length" : "stop";
  out["total_duration"] = nanoseconds(total);
  out["load_duration"] = 0;
  out["prompt_eval_count"] = usage_.prompt_tokens;
  out["prompt_eval_duration"] = nanoseconds(ttft);
  out["eval_count"] = usage_.completion_tokens;
  out["eval_duration"] = nanoseconds(total - ttft);
  return dump_json(out);
}

std::string Generation::on_done() {
  if (!setup_.stream) return {};
  std::string out;
  switch (setup_.api) {
    case Api::openai_chat:
    case Api::openai_completion:
      if (setup_.include_usage) {
        out += sse_event(usage_chunk_json(
            setup_.header, setup_.api == Api::openai_chat ? "chat.completion.chunk" : "text_completion", usage_));
      }
      out += kSseDone;
      break;
    case Api::ollama_chat:
    case Api::ollama_generate:
      if (error_.empty()) out += ollama_final(choices_.front()) + "\n";
      break;
  }
  return out;
}

std::string Generation::response_body(const std::function<bool()>& client_gone) {
  while (!done_) {
    // A client that went away is noticed within a tenth of a second; the engine then ends the request.
    std::optional<Event> event = stream_->next_for(std::chrono::milliseconds(100));
    if (client_gone && !cancelled_ && client_gone()) cancel();  // (cheap: client_gone polls at most every 20 ms)
    if (!event && stream_->timed_out()) continue;
    if (!event) {
      done_ = true;
      if (error_.empty()) error_ = "the engine ended the request without finishing it";
      break;
    }
    on_event(*event);
  }
  if (shutting_down_ && !error_.empty()) throw ApiError(503, "server_error", error_, {}, "server_shutting_down");
  if (cancelled_) {
    throw ApiError(499, "invalid_request_error", "the client closed the connection", {}, "client_closed_request");
  }
  if (!error_.empty()) throw ApiError(500, "server_error", error_);
  const tokenizers::Tokenizer& tok = *model_.model().tokenizer;
  bool logprobs = prepared_.request.sampling.logprobs;
  Json body;
  switch (setup_.api) {
    case Api::openai_chat: {
      body["id"] = setup_.header.id;
      body["object"] = "chat.completion";
      body["created"] = setup_.header.created;
      body["model"] = setup_.header.model;
      Json choices = Json::array();
      for (const ChoiceOutput& c : choices_) {
        choices.push_back(Json{{"index", c.index()},
                               {"message", chat_message_json(c.parsed())},
                               {"logprobs", logprobs ? chat_logprobs_json(c.logprobs(), tok) : Json()},
                               {"finish_reason", c.finish_reason_name()}});
        if (setup_.token_detail) choices.back()["token_detail"] = token_detail_[static_cast<std::size_t>(c.index())];
      }
      body["choices"] = std::move(choices);
      body["usage"] = usage_json(usage_);
      body["system_fingerprint"] = setup_.header.system_fingerprint;
      break;
    }
    case Api::openai_completion: {
      body["id"] = setup_.header.id;
      body["object"] = "text_completion";
      body["created"] = setup_.header.created;
      body["model"] = setup_.header.model;
      Json choices = Json::array();
      for (const ChoiceOutput& c : choices_) {
        std::string prefix = setup_.echo ? prepared_.prompt_text : std::string();
        Json choice_logprobs;
        if (logprobs) {
          choice_logprobs = completion_logprobs_json(c.logprobs(), tok, prefix.size());
          if (prepared_.request.prompt_logprobs) {
            choice_logprobs = concat_completion_logprobs(
                prompt_logprobs_json(prepared_.request.prompt, prompt_logprobs_, tok), choice_logprobs);
          }
        }
        choices.push_back(Json{{"index", c.index()},
                               {"text", prefix + c.text()},
                               {"logprobs", std::move(choice_logprobs)},
                               {"finish_reason", c.finish_reason_name()}});
        if (setup_.token_detail) choices.back()["token_detail"] = token_detail_[static_cast<std::size_t>(c.index())];
      }
      body["choices"] = std::move(choices);
      body["usage"] = usage_json(usage_);
      body["system_fingerprint"] = setup_.header.system_fingerprint;
      break;
    }
    case Api::ollama_chat:
    case Api::ollama_generate:
      return ollama_final(choices_.front());
  }
  return dump_json(body);
}

}  // namespace pie::server
