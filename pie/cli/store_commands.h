// What the model-store commands (pull, create, list, show, cp, rm, ps) share: the store they act
// on.
#pragma once

#include "pie/model_store.h"

namespace orchard::cli {

// The store of $ORCHARD_HOME/models (default ~/.cache/orchard/models).
inline pie::ModelStore command_store() { return pie::ModelStore(); }
inline constexpr const char* kStoreHelp =
    "The model store is $ORCHARD_HOME/models (default ~/.cache/orchard/models).";

}  // namespace orchard::cli
