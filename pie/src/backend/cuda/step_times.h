// Where a CUDA step's wall time goes, for developers (ORCHARD_CUDA_STEP_TIMES=1): per step size
// (its tokens), the mean host time between steps (the engine's own work: scheduling, the layout,
// the rows' results), the host time begin() takes to queue the step (capturing and launching its
// graphs), the time wait() blocks, the device sampling's round trip, the device's time from begin()
// to the step's last kernel and to the end of its first captured piece (CUDA events: the latter
// tells whether the device works while the host captures the rest). Printed to standard error when
// the backend goes, one line per size, "orchard: cuda step times {json}".
// ORCHARD_CUDA_PROFILE_STEP=N opens the profiler's range (ncu --profile-from-start off) at the N-th
// step's begin() and closes it at the next one, so one step's kernels, its sampling included, can
// be profiled on their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>

#include "tensor/cuda/stream.h"

namespace pie::cuda {

class StepTimes {
 public:
  // Null unless ORCHARD_CUDA_STEP_TIMES=1 or ORCHARD_CUDA_PROFILE_STEP is set.
  static std::unique_ptr<StepTimes> from_env();
  ~StepTimes();

  // begin() entered (the stream idle) / left, its step `tokens` long; the events go on `stream`.
  void begin_entered(const tensor::cuda::Stream& stream);
  void begin_left(const tensor::cuda::Stream& stream, std::int64_t tokens);
  // The step's first captured piece launched on `stream`.
  void first_piece_launched(const tensor::cuda::Stream& stream);
  // wait() / sample_rows() entered and left.
  void wait_entered();
  void wait_left();
  void sample_entered();
  void sample_left();

 private:
  using Clock = std::chrono::steady_clock;
  struct Sums {
    std::int64_t steps = 0, sampled = 0;
    std::int64_t pieced = 0;
    double between = 0, queue = 0, wait = 0, sample = 0, device = 0, first_piece = 0;
  };
  StepTimes() = default;
  void close_step();  // the step under way's device time, into its size's sums

  bool log_ = false;
  std::int64_t profile_step_ = 0, n_steps_ = 0;
  bool profiling_ = false;
  std::map<std::int64_t, Sums> sums_;
  tensor::cuda::Event start_, stop_, first_;
  bool first_recorded_ = false;
  bool open_ = false;  // a step whose events are recorded and not yet read
  std::int64_t open_tokens_ = 0;
  Clock::time_point begin_at_, wait_at_, sample_at_, last_end_;
  bool have_last_end_ = false;
};

}  // namespace pie::cuda
