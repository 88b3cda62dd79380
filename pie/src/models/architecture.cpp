#include "models/architecture.h"

#include <fmt/format.h>

#include "pie/error.h"

namespace pie::models {

const ArchitectureBuilder& builder_for(Architecture arch) {
  switch (arch) {
    case Architecture::llama: return kLlama;
    case Architecture::mistral: return kMistral;
    case Architecture::qwen2: return kQwen2;
    case Architecture::qwen3: return kQwen3;
  }
  throw ModelError(fmt::format("[runner] architecture {} is not supported (llama, mistral, qwen2, qwen3 are)",
                               architecture_name(arch)));
}

}  // namespace pie::models
