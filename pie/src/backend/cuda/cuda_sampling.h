// Sampling on the CUDA backend: the rows of a step's logits sampled where they are (sampling_ops.cu), so
// that only each row's token, logprob and top_logprobs come back to the host (a few hundred bytes a row,
// not the vocabulary's 4 bytes a token). Private to the CUDA backend.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pie/device_sampling.h"
#include "tensor/cuda/graph.h"
#include "tensor/cuda/memory_pool.h"
#include "tensor/cuda/stream.h"

namespace pie::cuda {

// Mirrors of sampling_ops.cu's row descriptor and result.
struct SampleRowDesc {
  double u = 0;
  std::int64_t logits_row = 0;
  std::int64_t mask_off = -1;
  std::int32_t n_words = 0;
  std::int32_t rep_off = 0, rep_n = 0;
  std::int32_t cnt_off = 0, cnt_n = 0;
  std::int32_t bias_off = 0, bias_n = 0;
  std::int32_t top_k = 0;
  std::int32_t top_logprobs = 0;
  std::int32_t want_logprob = 0;
  float temperature = 0, top_p = 1, min_p = 0, rep = 1, freq = 0, pres = 0;
};
struct SampleRowOut {
  std::int32_t status = 0, token = 0, bad_token = 0, n_top = 0;
  float logprob = 0, bad_value = 0;
  std::int32_t top_ids[20];
  float top_lp[20];
};
static_assert(sizeof(SampleRowDesc) == 88 && sizeof(SampleRowOut) == 184);

class CudaSampling {
 public:
  explicit CudaSampling(const tensor::cuda::Stream* stream) : stream_(stream) {}

  // Samples `rows` of logits [n_logit_rows, n_vocab] (device memory) into out; returns once the results
  // are on the host. Throws pie::Error on a row outside the logits or a params-less row, the device's
  // errors as tensor errors.
  void sample(const float* logits, std::int64_t n_logit_rows, std::int64_t n_vocab,
              std::span<const DeviceSampleRow> rows, std::span<DeviceSampleResult> out);

 private:
  const tensor::cuda::Stream* stream_;
  std::vector<SampleRowDesc> descs_;
  std::vector<std::int32_t> ints_;
  std::vector<std::uint32_t> masks_;
  struct MaskSpan {  // a row's mask as handed in, and where its upload starts in masks_
    const std::uint32_t* data;
    std::int32_t n_words;
    std::int64_t offset;
  };
  std::vector<MaskSpan> mask_spans_;
  tensor::cuda::HostBuffer staging_, results_;  // page-locked: the inputs up, the results down
  tensor::cuda::DeviceBuffer inputs_, outputs_, work_;
};

}  // namespace pie::cuda
