// The model store's writes: blobs named by their sha256, manifests naming them, copies and
// removals. Blobs are written under a temporary name and renamed once their digest is known;
// manifests are written whole (temporary file + rename), after their blobs, so a name never points
// at a half file.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "pie/model_store.h"
#include "store/atomic_file.h"
#include "store/sha256.h"
#include "tensor/gguf.h"

namespace pie {
namespace {

namespace fs = std::filesystem;

nlohmann::json layer_json(std::string_view media_type, const std::string& digest,
                          std::uint64_t size) {
  return {{"mediaType", media_type}, {"digest", digest}, {"size", size}};
}

}  // namespace

std::string ModelStore::put_blob_file(const fs::path& file, const StoreProgress& progress) const {
  std::ifstream in(file, std::ios::binary);
  std::error_code ec;
  if (!in || fs::is_directory(file, ec))
    throw ModelError(fmt::format("[store] {}: cannot open", file.string()));
  const std::uint64_t total = fs::file_size(file, ec);
  store::AtomicFile out(root_ / "blobs" / "incoming");
  store::Sha256 hash;
  std::vector<std::uint8_t> chunk(1 << 20);
  while (in) {
    in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(chunk.size()));
    const std::span<const std::uint8_t> got(chunk.data(), static_cast<std::size_t>(in.gcount()));
    hash.update(got);
    out.write(got);
    if (progress) progress(out.size(), total);
  }
  if (in.bad()) throw ModelError(fmt::format("[store] {}: read error", file.string()));
  const std::string digest = "sha256:" + hash.hex_digest();
  const fs::path blob = blob_path(digest);
  if (fs::file_size(blob, ec) == out.size() && !ec)
    return digest;  // stored already (the copy is dropped)
  out.commit_as(blob);
  return digest;
}

std::string ModelStore::put_blob(std::string_view bytes) const {
  const std::string digest = "sha256:" + store::sha256_hex(bytes);
  const fs::path blob = blob_path(digest);
  std::error_code ec;
  if (fs::file_size(blob, ec) == bytes.size() && !ec) return digest;
  store::write_file_atomic(blob, bytes);
  return digest;
}

StoredModel ModelStore::write_model(std::string_view name, const std::string& model_digest,
                                    const ModelRecipe& recipe, const std::string& source) const {
  const ModelName parsed = ModelName::parse(name);
  std::error_code ec;
  const fs::path model_blob = blob_path(model_digest);
  const std::uint64_t size = fs::file_size(model_blob, ec);
  if (ec)
    throw ModelError(
        fmt::format("[store] {}: no such blob (digest {})", model_blob.string(), model_digest));
  nlohmann::json layers = nlohmann::json::array({layer_json(kModelMediaType, model_digest, size)});
  auto add_text = [&](std::string_view type, const std::string& text) {
    layers.push_back(layer_json(type, put_blob(text), text.size()));
  };
  if (!recipe.chat_template.empty()) add_text(kTemplateMediaType, recipe.chat_template);
  if (!recipe.system.empty()) add_text(kSystemMediaType, recipe.system);
  if (!recipe.parameters.empty()) add_text(kParamsMediaType, recipe.parameters);
  for (const std::string& license : recipe.licenses) add_text(kLicenseMediaType, license);
  if (!recipe.messages.empty()) add_text(kMessagesMediaType, recipe.messages);
  for (const fs::path& adapter : recipe.adapters) {
    const std::string digest = put_blob_file(adapter);
    layers.push_back(layer_json(kAdapterMediaType, digest, fs::file_size(blob_path(digest), ec)));
  }
  nlohmann::json manifest{
      {"schemaVersion", 2}, {"mediaType", kManifestMediaType}, {"layers", std::move(layers)}};
  if (!source.empty()) manifest["source"] = source;
  store::write_file_atomic(root_ / "manifests" / parsed.name / parsed.tag, manifest.dump() + "\n");
  return read_manifest(parsed);
}

StoredModel ModelStore::import_file(const fs::path& file, std::string_view name,
                                    const StoreProgress& progress) const {
  ModelName::parse(name);  // a bad name is refused before anything is copied
  try {
    tensor::gguf::File::open(file);
  } catch (const std::exception& e) {
    throw ModelError(fmt::format("[store] {}: not a GGUF model file the store can keep: {}",
                                 file.string(), e.what()));
  }
  const std::string digest = put_blob_file(file, progress);
  return write_model(name, digest, {}, fs::absolute(file).string());
}

StoredModel ModelStore::copy(std::string_view from, std::string_view to) const {
  const ModelName source = ModelName::parse(from);
  const ModelName target = ModelName::parse(to);
  read_manifest(source);  // ModelNotFoundError when absent, ModelError when malformed
  const std::string text = [&] {
    std::ifstream in(root_ / "manifests" / source.name / source.tag, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  store::write_file_atomic(root_ / "manifests" / target.name / target.tag, text);
  return read_manifest(target);
}

void ModelStore::remove(std::string_view name) const {
  const ModelName parsed = ModelName::parse(name);
  std::vector<std::string> digests;
  try {
    digests = read_manifest(parsed).layer_digests;
  } catch (const ModelNotFoundError&) {
    throw;
  } catch (const ModelError&) {
    // A malformed manifest can still be removed; its blobs are left (nothing says which they are).
  }
  const fs::path manifest = root_ / "manifests" / parsed.name / parsed.tag;
  std::error_code ec;
  if (!fs::remove(manifest, ec) || ec) {
    throw StoreError(fmt::format("[store] cannot remove {}: {}", manifest.string(),
                                 ec ? ec.message() : std::string("no such file")));
  }
  // Empty folders of the name go too (manifests/<name>/...), up to manifests/.
  for (fs::path dir = manifest.parent_path();
       dir != root_ / "manifests" && fs::is_empty(dir, ec) && !ec; dir = dir.parent_path()) {
    fs::remove(dir, ec);
  }
  std::set<std::string> named;
  for (const StoredModel& other : list())
    named.insert(other.layer_digests.begin(), other.layer_digests.end());
  for (const std::string& digest : digests) {
    if (named.contains(digest)) continue;
    const fs::path blob = blob_path(digest);
    fs::remove(blob, ec);
    if (ec)
      throw StoreError(fmt::format("[store] cannot remove {}: {}", blob.string(), ec.message()));
    fs::remove(root_ / "verified" / blob.filename(), ec);
  }
}

fs::path ModelStore::partial_path(std::string_view url) const {
  return root_ / "blobs" / fmt::format("partial-{}", store::sha256_hex(url).substr(0, 32));
}

}  // namespace pie
