#include <algorithm>
#include <cmath>

#include "pie/error.h"
#include "pie/speculation.h"

namespace pie {

namespace {

// Each verification's weight in the running acceptance rate.
constexpr double kLearningRate = 0.3;
// A request that stopped drafting (its rate too low to pay) tries a single token again after this many
// steps, so that the rate it remembers can recover when the text turns to copying.
constexpr std::int32_t kRetrySteps = 16;
// Each step's weight in the cost line: recent steps count most (the load on the machine changes).
constexpr double kCostDecay = 0.98;
constexpr double kPriorTokenCost = 0.3;

// Tokens a step yields, on average, with k drafted at acceptance rate a: the accepted run plus one.
double expected_tokens(double a, std::int32_t k) {
  return a >= 1.0 ? k + 1.0 : (1.0 - std::pow(a, k + 1)) / (1.0 - a);
}

}  // namespace

void StepCost::record(std::int32_t n_tokens, double seconds) {
  if (n_tokens <= 0 || !(seconds > 0)) return;
  const double n = n_tokens;
  w_ = kCostDecay * w_ + 1;
  n_ = kCostDecay * n_ + n;
  t_ = kCostDecay * t_ + seconds;
  nn_ = kCostDecay * nn_ + n * n;
  nt_ = kCostDecay * nt_ + n * seconds;
}

double StepCost::relative_token_cost(std::int32_t n_tokens) const {
  if (w_ <= 0) return kPriorTokenCost;
  const double mn = n_ / w_, mt = t_ / w_;
  const double var = nn_ / w_ - mn * mn;
  if (var < 0.05) return kPriorTokenCost;  // every step the same size: no slope to read
  const double per_token = std::max(0.0, (nt_ / w_ - mn * mt) / var);
  const double base = std::max(mt - per_token * mn, 1e-9);
  return per_token / (base + per_token * std::max(1, n_tokens));
}

double StepCost::seconds(std::int32_t n_tokens) const {
  if (w_ <= 0) return 0;
  const double mn = n_ / w_, mt = t_ / w_;
  const double var = nn_ / w_ - mn * mn;
  if (var < 0.05) return mt;  // one step size seen: its time
  const double per_token = std::max(0.0, (nt_ / w_ - mn * mt) / var);
  const double base = std::max(mt - per_token * mn, 1e-9);
  return base + per_token * std::max(1, n_tokens);
}

const char* draft_mode_name(DraftMode mode) {
  switch (mode) {
    case DraftMode::off: return "off";
    case DraftMode::ngram: return "ngram";
    case DraftMode::draft: return "draft";
    case DraftMode::custom: return "custom";
  }
  return "off";
}

DraftMode draft_mode_from_name(const std::string& name) {
  if (name == "off") return DraftMode::off;
  if (name == "ngram") return DraftMode::ngram;
  if (name == "draft") return DraftMode::draft;
  throw RequestError("[speculative] mode must be \"ngram\", \"draft\" or \"off\", got \"" + name + "\"",
                     "speculative");
}

void SpeculativeOptions::validate() const {
  if (k < 0 || k > kMaxDraftTokens) {
    throw RequestError("[speculative] k must be in 0..16 (0: adaptive), got " + std::to_string(k),
                       "speculative.k");
  }
}

DraftLength::DraftLength(std::int32_t max_k, bool fixed)
    : max_k_(std::max(1, std::min(max_k, kMaxDraftTokens))), fixed_(fixed) {}

std::int32_t DraftLength::next(double token_cost) {
  if (fixed_) return max_k_;
  std::int32_t best_k = 0;
  double best = 1.0;  // no draft: one token per step, at its cost
  for (std::int32_t k = 1; k <= max_k_; ++k) {
    const double value = expected_tokens(acceptance_, k) / (1.0 + token_cost * k);
    if (value > best * 1.02) {  // a gain worth the risk of a misread cost
      best = value;
      best_k = k;
    }
  }
  if (best_k == 0 && ++idle_ >= kRetrySteps) {
    idle_ = 0;
    return 1;
  }
  return best_k;
}

void DraftLength::record(std::int32_t drafted, std::int32_t accepted) {
  if (drafted <= 0) return;
  idle_ = 0;
  // Tokens verified one after the other until the first rejection: the accepted ones and that one.
  const std::int32_t tried = std::min(drafted, accepted + 1);
  acceptance_ += kLearningRate * (static_cast<double>(accepted) / tried - acceptance_);
}

}  // namespace pie
