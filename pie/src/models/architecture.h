// One architecture's forward pass, built from the backend's operations (pie/backend.h): each
// architecture is a file of this folder that checks the weights it needs and calls the shared decoder
// pieces (decoder.h) in its own order. Adding an architecture is one such file, its entry in
// architecture.cpp, and its loader mapping (pie/src/model/).
#pragma once

#include <cstdint>
#include <span>

#include "pal/rope.h"
#include "pie/backend.h"
#include "pie/model.h"

namespace pie::models {

// What a builder works with during one forward pass.
struct ForwardContext {
  const Model& model;            // its config
  const ModelWeights& weights;   // resident in the backend's memory (Backend::upload)
  Backend& backend;
  KvStorage& kv;
  const StepLayout& layout;
  const pal::RopeTable& rope;               // covers every position of the step
  std::span<const std::int32_t> tokens;     // [n_tokens]
  std::span<const std::int32_t> logit_rows; // the rows whose logits are wanted
  Rows logits;                              // [logit_rows.size(), n_vocab]
};

struct ArchitectureBuilder {
  const char* name;
  // Throws ModelError naming the weight when the model lacks one the architecture needs, or has one of
  // the wrong shape or type.
  void (*check)(const Model& model);
  void (*forward)(const ForwardContext& context);
};

// The builder of `arch`. Throws ModelError naming the architecture when it has none.
const ArchitectureBuilder& builder_for(Architecture arch);

// The builders, one per file.
extern const ArchitectureBuilder kLlama, kMistral, kQwen2, kQwen3;

}  // namespace pie::models
