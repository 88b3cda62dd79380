// Completions: one-shot requests through the server's request path (parse_openai_chat or
// parse_openai_completion, prepare_*, ChoiceOutput), without HTTP.
#include "pie/completions.h"

#include <deque>

#include "server/api_error.h"
#include "server/api_request.h"
#include "server/choice_output.h"
#include "server/lora_routes.h"
#include "server/served_model.h"

namespace pie {

using Json = nlohmann::ordered_json;

struct Completions::Impl {
  explicit Impl(const std::shared_ptr<Engine>& e) : served(e, "orchard"), loras(*e) {}
  server::ServedModel served;
  server::LoraRoutes loras;  // the body's `lora` field, as the server reads it
};

namespace {

class Stream final : public CompletionStream {
 public:
  Stream(server::PreparedRequest prepared, std::shared_ptr<RequestStream> stream)
      : prepared_(std::move(prepared)), stream_(std::move(stream)), choice_(0, prepared_) {}

  std::optional<StreamDelta> next() override { return next_impl(std::nullopt); }
  std::optional<StreamDelta> next_for(std::chrono::milliseconds timeout) override { return next_impl(timeout); }
  bool timed_out() const override { return timed_out_; }
  void cancel() override { stream_->cancel(); }
  const ChatReply& reply() const override { return reply_; }

 private:
  // Reads events until a delta is certain or the answer ends.
  std::optional<StreamDelta> next_impl(std::optional<std::chrono::milliseconds> timeout) {
    timed_out_ = false;
    if (!pending_.empty()) return pop();
    while (!done_) {
      std::optional<Event> event = timeout ? stream_->next_for(*timeout) : stream_->next();
      if (!event) {
        if (timeout && stream_->timed_out()) {
          timed_out_ = true;
          return std::nullopt;
        }
        finish();  // the stream ended without its done event (cancelled)
        break;
      }
      if (event->done) {
        reply_.usage = event->usage;
        finish();
        break;
      }
      if (!event->tokens.empty() && !reply_.first_token_time) reply_.first_token_time = event->time;
      keep(choice_.push(*event));
      if (event->finish != FinishReason::none) keep(choice_.finish());
      if (!pending_.empty()) return pop();
    }
    if (!pending_.empty()) return pop();
    return std::nullopt;
  }

  void keep(StreamDelta delta) {
    if (!delta.empty()) pending_.push_back(std::move(delta));
  }
  StreamDelta pop() {
    StreamDelta d = std::move(pending_.front());
    pending_.pop_front();
    return d;
  }

  void finish() {
    if (done_) return;
    done_ = true;
    if (!choice_.finished()) {  // no last event of the sample came: cancelled before it finished
      Event cancelled;
      cancelled.finish = FinishReason::cancelled;
      keep(choice_.push(cancelled));
      keep(choice_.finish());
    }
    const ParsedOutput& parsed = choice_.parsed();
    reply_.content = parsed.content;
    reply_.reasoning = parsed.reasoning_content;
    for (const ToolCall& call : parsed.tool_calls) {
      reply_.tool_calls.push_back(Json{{"id", call.id},
                                       {"type", "function"},
                                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    reply_.finish_reason =
        choice_.finish_reason() == FinishReason::cancelled ? "cancelled" : choice_.finish_reason_name();
    reply_.error = choice_.error();
  }

  server::PreparedRequest prepared_;
  std::shared_ptr<RequestStream> stream_;
  server::ChoiceOutput choice_;
  std::deque<StreamDelta> pending_;
  ChatReply reply_;
  bool done_ = false;
  bool timed_out_ = false;
};

}  // namespace

Completions::Completions(std::shared_ptr<Engine> engine) : impl_(std::make_unique<Impl>(std::move(engine))) {}
Completions::~Completions() = default;

const Engine& Completions::engine() const { return impl_->served.engine(); }

std::unique_ptr<CompletionStream> Completions::start(const Json& body) const {
  if (!body.is_object()) throw RequestError("[completions] the request must be a JSON object");
  server::PreparedRequest prepared;
  std::shared_ptr<RequestStream> stream;
  try {
    if (body.contains("messages")) {
      server::ChatRequest request = server::parse_openai_chat(body);
      if (request.params.n != 1) throw server::ApiError::invalid("[completions] n must be 1", "n");
      prepared = server::prepare_chat(impl_->served, request);
    } else {
      server::CompletionRequest request = server::parse_openai_completion(body);
      if (request.params.n != 1) throw server::ApiError::invalid("[completions] n must be 1", "n");
      prepared = server::prepare_completion(impl_->served, request);
    }
    prepared.request.loras = impl_->loras.select(body, "");
    stream = impl_->served.engine().submit(prepared.request);
  } catch (const server::ApiError& e) {
    throw RequestError(e.what(), e.param());
  }
  return std::make_unique<Stream>(std::move(prepared), std::move(stream));
}

}  // namespace pie
