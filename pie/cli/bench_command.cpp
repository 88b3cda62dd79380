// `orchard bench kernels [--json] [--threads N] [--filter NAME]... [--min-time S]`: every registered
// kernel benchmark (bench_kernels.h) at 1..N threads, each figure with its fraction of the limit measured
// by this binary in this run (streaming read bandwidth, f32 FMA peak).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "arg_parser.h"
#include "bench_kernels.h"
#include "commands.h"
#include "kernels/isa.h"

namespace orchard::cli {
namespace {

std::string shape_json(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("{}", fmt::join(shape, "x")); }

void print_result(const bench::Result& r, bool json) {
  const double fraction = r.limit > 0 ? r.value / r.limit : 0.0;
  if (json) {
    std::printf("%s\n", fmt::format(R"({{"kernel": "{}", "dtype": "{}", "shape": {}, "threads": {}, "value": {:.3f}, )"
                                    R"("unit": "{}", "limit": {:.3f}, "fraction": {:.4f}}})",
                                    r.kernel, r.dtype, shape_json(r.shape), r.threads, r.value, r.unit, r.limit,
                                    fraction)
                            .c_str());
  } else {
    std::printf("%s\n", fmt::format("{:<22} {:<6} {:<16} {:>3}  {:>9.2f} {:<8} {:>9.2f}  {:>6.1f}%", r.kernel, r.dtype,
                                    shape_text(r.shape), r.threads, r.value, r.unit, r.limit, 100.0 * fraction)
                            .c_str());
  }
  std::fflush(stdout);
}

int run_kernels(std::span<const std::string> args) {
  bool json = false;
  std::optional<std::string> threads_opt, min_time_opt;
  std::vector<std::string> filters;
  ArgParser parser("orchard bench kernels [--json] [--threads N] [--filter NAME]... [--min-time S]",
                   "Times the CPU kernels (matvec per weight type at Llama-8B shapes, norms, activations, and "
                   "the attention/RoPE entries of pal/) at 1..N threads. Each figure is given with its "
                   "fraction of a limit this binary measures in the same run: the streaming read bandwidth "
                   "(GB/s kernels) or the f32 FMA peak (GFLOP/s kernels). Every kernel is checked against its "
                   "scalar reference before it is timed. Figures are noisy when other work shares the CPU.");
  parser.flag("json", 'j', "one JSON object per line: kernel, dtype, shape, threads, value, unit, limit, fraction",
              &json)
      .option("threads", 't', "N", "largest thread count (default: all cores)", &threads_opt)
      .multi_option("filter", 'f', "NAME", "only kernels whose name contains NAME (repeatable)", &filters)
      .option("min-time", 0, "S", "seconds to time each kernel for (default 0.3)", &min_time_opt);
  if (!parser.parse(args)) return 0;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int max_threads = threads_opt ? static_cast<int>(parse_int(*threads_opt, "--threads", 1, 256)) : hw;
  const double min_time = min_time_opt ? parse_double(*min_time_opt, "--min-time") : 0.3;
  if (min_time <= 0 || min_time > 60) throw UsageError("--min-time must be in (0, 60], got " + *min_time_opt);
  if (!json) {
    std::printf("# orchard bench kernels: ISA %s, threads 1..%d\n", std::string(kernels::isa_name(kernels::best_isa())).c_str(),
                max_threads);
    std::printf("%-22s %-6s %-16s %3s  %9s %-8s %9s  %7s\n", "kernel", "dtype", "shape", "thr", "value", "unit",
                "limit", "frac");
  }
  for (int t = 1; t <= max_threads; ++t) {
    tensor::ThreadPool pool(t);
    const bench::Limits limits = bench::measure_limits(pool);
    bench::Context ctx{pool, t, limits, min_time, filters};
    // The limits themselves, as entries at fraction 1.
    if (ctx.wanted("limit_read_bandwidth")) {
      print_result({"limit_read_bandwidth", "u8", {limits.read_bytes}, t, limits.read_gbps, "GB/s", limits.read_gbps}, json);
    }
    if (ctx.wanted("limit_fma_peak")) {
      print_result({"limit_fma_peak", "f32", {}, t, limits.fma_gflops, "GFLOP/s", limits.fma_gflops}, json);
    }
    for (const bench::Entry& e : bench::registry()) {
      std::vector<bench::Result> results;
      e.fn(ctx, results);
      for (const bench::Result& r : results) print_result(r, json);
    }
  }
  return 0;
}

}  // namespace

int run_bench(std::span<const std::string> args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf(
        "usage: orchard bench <what> [options]\n\n"
        "  kernels    CPU kernels against this machine's read bandwidth and FMA peak\n\n"
        "`orchard bench kernels --help` describes the options.\n");
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "kernels") return run_kernels(args.subspan(1));
  throw UsageError("unknown benchmark '" + args[0] + "' (known: kernels)");
}

}  // namespace orchard::cli
