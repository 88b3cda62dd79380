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
// Steps a size's mean averages over, once it has seen that many.
constexpr std::int32_t kSizeWindow = 16;

// Tokens a step yields, on average, with k drafted at acceptance rate a: the accepted run plus one.
double expected_tokens(double a, std::int32_t k) {
  return a >= 1.0 ? k + 1.0 : (1.0 - std::pow(a, k + 1)) / (1.0 - a);
}

}  // namespace

void StepCost::record(std::int32_t n_tokens, double seconds, std::int32_t n_logit_rows) {
  if (n_tokens <= 0 || !(seconds > 0)) return;
  const double n = n_tokens;
  w_ = kCostDecay * w_ + 1;
  n_ = kCostDecay * n_ + n;
  t_ = kCostDecay * t_ + seconds;
  nn_ = kCostDecay * nn_ + n * n;
  nt_ = kCostDecay * nt_ + n * seconds;
  if (n_tokens <= kMaxSize && (n_logit_rows < 0 || n_logit_rows == n_tokens)) {
    // An exact mean of the first steps, then a moving one (the load on the machine changes).
    std::int32_t& count = count_[n_tokens];
    count = std::min(count + 1, kSizeWindow);
    mean_[n_tokens] += (seconds - mean_[n_tokens]) / count;
  }
}

double StepCost::line(std::int32_t n_tokens) const {
  if (w_ <= 0) return 0;
  const double mn = n_ / w_, mt = t_ / w_;
  const double var = nn_ / w_ - mn * mn;
  if (var < 0.05) return 0;  // every step the same size: no slope to read
  const double per_token = std::max(0.0, (nt_ / w_ - mn * mt) / var);
  const double base = std::max(mt - per_token * mn, 1e-9);
  return base + per_token * std::max(1, n_tokens);
}

double StepCost::relative_token_cost(std::int32_t n_tokens) const {
  const double at = line(n_tokens), next = line(n_tokens + 1);
  if (at <= 0) return kPriorTokenCost;
  return (next - at) / at;
}

double StepCost::seconds(std::int32_t n_tokens) const {
  if (w_ <= 0) return 0;
  n_tokens = std::max(1, n_tokens);
  if (n_tokens <= kMaxSize && count_[n_tokens] > 0) return mean_[n_tokens];
  // The nearest sizes seen below and above.
  std::int32_t lo = std::min(n_tokens, kMaxSize + 1) - 1, hi = n_tokens + 1;
  while (lo >= 1 && count_[lo] == 0) --lo;
  while (hi <= kMaxSize && count_[hi] == 0) ++hi;
  if (lo >= 1 && hi <= kMaxSize) {
    return mean_[lo] + (mean_[hi] - mean_[lo]) * (n_tokens - lo) / static_cast<double>(hi - lo);
  }
  const double on_line = line(n_tokens);
  if (lo >= 1) {  // past the largest size seen: its mean, then the line's slope (or the prior's)
    const double slope = on_line > 0 ? line(n_tokens) - line(n_tokens - 1) : kPriorTokenCost * mean_[lo];
    return mean_[lo] + std::max(0.0, slope) * (n_tokens - lo);
  }
  if (hi <= kMaxSize) return mean_[hi];  // below the smallest size seen: no cheaper than it, say
  const double mt = t_ / w_;            // only sizes past kMaxSize seen
  return on_line > 0 ? on_line : mt;
}

std::vector<double> StepCost::relative_costs(std::int32_t n_tokens, std::int32_t max_k) const {
  std::vector<double> costs(static_cast<std::size_t>(std::max(0, max_k) + 1), 1.0);
  const double base = seconds(n_tokens);
  // Steps of one size only: nothing to read a step's growth from but the prior.
  std::int32_t sizes = 0;
  for (std::int32_t n = 1; n <= kMaxSize && sizes < 2; ++n) sizes += count_[n] > 0 ? 1 : 0;
  for (std::size_t k = 1; k < costs.size(); ++k) {
    const double c = base > 0 && sizes >= 2 ? seconds(n_tokens + static_cast<std::int32_t>(k)) / base
                                            : 1.0 + kPriorTokenCost * static_cast<double>(k);
    costs[k] = std::max(costs[k - 1], c);
  }
  return costs;
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
  std::vector<double> costs(static_cast<std::size_t>(max_k_) + 1);
  for (std::size_t k = 0; k < costs.size(); ++k) costs[k] = 1.0 + token_cost * static_cast<double>(k);
  return next(costs);
}

std::int32_t DraftLength::next(std::span<const double> costs, std::int32_t n_rows) {
  if (fixed_) return max_k_;
  // The step's other rows yield a token each whatever this row drafts: a draft must pay for the growth
  // of the whole step, not of this row's share of it.
  const double others = std::max(1, n_rows) - 1.0;
  std::int32_t best_k = 0;
  double best = others + 1.0;  // no draft: a token per row, at the step's cost
  const std::int32_t top = std::min<std::int32_t>(max_k_, static_cast<std::int32_t>(costs.size()) - 1);
  for (std::int32_t k = 1; k <= top; ++k) {
    const double value = (others + expected_tokens(acceptance_, k)) / costs[static_cast<std::size_t>(k)];
    if (value > best * 1.02) {  // a gain worth the risk of a misread cost
      best = value;
      best_k = k;
    }
  }
  // The retry relearns a rate that may have risen: pointless where even a rate of 1 would not pay.
  const auto could_pay = [&] {
    for (std::int32_t k = 1; k <= top; ++k) {
      if ((others + k + 1.0) / costs[static_cast<std::size_t>(k)] > (others + 1.0) * 1.02) return true;
    }
    return false;
  };
  if (best_k == 0 && ++idle_ >= kRetrySteps && could_pay()) {
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
