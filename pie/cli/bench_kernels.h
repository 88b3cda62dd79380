// Shared pieces of `orchard bench kernels`: the limits measured in the same run, a timer, and a registry
// that any file of pie/cli/ adds benchmark entries to (bench_attention.cpp registers the attention and
// RoPE entries; bench_command.cpp the matvec, quantization and elementwise ones).
//
// Adding entries from another file:
//
//   #include "bench_kernels.h"
//   namespace {
//   void bench_decode_attention(const orchard::cli::bench::Context& ctx,
//                               std::vector<orchard::cli::bench::Result>& out) {
//     ... set up inputs, check the result once against the reference ...
//     const double s = ctx.time([&] { run_kernel(ctx.pool); });   // seconds per call
//     out.push_back({"attention_decode", "f16", {4096, 32, 8, 128}, ctx.threads,
//                    bytes / s / 1e9, "GB/s", ctx.limits.read_gbps});
//   }
//   const orchard::cli::bench::Registrar kReg("attention", bench_decode_attention);
//   }  // namespace
//
// The command calls every registered entry once per thread count (1, 2, ... up to --threads), with
// ctx.pool holding exactly ctx.threads threads and ctx.limits measured with that many threads.
// fraction = value / limit; use "GB/s" with limits.read_gbps for memory-bound kernels and "GFLOP/s"
// with limits.fma_gflops for compute-bound ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/thread_pool.h"

namespace orchard::cli::bench {

// Limits of this machine with a given number of threads, measured by the same binary in the same run.
struct Limits {
  double read_gbps = 0;   // streaming read bandwidth over a buffer far larger than the last-level cache
  double fma_gflops = 0;  // f32 FMA peak (independent vector FMA chains, widest ISA present)
  std::int64_t read_bytes = 0;  // size of the buffer read_gbps streamed
};

struct Result {
  std::string kernel;               // "matvec", "attention_decode", ...
  std::string dtype;                // "q8_0", "f16", ...
  std::vector<std::int64_t> shape;  // e.g. [n_out, n_in] for matvec
  int threads = 1;
  double value = 0;                 // achieved rate
  std::string unit;                 // "GB/s" or "GFLOP/s"
  double limit = 0;                 // the limit in the same unit (fraction = value / limit)
};

struct Context {
  tensor::ThreadPool& pool;  // exactly `threads` threads
  int threads = 1;
  Limits limits;
  double min_seconds = 0.3;         // time each kernel for at least this long
  std::vector<std::string> filter;  // kernel-name filters from the command line (empty: all)

  // Seconds per call of fn: a warm-up call, then repeated calls until min_seconds has passed; the best
  // of several repetitions is returned (the machine is shared, the minimum is the least noisy figure).
  double time(tensor::FunctionRef<void()> fn) const;
  // True when `kernel` passes the command line's filters.
  bool wanted(const std::string& kernel) const;
};

using EntryFn = void (*)(const Context& ctx, std::vector<Result>& out);

struct Entry {
  const char* name;
  EntryFn fn;
};

// All registered entries, in registration order within a file (file order is unspecified).
std::vector<Entry>& registry();

// Registers an entry at static-initialization time.
struct Registrar {
  Registrar(const char* name, EntryFn fn) { registry().push_back({name, fn}); }
};

// Measures the limits with pool.n_threads() threads (takes about a second).
Limits measure_limits(tensor::ThreadPool& pool);

// Bytes a benchmark must cycle through so that its data streams from DRAM rather than from the last-level
// cache: at least `at_least`, and at least 4x this machine's L3 (a server's L3 can hold hundreds of MiB).
std::size_t streaming_bytes(std::size_t at_least);

}  // namespace orchard::cli::bench
