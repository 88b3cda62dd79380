#include "server/store_routes.h"

#include <fmt/format.h>

#include <ctime>
#include <map>
#include <mutex>
#include <sstream>

#include "pie/model_details.h"
#include "pie/model_pull.h"
#include "pie/modelfile.h"
#include "server/api_error.h"
#include "store/sha256.h"

namespace pie::server {
namespace {

namespace fs = std::filesystem;

std::string iso_time(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A GGUF file's details, read once per blob (the header of a large vocabulary takes milliseconds).
ModelDetails cached_details(const fs::path& file) {
  static std::mutex mutex;
  static std::map<std::string, ModelDetails> cache;
  {
    std::lock_guard lock(mutex);
    if (const auto it = cache.find(file.string()); it != cache.end()) return it->second;
  }
  ModelDetails details = read_model_details(file);
  std::lock_guard lock(mutex);
  if (cache.size() > 256) cache.clear();
  cache[file.string()] = details;
  return details;
}

Json details_json(const ModelDetails& d) {
  return Json{{"parent_model", ""},
              {"format", "gguf"},
              {"family", d.family},
              {"families", Json::array({d.family})},
              {"parameter_size", d.parameter_size},
              {"quantization_level", d.quantization}};
}

// The details of the first model (which may come from no file): from the loaded model.
Json first_details(const ServedModel& served) {
  const Model& m = served.model();
  const std::string arch = architecture_name(m.config.arch);
  return Json{{"parent_model", ""},
              {"format", m.path.extension() == ".gguf" ? "gguf" : "orchard"},
              {"family", arch},
              {"families", Json::array({arch})},
              {"parameter_size",
               format_parameter_size(static_cast<std::uint64_t>(m.weights.n_parameters()))},
              {"quantization_level", m.describe()}};
}

const ModelStore& require_store(const ModelRegistry& registry) {
  if (registry.store() == nullptr) {
    throw ApiError(501, "invalid_request_error",
                   "this server has no model store (started with --no-store)", {}, "no_store");
  }
  return *registry.store();
}

std::string required_string(const Json& body, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (body.contains(key)) {
      if (!body[key].is_string() || body[key].get<std::string>().empty()) {
        throw ApiError::invalid(fmt::format("'{}' must be a non-empty string", key), key);
      }
      return body[key].get<std::string>();
    }
  }
  throw ApiError::invalid(fmt::format("'{}' is required", *keys.begin()), *keys.begin());
}

// The store's and the Modelfile's errors as API errors.
template <typename F>
auto store_call(F&& f) {
  try {
    return f();
  } catch (const ModelfileError& e) {
    throw ApiError(400, "invalid_request_error", e.what(), "modelfile", "invalid_modelfile");
  } catch (const ModelNotFoundError& e) {
    throw ApiError(404, "invalid_request_error", e.what(), "model", "model_not_found");
  } catch (const StoreError& e) {
    throw ApiError(507, "server_error", e.what(), {}, "store_unwritable");
  } catch (const DownloadError& e) {
    throw ApiError(502, "server_error", e.what(), {}, "download_interrupted");
  } catch (const ModelError& e) {
    throw ApiError(400, "invalid_request_error", e.what(), "model", "invalid_model");
  }
}

// "sha256:<64 hex>" (or Ollama's file form "sha256-<hex>") as "sha256:<hex>"; 400 naming `field` otherwise.
std::string blob_digest(const std::string& text, const std::string& field) {
  std::string hex = text.size() == 71 && (text.starts_with("sha256:") || text.starts_with("sha256-"))
                        ? text.substr(7)
                        : std::string();
  if (hex.empty() || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw ApiError::invalid(
        fmt::format("'{}' is not a blob digest (sha256:<64 lower-case hex digits>)", text), field);
  }
  return "sha256:" + hex;
}

// 'files' / 'adapters' of /api/create: {file name: digest}, each an uploaded blob; their files.
std::vector<std::pair<std::string, fs::path>> uploaded_files(const ModelStore& store, const Json& body,
                                                             const char* key) {
  std::vector<std::pair<std::string, fs::path>> out;
  if (!body.contains(key) || body[key].is_null()) return out;
  if (!body[key].is_object()) {
    throw ApiError::invalid(fmt::format("'{}' must be an object of file names to blob digests", key), key);
  }
  for (const auto& [file, digest] : body[key].items()) {
    if (!digest.is_string()) {
      throw ApiError::invalid(fmt::format("'{}.{}' must be a digest string", key, file), key);
    }
    const std::string d = blob_digest(digest.get<std::string>(), key);
    const std::optional<fs::path> path = store.blob_file(d);
    if (!path) {
      throw ApiError::invalid(fmt::format("'{}.{}': blob {} is not on the server (upload it first: POST "
                                          "/api/blobs/{})",
                                          key, file, d, d),
                              key);
    }
    out.emplace_back(file, *path);
  }
  return out;
}

// A JSON value as a Modelfile value: quoted when it holds quotes or lines.
std::string modelfile_value(const Json& v) {
  const std::string text = v.is_string() ? v.get<std::string>() : v.dump();
  return text.find_first_of("\"\n") == std::string::npos ? text : "\"\"\"" + text + "\"\"\"";
}

}  // namespace

Json tags_response(const ModelRegistry& registry) {
  Json list = Json::array();
  const ServedModel& first = registry.first();
  std::error_code ec;
  const fs::path& path = first.model().path;
  const std::uint64_t size = path.empty() ? 0 : fs::file_size(path, ec);
  for (const std::string& name : first.names()) {
    list.push_back(Json{{"name", name},
                        {"model", name},
                        {"modified_at", iso_time(std::chrono::system_clock::now())},
                        {"size", ec ? 0 : size},
                        {"digest", fmt::format("{:016x}", std::hash<std::string>{}(first.name()))},
                        {"details", first_details(first)}});
  }
  if (registry.store() != nullptr) {
    for (const StoredModel& m : registry.store()->list()) {
      const std::string name = m.name.str();
      if (first.serves(name)) continue;
      Json details;
      try {
        details = details_json(cached_details(m.file));
      } catch (const std::exception&) {
        details = Json::object();  // listed; /api/show or a request says what is wrong with it
      }
      list.push_back(Json{{"name", name},
                          {"model", name},
                          {"modified_at", iso_time(std::chrono::file_clock::to_sys(m.modified))},
                          {"size", m.size},
                          {"digest", m.manifest_digest},
                          {"details", std::move(details)}});
    }
  }
  return Json{{"models", std::move(list)}};
}

Json openai_models_response(const ModelRegistry& registry) {
  Json list = Json::array();
  for (const std::string& name : registry.names()) {
    list.push_back(
        Json{{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "orchard"}});
  }
  return Json{{"object", "list"}, {"data", std::move(list)}};
}

Json show_response(const ModelRegistry& registry, const Json& body) {
  const std::string asked = required_string(body, {"model", "name"});
  if (registry.is_first(asked)) {
    const ServedModel& served = registry.first();
    const Model& m = served.model();
    const std::string arch = architecture_name(m.config.arch);
    Json info{{"general.architecture", arch},
              {"general.parameter_count", m.weights.n_parameters()},
              {arch + ".context_length", m.config.context_length},
              {arch + ".embedding_length", m.config.n_embd},
              {arch + ".block_count", m.config.n_layer},
              {arch + ".attention.head_count", m.config.n_head},
              {arch + ".attention.head_count_kv", m.config.n_kv_head},
              {"tokenizer.ggml.tokens_count", m.tokenizer->vocab_size()}};
    return Json{
        {"license", ""},
        {"modelfile", fmt::format("FROM {}\n", m.path.empty() ? served.name() : m.path.string())},
        {"parameters", fmt::format("num_ctx {}", served.context_length())},
        {"template", served.chat_template().source()},
        {"details", first_details(served)},
        {"model_info", std::move(info)},
        {"capabilities", Json::array({"completion", "tools"})},
        {"modified_at", iso_time(std::chrono::system_clock::now())}};
  }
  const std::optional<std::string> name = registry.stored_name(asked);
  if (!name) {
    throw ApiError(404, "invalid_request_error", fmt::format("model '{}' not found", asked),
                   "model", "model_not_found");
  }
  const StoredModel m = store_call([&] { return registry.store()->find(*name); });
  const ModelDetails d = store_call([&] { return cached_details(m.file); });
  Json info{{"general.architecture", d.family},
            {"general.parameter_count", d.parameter_count},
            {d.family + ".context_length", d.context_length},
            {d.family + ".embedding_length", d.embedding_length},
            {d.family + ".block_count", d.block_count},
            {d.family + ".attention.head_count", d.head_count},
            {d.family + ".attention.head_count_kv", d.head_count_kv},
            {"tokenizer.ggml.tokens_count", d.vocab_size}};
  if (!d.name.empty()) info["general.name"] = d.name;
  if (d.embedding) info[d.family + ".pooling_type"] = d.pooling;
  const std::string modelfile = modelfile_text(m);
  std::string parameters;
  std::istringstream lines(modelfile);
  for (std::string row; std::getline(lines, row);) {
    if (row.starts_with("PARAMETER ")) parameters += row.substr(10) + "\n";
  }
  std::string license;
  for (const std::string& l : m.licenses) license += (license.empty() ? "" : "\n") + l;
  Json out{{"license", license},
           {"modelfile", modelfile},
           {"parameters", parameters},
           {"template", m.chat_template.empty() ? d.chat_template : m.chat_template},
           {"system", m.system},
           {"details", details_json(d)},
           {"model_info", std::move(info)},
           {"capabilities", d.embedding ? Json::array({"embedding"}) : Json::array({"completion", "tools"})},
           {"modified_at", iso_time(std::chrono::file_clock::to_sys(m.modified))}};
  if (!m.messages.empty()) out["messages"] = Json::parse(m.messages);
  return out;
}

Json ps_response(const ModelRegistry& registry) {
  Json list = Json::array();
  for (const LoadedModelInfo& info : registry.loaded()) {
    Json details = Json::object();
    if (registry.is_first(info.name)) {
      details = first_details(registry.first());
    } else if (const ModelStore* store = registry.store()) {
      try {
        details = details_json(cached_details(store->find(info.name).file));
      } catch (const std::exception&) {
      }
    }
    // Never: far ahead, as Ollama writes a negative keep_alive.
    const std::string expires = info.expires ? iso_time(*info.expires) : "2318-01-01T00:00:00Z";
    list.push_back(Json{{"name", info.name},
                        {"model", info.name},
                        {"size", info.size},
                        {"digest", info.digest},
                        {"details", std::move(details)},
                        {"expires_at", expires},
                        {"size_vram", 0}});
  }
  return Json{{"models", std::move(list)}};
}

Json create_model_route(ModelRegistry& registry, const Json& body) {
  const ModelStore& store = require_store(registry);
  const std::string name = required_string(body, {"model", "name"});
  if (!ModelName::valid(name))
    throw ApiError::invalid(fmt::format("'{}' is not a model name", name), "model");
  Modelfile modelfile;
  if (body.contains("modelfile")) {  // the older API: the Modelfile's text
    if (!body["modelfile"].is_string())
      throw ApiError::invalid("'modelfile' must be a string", "modelfile");
    modelfile = store_call(
        [&] { return parse_modelfile(body["modelfile"].get<std::string>(), "modelfile"); });
  } else {
    // The newer API's fields, read through the Modelfile parser so both are checked the same way.
    // The model: 'from' (a stored name or a path), or the one GGUF among the uploaded 'files'.
    const auto files = uploaded_files(store, body, "files");
    std::string from;
    if (!files.empty()) {
      if (body.contains("from") && !body["from"].is_null()) {
        throw ApiError::invalid("give 'from' or 'files', not both", "files");
      }
      if (files.size() != 1) {
        throw ApiError::invalid(
            fmt::format("'files' holds {} files; the store takes one GGUF model file", files.size()),
            "files");
      }
      from = files.front().second.string();
    } else {
      from = required_string(body, {"from"});
    }
    std::string text = "FROM " + modelfile_value(Json(from)) + "\n";
    for (const auto& [file, path] : uploaded_files(store, body, "adapters")) {
      text += "ADAPTER " + modelfile_value(Json(path.string())) + "\n";
    }
    for (const char* key : {"template", "system"}) {
      if (!body.contains(key)) continue;
      if (!body[key].is_string())
        throw ApiError::invalid(fmt::format("'{}' must be a string", key), key);
      text += fmt::format("{} \"\"\"{}\"\"\"\n", key, body[key].get<std::string>());
    }
    if (body.contains("license")) {
      const Json& l = body["license"];
      const Json licenses = l.is_array() ? l : Json::array({l});
      for (const Json& one : licenses) {
        if (!one.is_string())
          throw ApiError::invalid("'license' must be a string or a list of strings", "license");
        text += fmt::format("LICENSE \"\"\"{}\"\"\"\n", one.get<std::string>());
      }
    }
    if (body.contains("parameters")) {
      if (!body["parameters"].is_object())
        throw ApiError::invalid("'parameters' must be an object", "parameters");
      for (const auto& [key, value] : body["parameters"].items()) {
        const Json values = value.is_array() ? value : Json::array({value});
        for (const Json& v : values)
          text += fmt::format("PARAMETER {} {}\n", key, modelfile_value(v));
      }
    }
    if (body.contains("messages")) {
      if (!body["messages"].is_array())
        throw ApiError::invalid("'messages' must be an array", "messages");
      for (const Json& m : body["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
            !m.contains("content") || !m["content"].is_string()) {
          throw ApiError::invalid("'messages' items must be {\"role\", \"content\"} strings",
                                  "messages");
        }
        text += fmt::format("MESSAGE {} \"\"\"{}\"\"\"\n", m["role"].get<std::string>(),
                            m["content"].get<std::string>());
      }
    }
    if (body.contains("quantize") && !body["quantize"].is_null()) {
      throw ApiError::invalid(
          "'quantize' is not supported: quantize with `orchard convert --type`, then create from the "
          "file",
          "quantize");
    }
    modelfile = store_call([&] { return parse_modelfile(text, "request"); });
  }
  const StoredModel created =
      store_call([&] { return create_model(store, name, modelfile, fs::current_path()); });
  registry.forget(created.name.str());  // a model of that name loaded before is reloaded as created
  return Json{{"status", "success"}};
}

void put_blob_route(ModelRegistry& registry, const std::string& digest, const std::string& body) {
  const ModelStore& store = require_store(registry);
  const std::string want = blob_digest(digest, "digest");
  const std::string got = "sha256:" + pie::store::sha256_hex(body);
  if (got != want) {
    throw ApiError::invalid(
        fmt::format("the body's sha256 is {}, not the digest it was sent under ({}): nothing stored",
                    got, want),
        "digest");
  }
  store_call([&] { return store.put_blob(body); });
}

bool blob_stored(const ModelRegistry& registry, const std::string& digest) {
  return require_store(registry).blob_file(blob_digest(digest, "digest")).has_value();
}

void copy_model_route(ModelRegistry& registry, const Json& body) {
  const ModelStore& store = require_store(registry);
  const std::string source = required_string(body, {"source"});
  const std::string destination = required_string(body, {"destination"});
  if (!ModelName::valid(source) || !store.contains(source)) {
    throw ApiError(404, "invalid_request_error", fmt::format("model '{}' not found", source),
                   "source", "model_not_found");
  }
  if (!ModelName::valid(destination)) {
    throw ApiError::invalid(fmt::format("'{}' is not a model name", destination), "destination");
  }
  store_call([&] { return store.copy(source, destination); });
  registry.forget(ModelName::parse(destination).str());
}

void delete_model_route(ModelRegistry& registry, const Json& body) {
  const ModelStore& store = require_store(registry);
  const std::string asked = required_string(body, {"model", "name"});
  if (!ModelName::valid(asked) || !store.contains(asked)) {
    throw ApiError(404, "invalid_request_error", fmt::format("model '{}' not found", asked),
                   "model", "model_not_found");
  }
  store_call([&] {
    store.remove(asked);
    return 0;
  });
  registry.forget(ModelName::parse(asked).str());
}

void pull_model_route(ModelRegistry& registry, const Json& body,
                      const std::function<void(const Json&)>& emit) {
  const ModelStore& store = require_store(registry);
  const std::string source = required_string(body, {"model", "name"});
  std::string target;
  if (body.contains("model") && body.contains("name") && body["name"].is_string()) {
    target = body["name"].get<std::string>();
  }
  if (!is_url(source) && ModelName::valid(source) && store.contains(source) && target.empty()) {
    emit(Json{{"status", "success"}});  // stored already; there is no registry to update it from
    return;
  }
  std::error_code ec;
  if (!is_url(source) && !fs::is_regular_file(source, ec)) {
    throw ApiError(
        404, "invalid_request_error",
        fmt::format("model '{}' not found: pull takes an http(s) URL or a GGUF path on the server",
                    source),
        "model", "model_not_found");
  }
  PullProgress progress;
  std::string digest = fmt::format("sha256:{}", std::string(64, '0'));
  progress.status = [&](const std::string& status) { emit(Json{{"status", status}}); };
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  progress.bytes = [&](std::uint64_t done, std::uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::milliseconds(200) && done != total) return;
    last = now;
    emit(
        Json{{"status", fmt::format("pulling {}", source)}, {"total", total}, {"completed", done}});
  };
  const StoredModel model = store_call([&] { return pull_model(store, source, target, progress); });
  registry.forget(model.name.str());
}

void apply_modelfile_defaults(Json& body, Api api, const StoredModel& model) {
  if (!body.is_object()) return;
  const bool ollama = api == Api::ollama_chat || api == Api::ollama_generate;
  const nlohmann::json fields = ollama ? sampling_options(model) : openai_sampling_fields(model);
  if (!fields.empty()) {
    Json& target = ollama ? body["options"] : body;
    if (target.is_null()) target = Json::object();
    if (target.is_object()) {
      for (auto it = fields.begin(); it != fields.end(); ++it) {
        if (!target.contains(it.key())) target[it.key()] = Json::parse(it->dump());
      }
    }
  }
  // MESSAGEs open a chat's conversation, after its system messages (Ollama's history).
  if (!model.messages.empty() && (api == Api::openai_chat || api == Api::ollama_chat) &&
      body.contains("messages") && body["messages"].is_array() && !body["messages"].empty()) {
    const Json history = Json::parse(model.messages, nullptr, false);
    Json& messages = body["messages"];
    auto at = messages.begin();
    while (at != messages.end() && at->is_object() && at->contains("role") &&
           ((*at)["role"] == "system" || (*at)["role"] == "developer")) {
      ++at;
    }
    if (history.is_array()) messages.insert(at, history.begin(), history.end());
  }
  if (model.system.empty()) return;
  if (api == Api::ollama_generate) {
    if (!body.contains("system") && !body.contains("messages")) body["system"] = model.system;
    return;
  }
  if (api == Api::openai_completion || !body.contains("messages") || !body["messages"].is_array())
    return;
  Json& messages = body["messages"];
  for (const Json& m : messages) {
    if (m.is_object() && m.contains("role") && (m["role"] == "system" || m["role"] == "developer"))
      return;
  }
  if (messages.empty()) return;  // nothing to generate (a load): no conversation to start
  messages.insert(messages.begin(), Json{{"role", "system"}, {"content", model.system}});
}

}  // namespace pie::server
