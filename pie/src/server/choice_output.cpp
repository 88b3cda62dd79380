#include "server/choice_output.h"

namespace pie::server {

ChoiceOutput::ChoiceOutput(std::int32_t index, const PreparedRequest& prepared) : index_(index) {
  if (prepared.parse_tool_calls) {
    ParseOptions options = prepared.parse;
    options.id_seed = prepared.parse.id_seed + static_cast<std::uint64_t>(index);  // distinct ids per choice
    parser_.emplace(prepared.tool_format, options);
  } else if (prepared.parse.reasoning == ReasoningFormat::think) {
    section_ = Section::start;
  } else if (prepared.parse.reasoning == ReasoningFormat::think_open) {
    section_ = Section::reasoning;
  }
  markers_ = prepared.parse.reasoning_markers;
}

StreamDelta ChoiceOutput::push(const Event& event) {
  StreamDelta delta;
  text_ += event.text;
  tokens_.insert(tokens_.end(), event.tokens.begin(), event.tokens.end());
  logprobs_.insert(logprobs_.end(), event.logprobs.begin(), event.logprobs.end());
  if (event.finish != FinishReason::none) {
    finish_ = event.finish;
    error_ = event.error;
  }
  if (event.text.empty()) return delta;
  if (!parser_) return split_reasoning(event.text, false);
  return parser_->push(event.text);
}

StreamDelta ChoiceOutput::finish() {
  if (!parser_) return split_reasoning({}, true);
  // Cut short (max_tokens, the context, a cancel): a call cut inside is dropped, the whole ones kept.
  return parser_->finish(finish_ == FinishReason::length || finish_ == FinishReason::cancelled);
}

namespace {
// The length of the longest suffix of `text` that is a proper prefix of `marker`.
std::size_t partial_marker(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (marker.starts_with(text.substr(text.size() - n))) return n;
  }
  return 0;
}
}  // namespace

StreamDelta ChoiceOutput::split_reasoning(std::string_view text, bool final) {
  held_ += text;
  StreamDelta delta;
  for (;;) {
    if (section_ == Section::start) {
      // Reasoning opens with the marker, after optional whitespace; anything else is the answer.
      std::size_t begin = held_.find_first_not_of(" \t\r\n");
      if (begin == std::string::npos) {
        if (!final) break;
        section_ = Section::answer;
        continue;
      }
      std::string_view rest = std::string_view(held_).substr(begin);
      if (rest.starts_with(markers_.open)) {
        held_.erase(0, begin + markers_.open.size());
        section_ = Section::reasoning;
        continue;
      }
      if (!final && std::string_view(markers_.open).starts_with(rest)) break;  // may still be the marker
      section_ = Section::answer;
      continue;
    }
    if (section_ == Section::reasoning) {
      std::size_t close = held_.find(markers_.close);
      if (close != std::string::npos) {
        delta.reasoning_content += held_.substr(0, close);
        held_.erase(0, close + markers_.close.size());
        section_ = Section::answer;
        after_reasoning_ = true;
        continue;
      }
      std::size_t keep = final ? 0 : partial_marker(held_, markers_.close);
      delta.reasoning_content += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      break;
    }
    if (after_reasoning_) {
      // The blank line models write after the close marker is not part of the answer.
      std::size_t answer = held_.find_first_not_of("\r\n");
      if (answer == std::string::npos) {
        held_.clear();
        break;
      }
      held_.erase(0, answer);
      after_reasoning_ = false;
    }
    delta.content += held_;
    held_.clear();
    break;
  }
  plain_.content += delta.content;
  plain_.reasoning_content += delta.reasoning_content;
  return delta;
}

const ParsedOutput& ChoiceOutput::parsed() const { return parser_ ? parser_->parsed() : plain_; }

std::string ChoiceOutput::finish_reason_name() const {
  switch (finish_) {
    case FinishReason::length: return "length";
    case FinishReason::error: return "error";
    case FinishReason::none:
    case FinishReason::stop:
    case FinishReason::cancelled: break;
  }
  return parsed().tool_calls.empty() ? "stop" : "tool_calls";
}

}  // namespace pie::server
