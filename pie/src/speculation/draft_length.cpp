#include <algorithm>
#include <cmath>

#include "pie/error.h"
#include "pie/speculation.h"

namespace pie {

namespace {

// Each verification's weight in the running acceptance rate.
constexpr double kLearningRate = 0.3;
// The chance that every drafted token is accepted that a draft length must keep.
constexpr double kMinAllAccepted = 0.2;
// Below this acceptance a request stops drafting for kPauseSteps steps, then tries again.
constexpr double kMinAcceptance = 0.15;
constexpr std::int32_t kPauseSteps = 16;

}  // namespace

const char* draft_mode_name(DraftMode mode) { return mode == DraftMode::ngram ? "ngram" : "off"; }

DraftMode draft_mode_from_name(const std::string& name) {
  if (name == "off") return DraftMode::off;
  if (name == "ngram") return DraftMode::ngram;
  throw RequestError("[speculative] mode must be \"ngram\" or \"off\", got \"" + name + "\"", "speculative");
}

void SpeculativeOptions::validate() const {
  if (k < 0 || k > kMaxDraftTokens) {
    throw RequestError("[speculative] k must be in 0..16 (0: adaptive), got " + std::to_string(k),
                       "speculative.k");
  }
}

DraftLength::DraftLength(std::int32_t max_k) : max_k_(std::max(1, std::min(max_k, kMaxDraftTokens))) {}

std::int32_t DraftLength::next() {
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  if (acceptance_ >= 0.999) return max_k_;
  const double k = std::log(kMinAllAccepted) / std::log(std::max(acceptance_, 1e-3));
  return std::max(1, std::min(max_k_, static_cast<std::int32_t>(k)));
}

void DraftLength::record(std::int32_t drafted, std::int32_t accepted) {
  if (drafted <= 0) return;
  acceptance_ += kLearningRate * (static_cast<double>(accepted) / drafted - acceptance_);
  if (acceptance_ < kMinAcceptance) {
    pause_ = kPauseSteps;
    acceptance_ = 0.5;  // try again afresh after the pause
  }
}

}  // namespace pie
