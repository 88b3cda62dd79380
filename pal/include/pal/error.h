// Typed errors of the pal layer (attention lab). Messages start with the operation in brackets and carry the
// offending value and where it was found, e.g.
// `[pal::decode_attention] sequence 3: page table entry 2 is page 9000, outside [0, 512)`.
#pragma once

#include <tensor/error.h>

namespace pal {

// Base of every error thrown by pal/: bad shapes, page tables, head dims, RoPE configurations.
class Error : public tensor::Error {
 public:
  using tensor::Error::Error;
};

}  // namespace pal
