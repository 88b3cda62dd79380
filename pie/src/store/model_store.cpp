#include "pie/model_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pie/engine.h"
#include "store/sha256.h"

namespace pie {
namespace {

namespace fs = std::filesystem;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

// One part of a name or a tag: 1..128 name characters, not starting with '.' or '-' (no "..", no
// hidden files, nothing a path could climb out of the store with).
bool valid_part(std::string_view part) {
  if (part.empty() || part.size() > 128 || part[0] == '.' || part[0] == '-') return false;
  return std::all_of(part.begin(), part.end(), name_char);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// "size mtime" of a file, the key under which its sha256 check is recorded.
std::string stat_key(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  const auto time = fs::last_write_time(path, ec);
  if (ec) return {};
  return fmt::format("{} {}", size, time.time_since_epoch().count());
}

std::string fetch_hint(const ModelName& name) {
  return name.str() == kDefaultModelName ? "; run scripts/fetch-models.sh to fetch it, or give -m MODEL" : "";
}

}  // namespace

bool ModelName::valid(std::string_view text) {
  const std::size_t colon = text.find(':');
  std::string_view name = text.substr(0, colon);
  if (colon != std::string_view::npos && !valid_part(text.substr(colon + 1))) return false;
  if (name.empty()) return false;
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = name.find('/', start);
    if (!valid_part(name.substr(start, slash - start))) return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

ModelName ModelName::parse(std::string_view text) {
  if (!valid(text)) {
    throw ModelNotFoundError(fmt::format(
        "[store] '{}' is not a model name (name[:tag]: lower-case letters, digits, '.', '_', '-')", text));
  }
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) return {std::string(text), "latest"};
  return {std::string(text.substr(0, colon)), std::string(text.substr(colon + 1))};
}

ModelStore::ModelStore(fs::path root) : root_(std::move(root)) {}

fs::path ModelStore::default_root() {
  if (const char* home = std::getenv("ORCHARD_HOME"); home != nullptr && *home != '\0') {
    return fs::path(home) / "models";
  }
  const char* user_home = std::getenv("HOME");
  return fs::path(user_home != nullptr && *user_home != '\0' ? user_home : ".") / ".cache" / "orchard" / "models";
}

namespace {

bool valid_digest(std::string_view digest) {
  const std::string_view prefix = "sha256:";
  if (!digest.starts_with(prefix) || digest.size() != prefix.size() + 64) return false;
  return std::all_of(digest.begin() + 7, digest.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_model_layer(const std::string& media_type) {
  return media_type == kModelMediaType || media_type == "application/vnd.ollama.image.model";
}

}  // namespace

fs::path ModelStore::blob_path(std::string_view digest) const {
  return root_ / "blobs" / fmt::format("sha256-{}", digest.substr(std::min<std::size_t>(digest.size(), 7)));
}

std::optional<fs::path> ModelStore::blob_file(std::string_view digest) const {
  fs::path path = blob_path(digest);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  return path;
}

StoredModel ModelStore::read_manifest(const ModelName& name) const {
  const fs::path manifest = root_ / "manifests" / name.name / name.tag;
  std::error_code ec;
  if (!fs::is_regular_file(manifest, ec)) {
    throw ModelNotFoundError(
        fmt::format("[store] no model named '{}' in {}{}", name.str(), root_.string(), fetch_hint(name)));
  }
  const std::string text = read_text(manifest);
  StoredModel out;
  out.name = name;
  out.manifest_digest = store::sha256_hex(text);
  out.modified = fs::last_write_time(manifest, ec);
  // The small layers (template, system, ...) are read whole; a missing or altered one is an error too.
  auto read_layer = [&](const std::string& digest) {
    const std::string bytes = read_text(blob_path(digest));
    if (store::sha256_hex(bytes) != digest.substr(7)) {
      throw std::runtime_error(fmt::format("layer {} is missing or corrupt", digest));
    }
    return bytes;
  };
  try {
    const nlohmann::json doc = nlohmann::json::parse(text);
    const nlohmann::json& layers = doc.at("layers");
    if (!layers.is_array() || layers.empty()) throw std::runtime_error("'layers' must be a non-empty array");
    bool found = false;
    for (const nlohmann::json& layer : layers) {
      const std::string digest = layer.at("digest").get<std::string>();
      if (!valid_digest(digest)) {
        throw std::runtime_error(fmt::format("digest '{}' is not sha256:<64 hex digits>", digest));
      }
      const std::string type = layer.value("mediaType", std::string());
      if (!found && (layers.size() == 1 || is_model_layer(type))) {
        found = true;
        out.digest = digest;
        out.size = layer.at("size").get<std::uint64_t>();
        out.layer_digests.insert(out.layer_digests.begin(), digest);
        continue;
      }
      out.layer_digests.push_back(digest);
      if (type == kTemplateMediaType) {
        out.chat_template = read_layer(digest);
      } else if (type == kSystemMediaType) {
        out.system = read_layer(digest);
      } else if (type == kParamsMediaType) {
        out.parameters = read_layer(digest);
      } else if (type == kLicenseMediaType) {
        out.licenses.push_back(read_layer(digest));
      } else if (type == kMessagesMediaType) {
        out.messages = read_layer(digest);
      } else if (type == kAdapterMediaType) {
        out.adapters.push_back(blob_path(digest));
      }
    }
    if (!found) throw std::runtime_error("no layer holds the model file");
    if (doc.contains("source") && doc["source"].is_string()) out.source = doc["source"].get<std::string>();
  } catch (const std::exception& e) {
    throw ModelError(fmt::format("[store] {}: malformed manifest: {}", manifest.string(), e.what()));
  }
  out.file = blob_path(out.digest);
  return out;
}

void ModelStore::verify_blob(const StoredModel& model) const {
  std::error_code ec;
  const std::uint64_t size = fs::file_size(model.file, ec);
  if (ec) {
    throw ModelError(fmt::format("[store] {}: the file of '{}' is missing{}", model.file.string(), model.name.str(),
                                 fetch_hint(model.name)));
  }
  if (size != model.size) {
    throw ModelError(fmt::format("[store] {}: the file of '{}' has {} bytes, its manifest says {} (truncated or "
                                 "replaced){}",
                                 model.file.string(), model.name.str(), size, model.size, fetch_hint(model.name)));
  }
  const std::string hex = model.digest.substr(7);
  const fs::path stamp = root_ / "verified" / model.file.filename();
  const std::string key = stat_key(model.file);
  if (!key.empty() && read_text(stamp) == key) return;
  const std::string got = store::sha256_file(model.file);
  if (got != hex) {
    throw ModelError(fmt::format("[store] {}: the file of '{}' has sha256 {}, its manifest says {} (corrupt){}",
                                 model.file.string(), model.name.str(), got, hex, fetch_hint(model.name)));
  }
  // Recorded only when the store is writable; a read-only store is checked at every use instead.
  fs::create_directories(stamp.parent_path(), ec);
  const fs::path tmp = fs::path(stamp).concat(".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << key;
    if (!out) return;
  }
  fs::rename(tmp, stamp, ec);
}

StoredModel ModelStore::find(std::string_view name) const {
  StoredModel model = read_manifest(ModelName::parse(name));
  verify_blob(model);
  return model;
}

bool ModelStore::contains(std::string_view name) const {
  if (!ModelName::valid(name)) return false;
  const ModelName parsed = ModelName::parse(name);
  std::error_code ec;
  return fs::is_regular_file(root_ / "manifests" / parsed.name / parsed.tag, ec);
}

std::vector<StoredModel> ModelStore::list() const {
  std::vector<StoredModel> out;
  const fs::path manifests = root_ / "manifests";
  std::error_code ec;
  if (!fs::is_directory(manifests, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(manifests, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const fs::path rel = fs::relative(it->path(), manifests, ec);
    if (ec || !rel.has_parent_path()) continue;
    const std::string text = rel.parent_path().generic_string() + ":" + rel.filename().string();
    if (!ModelName::valid(text)) continue;
    try {
      out.push_back(read_manifest(ModelName::parse(text)));
    } catch (const ModelError&) {
      // A malformed manifest is reported when it is used, not when the store is listed.
    }
  }
  std::sort(out.begin(), out.end(), [](const StoredModel& a, const StoredModel& b) { return a.name.str() < b.name.str(); });
  return out;
}

OpenedModel open_model(const std::optional<std::string>& given, const ModelStore& store, const LoadOptions& options) {
  const std::string asked = given && *given != "default" ? *given : std::string(kDefaultModelName);
  if (asked == kRandomModelName) return {random_model(), std::string(kRandomModelName)};
  std::error_code ec;
  if (fs::exists(asked, ec)) return {load_model(asked, options), {}};
  if (!ModelName::valid(asked)) {
    throw ModelNotFoundError(fmt::format("[model] {}: no such file or folder", asked));
  }
  const ModelName name = ModelName::parse(asked);
  if (name.str() != kDefaultModelName && !store.contains(name.str())) {
    throw ModelNotFoundError(fmt::format("[model] '{}': no such file or folder, nor a model stored in {}", asked,
                                         store.root().string()));
  }
  StoredModel stored = store.find(name.str());
  std::shared_ptr<const Model> model = load_model(stored.file, options);
  if (!stored.chat_template.empty()) {
    // The Modelfile's template replaces the file's; the weights are shared, not copied.
    auto with_template = std::make_shared<Model>(*model);
    with_template->chat_template = stored.chat_template;
    model = std::move(with_template);
  }
  return {std::move(model), stored.name.str(), std::move(stored)};
}

}  // namespace pie
