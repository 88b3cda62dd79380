// orchard_bench_spec_oracle: the ceiling of speculative decoding's mechanism (issue 37). The model's greedy
// output for a prompt is recorded once, without speculation; then an oracle drafter (make_oracle_drafter)
// replays it with K drafted tokens per step, each one replaced by a wrong token with probability 1 - a,
// so that verification keeps a share a of what it is shown whatever the model. The decode speed of each
// (a, K) is printed beside the same engine's speed without speculation, measured just before in the same
// process, and their ratio. Greedy outputs are checked against the recording (identical or exit 1).
//
//   orchard_bench_spec_oracle MODEL [--device cpu|cuda|auto] [--threads N] [--tokens 128]
//                             [--acceptance 0.2,0.4,0.6,0.8,1.0] [--k 1,2,3,4,5,6,7,8] [--reps 1] [--prompt TEXT]
// prints a Markdown table, then one JSON line per (a, K).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"
#include "pie/engine.h"
#include "pie/model_store.h"

namespace {

struct Options {
  std::string model;
  pie::DeviceRequest device = pie::DeviceRequest::automatic;
  int threads = 0;
  std::int32_t tokens = 128;
  std::vector<double> acceptance{0.2, 0.4, 0.6, 0.8, 1.0};
  std::vector<std::int32_t> ks{1, 2, 3, 4, 5, 6, 7, 8};
  int reps = 1;
  std::string prompt = "The history of the city begins with a small settlement on the river, where";
};

const orchard::bench::BenchArgs kArgs(
    "orchard_bench_spec_oracle",
    "MODEL [--device cpu|cuda|auto] [--threads N] [--tokens N] [--acceptance 0.2,...,1.0] [--k 1,...,8] [--reps R] "
    "[--prompt TEXT]");

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) kArgs.fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--device") {
      try {
        o.device = pie::parse_device_request(value());
      } catch (const std::exception& e) {
        kArgs.fail(e.what());
      }
    } else if (a == "--threads") {
      o.threads = kArgs.positive(a, value(), 1024);
    } else if (a == "--tokens") {
      o.tokens = static_cast<std::int32_t>(kArgs.number(a, value(), 2, 8192));
    } else if (a == "--acceptance") {
      o.acceptance = kArgs.number_list(a, value(), 0, 1);
    } else if (a == "--k") {
      o.ks = kArgs.positive_list(a, value(), pie::kMaxDraftTokens);
    } else if (a == "--reps") {
      o.reps = kArgs.positive(a, value(), 100);
    } else if (a == "--prompt") {
      o.prompt = value();
    } else if (!a.empty() && a[0] == '-') {
      kArgs.fail("unknown option " + a);
    } else if (o.model.empty()) {
      o.model = a;
    } else {
      kArgs.fail("one MODEL only");
    }
  }
  if (o.model.empty()) kArgs.fail("MODEL is missing");
  return o;
}

// The engine's custom drafter, pointed at the oracle of the configuration being measured (the engine is
// built once: a model loaded on a GPU takes a while).
class SwitchedDrafter final : public pie::Drafter {
 public:
  void set(std::unique_ptr<pie::Drafter> inner) { inner_ = std::move(inner); }
  void propose(std::span<Row> rows) override {
    if (inner_) inner_->propose(rows);
  }

 private:
  std::unique_ptr<pie::Drafter> inner_;
};

struct Run {
  std::vector<std::int32_t> tokens;
  double tokens_per_second = 0;  // after the first token (decode only)
  std::int32_t drafted = 0, accepted = 0;
};

Run generate(pie::Engine& engine, const pie::GenerateRequest& request) {
  auto stream = engine.submit(request);
  Run run;
  std::chrono::steady_clock::time_point first, last;
  while (auto e = stream->next()) {
    if (e->done) {
      run.drafted = e->usage.draft_tokens;
      run.accepted = e->usage.accepted_draft_tokens;
      break;
    }
    if (!e->error.empty()) throw std::runtime_error("generation failed: " + e->error);
    if (e->tokens.empty()) continue;
    if (run.tokens.empty()) first = e->time;
    last = e->time;
    run.tokens.insert(run.tokens.end(), e->tokens.begin(), e->tokens.end());
  }
  const double seconds = std::chrono::duration<double>(last - first).count();
  if (run.tokens.size() > 1 && seconds > 0) run.tokens_per_second = (run.tokens.size() - 1) / seconds;
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    const auto model = pie::open_model(o.model).model;
    auto drafter = std::make_shared<SwitchedDrafter>();
    pie::EngineOptions options;
    options.device = o.device;
    options.n_threads = o.threads;
    options.max_running = 1;
    options.context_length = std::min<std::int32_t>(8192, 256 + o.tokens + pie::kMaxDraftTokens);
    options.custom_drafter = drafter;
    pie::Engine engine(model, options);
    pie::GenerateRequest request;
    request.prompt = model->tokenizer->encode(o.prompt, {.add_bos = model->tokenizer->add_bos_by_default()});
    request.sampling.temperature = 0;
    request.max_tokens = o.tokens;
    request.ignore_eos = true;
    request.speculative = pie::SpeculativeOptions{};
    generate(engine, request);  // warm-up: first-use costs (page faults, kernel compiles) out of the figures
    const Run recorded = generate(engine, request);
    std::vector<std::int32_t> sequence = request.prompt;
    sequence.insert(sequence.end(), recorded.tokens.begin(), recorded.tokens.end());

    std::printf("%s on %s (%s), %d tokens greedy, batch 1; decode tokens/s (best of %d)\n", model->name.c_str(),
                engine.device().device == tensor::Device::cuda ? "cuda" : "cpu", engine.device().reason.c_str(),
                o.tokens, o.reps);
    std::printf("| acceptance | K | without | with the oracle | ratio | drafts kept |\n| --- | --- | --- | --- | --- | --- |\n");
    std::vector<std::string> json;
    for (const double a : o.acceptance) {
      for (const std::int32_t k : o.ks) {
        double plain = 0, fast = 0;
        Run last;
        for (int rep = 0; rep < o.reps; ++rep) {
          request.speculative = pie::SpeculativeOptions{};
          const Run p = generate(engine, request);
          drafter->set(pie::make_oracle_drafter(sequence, a, 1000 + static_cast<std::uint64_t>(rep), model->config.n_vocab));
          request.speculative = pie::SpeculativeOptions{pie::DraftMode::custom, k};
          last = generate(engine, request);
          if (p.tokens != recorded.tokens || last.tokens != recorded.tokens) {
            std::fprintf(stderr, "orchard_bench_spec_oracle: the greedy output changed (a %.2f, K %d)\n", a, k);
            return 1;
          }
          plain = std::max(plain, p.tokens_per_second);
          fast = std::max(fast, last.tokens_per_second);
        }
        const double ratio = plain > 0 ? fast / plain : 0;
        std::printf("| %.2f | %d | %.1f | %.1f | %.2fx | %d of %d |\n", a, k, plain, fast, ratio, last.accepted,
                    last.drafted);
        std::fflush(stdout);
        char line[256];
        std::snprintf(line, sizeof line,
                      "{\"acceptance\": %.2f, \"k\": %d, \"plain_tok_s\": %.3f, \"oracle_tok_s\": %.3f, \"ratio\": "
                      "%.4f, \"drafted\": %d, \"accepted\": %d}",
                      a, k, plain, fast, ratio, last.drafted, last.accepted);
        json.emplace_back(line);
      }
    }
    for (const std::string& line : json) std::printf("%s\n", line.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orchard_bench_spec_oracle: %s\n", e.what());
    return 2;
  }
  return 0;
}
