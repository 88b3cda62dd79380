// The base weight that an adapter's pair at (site, layer) modifies: one lookup for fitting adapters to a
// model and for merging them into it (const or not, as the model is). The layer must be in range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pie/backend.h"
#include "pie/model.h"

namespace pie {

template <typename M>  // Model or const Model
auto* site_weight(M& model, ProjectionSite site, std::int32_t layer) {
  if (site == ProjectionSite::output) return &model.weights.output;
  auto& l = model.weights.layers[static_cast<std::size_t>(layer)];
  switch (site) {
    case ProjectionSite::q: return &l.wq;
    case ProjectionSite::k: return &l.wk;
    case ProjectionSite::v: return &l.wv;
    case ProjectionSite::o: return &l.wo;
    case ProjectionSite::gate: return &l.w_gate;
    case ProjectionSite::up: return &l.w_up;
    case ProjectionSite::down: return &l.w_down;
    case ProjectionSite::output: break;
  }
  return static_cast<decltype(&l.wq)>(nullptr);
}

}  // namespace pie
