// What a verify step's products cost at T = 1, 2, 3, 5, 9 tokens of one sequence, per weight shape of a
// model, against the same products at one token: the price of checking T - 1 drafted tokens, product by
// product. The default model's shapes (SmolLM2-135M: n_embd 576, n_ff 1536, 3 KV heads of 64; Q4_1 layers
// and a q8_0 output head of 49,152 rows), random weights (the timing does not depend on the values).
//
// Each shape has as many copies of its weights as a step uses (30 layers; one head), and a timing runs the
// product over every copy once, as a step streams them: 96 MB of weights that the caches do not hold, like
// the model's. The head's slice is the exception: one small matrix run 8 times, in cache.
//
// Each repetition runs every (shape, T) once, in an order that rotates between repetitions, and keeps the
// best time of each: on a machine loaded by other work the ratios come from the same minutes. With
// --threads 1 the times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), which other processes on the
// core disturb less than wall time; with more threads, wall time through kernels::matmul's pool.
//
//   few_token_products_bench [--threads N] [--reps R] [--isa avx512|avx2|scalar] [--layout preferred|plain]
//
// --layout: the weights as the CPU backend holds them (preferred: kernels::preferred_layout, q4_1 repacked
// where the ISA has kernels for it) or as the file has them (plain).
//
// Prints one line per shape: microseconds at T = 1 (all of a step's copies; the slice: one call) and each
// T's time as a multiple of it, then the whole step's products (30 layers + the head) the same way.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "tensor/thread_pool.h"

namespace {

struct Shape {
  const char* name;
  tensor::DType type;
  std::int64_t n_out, n_in;
  int per_step;  // how many times a step runs it (30 layers; the head once; 0: not part of a step)
};

constexpr Shape kShapes[] = {
    {"q, o (q4_1 576x576)", tensor::DType::q4_1, 576, 576, 60},
    {"k, v (q4_1 192x576)", tensor::DType::q4_1, 192, 576, 60},
    {"gate, up (q4_1 1536x576)", tensor::DType::q4_1, 1536, 576, 60},
    {"down (q4_1 576x1536)", tensor::DType::q4_1, 576, 1536, 30},
    {"head (q8_0 49152x576)", tensor::DType::q8_0, 49152, 576, 1},
    // A slice of the head that stays in cache: the head's arithmetic without its weight stream.
    {"head slice (q8_0 1024x576)", tensor::DType::q8_0, 1024, 576, 0},
};
constexpr int kTokens[] = {1, 2, 3, 5, 9};

double now_us(bool cpu) {
  if (cpu) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 20;
  kernels::Isa isa = kernels::Isa::avx512;
  bool preferred = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "few_token_products_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--threads") {
      threads = std::atoi(v.c_str());
    } else if (a == "--reps") {
      reps = std::atoi(v.c_str());
    } else if (a == "--isa") {
      if (v != "avx512" && v != "avx2" && v != "scalar") {
        std::fprintf(stderr, "few_token_products_bench: --isa takes avx512, avx2 or scalar, got %s\n", v.c_str());
        return 2;
      }
      isa = v == "avx512" ? kernels::Isa::avx512 : v == "avx2" ? kernels::Isa::avx2 : kernels::Isa::scalar;
    } else if (a == "--layout") {
      if (v != "preferred" && v != "plain") {
        std::fprintf(stderr, "few_token_products_bench: --layout takes preferred or plain, got %s\n", v.c_str());
        return 2;
      }
      preferred = v == "preferred";
    } else {
      std::fprintf(stderr,
                   "usage: few_token_products_bench [--threads N] [--reps R] [--isa avx512|avx2|scalar] "
                   "[--layout preferred|plain]\n");
      return 2;
    }
  }
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "few_token_products_bench: --threads and --reps take a positive number\n");
    return 2;
  }
  tensor::ThreadPool pool(threads);
  const bool cpu_time = threads == 1;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const std::size_t n_shapes = std::size(kShapes), n_t = std::size(kTokens);
  std::vector<std::vector<unsigned char>> weights(n_shapes);  // per_step copies (at least one) side by side
  std::vector<kernels::WeightLayout> layouts(n_shapes);
  std::vector<std::size_t> strides(n_shapes, 0), offsets(n_shapes, 0);  // 0: dense rows from the start
  std::vector<float> x(9 * 1536), y(9 * 49152);
  for (float& v : x) v = dist(rng);
  for (std::size_t s = 0; s < n_shapes; ++s) {
    const Shape& sh = kShapes[s];
    const std::size_t row = tensor::row_bytes(sh.type, sh.n_in);
    const std::int64_t rows = sh.n_out * std::max(1, sh.per_step);
    weights[s].resize(row * static_cast<std::size_t>(rows));
    std::vector<float> wf(static_cast<std::size_t>(sh.n_in));
    for (std::int64_t r = 0; r < rows; ++r) {
      for (float& v : wf) v = dist(rng);
      kernels::quantize_row_ref(sh.type, wf.data(), weights[s].data() + static_cast<std::size_t>(r) * row, sh.n_in);
    }
    const kernels::WeightLayout l = preferred ? kernels::preferred_layout(sh.type, isa) : kernels::WeightLayout::plain;
    layouts[s] = l;
    if (l != kernels::WeightLayout::plain) {  // as the CPU backend holds them: rows on 64-byte boundaries
      strides[s] = kernels::aligned_row_bytes(sh.type, sh.n_in);
      std::vector<unsigned char> repacked(strides[s] * static_cast<std::size_t>(rows) + 64);
      offsets[s] = (64 - reinterpret_cast<std::uintptr_t>(repacked.data()) % 64) % 64;
      kernels::repack_weights(l, sh.type, weights[s].data(), 0, rows, sh.n_in, repacked.data() + offsets[s],
                              strides[s]);
      weights[s] = std::move(repacked);
    }
  }
  std::vector<double> best(n_shapes * n_t, 1e30);
  for (int rep = 0; rep < reps; ++rep) {
    for (std::size_t k = 0; k < n_shapes * n_t; ++k) {
      const std::size_t j = (k + static_cast<std::size_t>(rep) * 7) % (n_shapes * n_t);  // rotating order
      const Shape& sh = kShapes[j / n_t];
      const int t = kTokens[j % n_t];
      kernels::MatmulParams p;
      p.w_type = sh.type;
      p.n_out = sh.n_out;
      p.n_in = sh.n_in;
      p.w_layout = layouts[j / n_t];
      p.w_row_bytes = strides[j / n_t];
      const std::size_t matrix =
          (p.w_row_bytes != 0 ? p.w_row_bytes : tensor::row_bytes(sh.type, sh.n_in)) * static_cast<std::size_t>(sh.n_out);
      const int calls = std::max(1, sh.per_step) * (sh.per_step == 0 ? 8 : 1);
      const double t0 = now_us(cpu_time);
      for (int c = 0; c < calls; ++c) {
        p.w = weights[j / n_t].data() + offsets[j / n_t] + matrix * static_cast<std::size_t>(c % std::max(1, sh.per_step));
        kernels::matmul(p, x.data(), t, y.data(), cpu_time ? nullptr : &pool, isa);
      }
      best[j] = std::min(best[j], (now_us(cpu_time) - t0) / (sh.per_step == 0 ? calls : 1));
    }
  }
  const std::string isa_text(kernels::isa_name(isa));
  std::printf("%s, %s weight layout, %d thread(s), best of %d interleaved repetitions, %s\n", isa_text.c_str(),
              preferred ? "preferred" : "plain", threads, reps, cpu_time ? "thread CPU time" : "wall time");
  std::printf("%-26s %10s", "product", "T=1 (us)");
  for (std::size_t i = 1; i < n_t; ++i) std::printf("  T=%d", kTokens[i]);
  std::printf("\n");
  std::vector<double> step(n_t, 0.0);
  for (std::size_t s = 0; s < n_shapes; ++s) {
    const double one = best[s * n_t];
    std::printf("%-26s %10.1f", kShapes[s].name, one);
    for (std::size_t i = 1; i < n_t; ++i) std::printf(" %4.2fx", best[s * n_t + i] / one);
    std::printf("\n");
    if (kShapes[s].per_step > 0) {
      for (std::size_t i = 0; i < n_t; ++i) step[i] += best[s * n_t + i];
    }
  }
  std::printf("%-26s %10.1f", "a step's products", step[0]);
  for (std::size_t i = 1; i < n_t; ++i) std::printf(" %4.2fx", step[i] / step[0]);
  std::printf("\n");
  return 0;
}
