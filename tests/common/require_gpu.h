// GPU tests skip, with the reason, where no usable CUDA GPU is present (CI has none): one definition for
// every suite that runs kernels on the device.
#pragma once

#include <gtest/gtest.h>

#include "tensor/cuda/device.h"

#define REQUIRE_GPU()                                                                                        \
  do {                                                                                                       \
    if (!tensor::cuda::available()) GTEST_SKIP() << "no usable GPU: " << tensor::cuda::unavailable_reason(); \
  } while (0)
