// A conversation with a model outside HTTP: `orchard chat` and `orchard run --chat` hold one. Each turn
// goes through exactly the server's request path (the model's chat template and BOS rule, special-token
// handling of message text, the constraint or the tools as a grammar, the reasoning split, tool-call
// parsing), so one conversation gives the same prompt tokens through the command line and the API.
//
//   pie::ChatSession chat(engine);
//   chat.set_system("Answer briefly.");
//   auto reply = chat.send("Hi!", {{"temperature", 0}}, [](std::string_view t) { std::cout << t; });
//   reply = chat.send("A person as JSON", {{"response_format", {{"type", "json_object"}}}}, on_text);
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "pie/engine.h"

namespace pie {

struct ChatReply {
  std::string content;             // the answer, outside reasoning and tool calls
  std::string reasoning;           // a reasoning model's thinking (reasoning_content)
  nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();  // OpenAI's shape
  std::string finish_reason;       // OpenAI's: "stop", "length", "tool_calls"; or "cancelled", "error"
  std::string error;               // finish_reason "error": what went wrong
  Usage usage;
  // When the first output token came (none when there was none): decode rates are taken from it.
  std::optional<std::chrono::steady_clock::time_point> first_token_time;
};

class ChatSession {
 public:
  // Throws pie::Error when the model's chat template does not parse.
  explicit ChatSession(std::shared_ptr<Engine> engine);
  ~ChatSession();
  ChatSession(const ChatSession&) = delete;
  ChatSession& operator=(const ChatSession&) = delete;

  // The system message that starts the conversation (empty: none; the template may add its own).
  void set_system(std::string text);
  const std::string& system() const { return system_; }
  // Forgets the conversation; the system message stays.
  void reset();

  // Sends the user's message with `fields`: OpenAI chat-completion request fields other than messages,
  // model, n and stream (temperature, max_tokens, seed, stop, response_format, tools, tool_choice, and the
  // extensions grammar, lark, regex, ...). Streams the answer's text to `on_text` as it becomes certain,
  // and returns the whole reply, which joins the conversation unless it failed or was cancelled. Throws
  // RequestError naming the field at fault for a request the server would answer with a 4xx; the
  // conversation is then unchanged. Not reentrant; cancel() may come from another thread.
  ChatReply send(const std::string& user_text, const nlohmann::ordered_json& fields,
                 const std::function<void(std::string_view)>& on_text = {});
  // Ends the reply being generated (its finish_reason is "cancelled"); no effect between replies.
  void cancel();

  // The conversation so far (OpenAI's message shape), system message first when set.
  nlohmann::ordered_json messages() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::string system_;
};

}  // namespace pie
