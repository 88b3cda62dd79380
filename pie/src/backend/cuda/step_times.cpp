#include "step_times.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tensor/cuda/device.h"

namespace pie::cuda {
namespace {

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

std::unique_ptr<StepTimes> StepTimes::from_env() {
  const char* log = std::getenv("ORCHARD_CUDA_STEP_TIMES");
  const char* profile = std::getenv("ORCHARD_CUDA_PROFILE_STEP");
  const bool want_log = log != nullptr && std::string(log) == "1";
  const std::int64_t step = profile != nullptr ? std::atoll(profile) : 0;
  if (!want_log && step <= 0) return nullptr;
  std::unique_ptr<StepTimes> t(new StepTimes());
  t->log_ = want_log;
  t->profile_step_ = step;
  return t;
}

StepTimes::~StepTimes() {
  try {
    if (profiling_) tensor::cuda::profiler_range(false);
  } catch (...) {  // a faulted context: nothing to close
  }
  if (!log_) return;
  for (const auto& [tokens, s] : sums_) {
    const double n = static_cast<double>(s.steps);
    std::fprintf(
        stderr,
        "orchard: cuda step times {\"tokens\": %lld, \"steps\": %lld, \"between_ms\": %.3f, "
        "\"queue_ms\": %.3f, \"wait_ms\": %.3f, \"device_ms\": %.3f, \"sampled_steps\": %lld, "
        "\"sample_ms\": %.3f, \"first_piece_ms\": %.3f}\n",
        static_cast<long long>(tokens), static_cast<long long>(s.steps), s.between / n, s.queue / n,
        s.wait / n, s.device / n, static_cast<long long>(s.sampled),
        s.sampled > 0 ? s.sample / static_cast<double>(s.sampled) : 0.0,
        s.pieced > 0 ? s.first_piece / static_cast<double>(s.pieced) : 0.0);
  }
}

void StepTimes::begin_entered(const tensor::cuda::Stream& stream) {
  ++n_steps_;
  if (profile_step_ > 0) {
    if (n_steps_ == profile_step_) {
      tensor::cuda::profiler_range(true);
      profiling_ = true;
    } else if (profiling_) {
      tensor::cuda::profiler_range(false);
      profiling_ = false;
    }
  }
  begin_at_ = Clock::now();
  first_recorded_ = false;
  if (log_) start_.record(stream);
}

void StepTimes::first_piece_launched(const tensor::cuda::Stream& stream) {
  if (!log_) return;
  first_.record(stream);
  first_recorded_ = true;
}

void StepTimes::begin_left(const tensor::cuda::Stream& stream, std::int64_t tokens) {
  if (!log_) return;
  stop_.record(stream);
  Sums& s = sums_[tokens];
  ++s.steps;
  s.queue += ms_between(begin_at_, Clock::now());
  if (have_last_end_) s.between += ms_between(last_end_, begin_at_);
  open_ = true;
  open_tokens_ = tokens;
}

void StepTimes::wait_entered() { wait_at_ = Clock::now(); }

void StepTimes::wait_left() {
  last_end_ = Clock::now();
  have_last_end_ = true;
  if (!log_ || !open_) return;
  Sums& s = sums_[open_tokens_];
  s.wait += ms_between(wait_at_, last_end_);
  close_step();
}

void StepTimes::sample_entered() { sample_at_ = Clock::now(); }

void StepTimes::sample_left() {
  last_end_ = Clock::now();
  have_last_end_ = true;
  if (!log_) return;
  Sums& s = sums_[open_tokens_];
  ++s.sampled;
  s.sample += ms_between(sample_at_, last_end_);
}

void StepTimes::close_step() {
  open_ = false;
  try {
    stop_.synchronize();
    Sums& s = sums_[open_tokens_];
    s.device += tensor::cuda::Event::elapsed_ms(start_, stop_);
    if (first_recorded_) {
      ++s.pieced;
      s.first_piece += tensor::cuda::Event::elapsed_ms(start_, first_);
    }
  } catch (...) {  // a faulted step: wait() reports it
  }
}

}  // namespace pie::cuda
