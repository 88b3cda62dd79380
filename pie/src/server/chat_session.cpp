// ChatSession: a conversation driven through the server's own request path (parse_openai_chat,
// prepare_chat, ChoiceOutput), without HTTP.
#include "pie/chat_session.h"

#include <fmt/format.h>

#include <mutex>

#include "server/api_error.h"
#include "server/api_request.h"
#include "server/choice_output.h"
#include "server/lora_routes.h"
#include "server/served_model.h"

namespace pie {

using Json = nlohmann::ordered_json;

struct ChatSession::Impl {
  explicit Impl(std::shared_ptr<Engine> e) : engine(std::move(e)), served(engine, "chat") {}
  std::shared_ptr<Engine> engine;
  server::ServedModel served;
  Json turns = Json::array();  // user and assistant messages, oldest first
  std::mutex mutex;            // guards running (cancel() comes from another thread)
  std::shared_ptr<RequestStream> running;
};

ChatSession::ChatSession(std::shared_ptr<Engine> engine) : impl_(std::make_unique<Impl>(std::move(engine))) {}
ChatSession::~ChatSession() = default;

void ChatSession::set_system(std::string text) { system_ = std::move(text); }

void ChatSession::reset() { impl_->turns = Json::array(); }

Json ChatSession::messages() const {
  Json out = Json::array();
  if (!system_.empty()) out.push_back(Json{{"role", "system"}, {"content", system_}});
  for (const Json& m : impl_->turns) out.push_back(m);
  return out;
}

void ChatSession::cancel() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->running) impl_->running->cancel();
}

ChatReply ChatSession::send(const std::string& user_text, const Json& fields,
                            const std::function<void(std::string_view)>& on_text) {
  if (!fields.is_object()) throw RequestError("[chat] the request fields must be a JSON object");
  for (const char* owned : {"messages", "model", "n", "stream"}) {
    if (fields.contains(owned)) throw RequestError(fmt::format("[chat] '{}' is the session's to set", owned), owned);
  }
  Json user{{"role", "user"}, {"content", user_text}};
  Json body = fields;
  body["messages"] = messages();
  body["messages"].push_back(user);

  server::PreparedRequest prepared;
  std::shared_ptr<RequestStream> stream;
  try {
    prepared = server::prepare_chat(impl_->served, server::parse_openai_chat(body));
    prepared.request.loras = server::LoraRoutes(*impl_->engine).select(body, "");
    stream = impl_->engine->submit(prepared.request);
  } catch (const server::ApiError& e) {
    throw RequestError(e.what(), e.param());
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->running = stream;
  }
  server::ChoiceOutput choice(0, prepared);
  auto emit = [&](const StreamDelta& delta) {
    if (on_text && !delta.content.empty()) on_text(delta.content);
  };
  ChatReply reply;
  while (auto event = stream->next()) {
    if (event->done) {
      reply.usage = event->usage;
      break;
    }
    if (!event->tokens.empty() && !reply.first_token_time) reply.first_token_time = event->time;
    emit(choice.push(*event));
    if (event->finish != FinishReason::none) emit(choice.finish());
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->running.reset();
  }

  const ParsedOutput& parsed = choice.parsed();
  reply.content = parsed.content;
  reply.reasoning = parsed.reasoning_content;
  for (const ToolCall& call : parsed.tool_calls) {
    reply.tool_calls.push_back(Json{{"id", call.id},
                                    {"type", "function"},
                                    {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  reply.finish_reason =
      choice.finish_reason() == FinishReason::cancelled ? "cancelled" : choice.finish_reason_name();
  reply.error = choice.error();
  if (choice.finish_reason() == FinishReason::stop || choice.finish_reason() == FinishReason::length) {
    Json answer{{"role", "assistant"}, {"content", parsed.content}};
    if (!reply.tool_calls.empty()) answer["tool_calls"] = reply.tool_calls;
    impl_->turns.push_back(std::move(user));
    impl_->turns.push_back(std::move(answer));
  }
  return reply;
}

}  // namespace pie
