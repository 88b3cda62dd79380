// The -m MODEL option of the commands that run a model (run, serve, and the others that load one): what
// it accepts, said once. pie::open_model (pie/model_store.h) resolves it.
#pragma once

namespace orchard::cli {

inline constexpr const char* kModelOptionHelp =
    "a .gguf file, a Hugging Face folder, a llama2.c checkpoint, a stored model's name (name[:tag]), or "
    "orchard-random (random weights, for tests). Default: smollm2:135m-instruct-q4_1 "
    "(SmolLM2-135M-Instruct, fetched into the model store by scripts/fetch-models.sh)";

}  // namespace orchard::cli
