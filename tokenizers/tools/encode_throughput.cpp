// Quick single-thread encoding throughput: encode_throughput <tokenizer path> <text file> [repeats]
// Prints MB/s (best of the repeats, by wall clock and by this thread's CPU time, which is steadier on a
// shared machine) and the token count.
// Build: g++ -O2 -std=c++20 -Itokenizers/include tokenizers/tools/encode_throughput.cpp \
//          build/tokenizers/libtokenizers.a -lre2 -lfmt -lpthread -o encode_throughput
#include <time.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tokenizers/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: encode_throughput <tokenizer> <text file> [repeats]\n";
    return 2;
  }
  try {
    const auto tok = tokenizers::Tokenizer::load(argv[1]);
    std::ifstream in(argv[2], std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
    auto cpu_now = [] {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    double best = 1e30, best_cpu = 1e30, first_cpu = 0;
    std::size_t n_tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_now();
      const auto ids = tok.encode(text);
      const double cpu = cpu_now() - c0;
      if (r == 0) first_cpu = cpu;  // cold: the per-thread piece cache starts empty
      best_cpu = std::min(best_cpu, cpu);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      n_tokens = ids.size();
    }
    std::cout << argv[1] << ": " << text.size() / 1e6 / best << " MB/s wall, " << text.size() / 1e6 / best_cpu
              << " MB/s cpu (first run, cold cache: " << text.size() / 1e6 / first_cpu << " MB/s cpu), " << n_tokens
              << " tokens\n";
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return 0;
}
