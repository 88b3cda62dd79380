// The oracle drafter (speculation.h): the target's own greedy continuation, corrupted at a chosen rate.
#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "pie/error.h"
#include "pie/speculation.h"

namespace pie {

namespace {

class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(std::vector<std::int32_t> sequence, double acceptance, std::uint64_t seed, std::int32_t n_vocab)
      : sequence_(std::move(sequence)), acceptance_(acceptance), n_vocab_(n_vocab), random_(seed) {}

  void propose(std::span<Row> rows) override {
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    std::uniform_int_distribution<std::int32_t> other(1, n_vocab_ - 1);
    for (Row& row : rows) {
      row.draft.clear();
      const std::size_t n = row.context.size();
      if (n >= sequence_.size() || !std::equal(row.context.begin(), row.context.end(), sequence_.begin())) continue;
      const std::size_t count = std::min<std::size_t>(static_cast<std::size_t>(row.max_tokens), sequence_.size() - n);
      for (std::size_t i = 0; i < count; ++i) {
        std::int32_t token = sequence_[n + i];
        // A wrong token: any other id (verification rejects it, greedy, whatever it is).
        if (coin(random_) >= acceptance_) token = (token + other(random_)) % n_vocab_;
        row.draft.push_back(token);
      }
    }
  }

 private:
  std::vector<std::int32_t> sequence_;
  double acceptance_;
  std::int32_t n_vocab_;
  std::mt19937_64 random_;
};

}  // namespace

std::unique_ptr<Drafter> make_oracle_drafter(std::vector<std::int32_t> sequence, double acceptance,
                                             std::uint64_t seed, std::int32_t n_vocab) {
  if (!(acceptance >= 0.0 && acceptance <= 1.0)) {
    throw Error(fmt::format("[oracle drafter] acceptance must be in [0, 1], got {}", acceptance));
  }
  if (n_vocab < 2) throw Error(fmt::format("[oracle drafter] n_vocab must be at least 2, got {}", n_vocab));
  return std::make_unique<OracleDrafter>(std::move(sequence), acceptance, seed, n_vocab);
}

}  // namespace pie
