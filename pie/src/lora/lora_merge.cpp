// Merging adapters into a base: each modified weight dequantized to f32, W += sum_i s_i B_i A_i added in
// adapter order, and kept as f32 (the writer converts it to the output type); other weights are shared.
#include <fmt/format.h>

#include <cstring>

#include "kernels/quant.h"
#include "lora/site_weight.h"
#include "pie/lora.h"

namespace pie {

std::shared_ptr<Model> merge_lora_adapters(const std::shared_ptr<const Model>& base,
                                           const std::vector<ScaledLora>& adapters) {
  if (!base) throw LoraError("[lora] merge: no base model");
  auto merged = std::make_shared<Model>(*base);
  merged->storage.push_back(base);  // the shared weights view the base's storage
  // The f32 copies made so far, by the weight they replace.
  std::vector<std::pair<Weight*, std::shared_ptr<std::vector<float>>>> copies;
  for (const ScaledLora& s : adapters) {
    if (!s.adapter) throw LoraError("[lora] merge: no adapter");
    const LoraAdapter& a = *s.adapter;
    for (const LoraPair& p : a.pairs) {
      if (p.layer >= merged->config.n_layer || a.pair(p.site, p.layer) != &p) {
        throw LoraError(fmt::format("[lora] merge: {} was not fitted to the model '{}'", a.path.string(), base->name));
      }
      if (p.site == ProjectionSite::output && merged->config.tied_embeddings) {
        // The output projection stops being the embedding table.
        merged->config.tied_embeddings = false;
      }
      Weight* w = site_weight(*merged, p.site, p.layer);
      if (n_out(*w) != p.n_out || n_in(*w) != p.n_in) {
        throw LoraError(fmt::format("[lora] merge: {}: {} does not fit the model '{}'", a.path.string(),
                                    projection_site_name(p.site), base->name));
      }
      std::shared_ptr<std::vector<float>> values;
      for (auto& [target, copy] : copies) {
        if (target == w) values = copy;
      }
      if (!values) {
        values = std::make_shared<std::vector<float>>(static_cast<std::size_t>(p.n_out * p.n_in));
        for (std::int64_t r = 0; r < p.n_out; ++r) {
          kernels::dequantize_row_ref(w->dtype(), static_cast<const std::byte*>(w->data()) + r * w->strides().bytes[0],
                                      values->data() + r * p.n_in, p.n_in);
        }
        copies.emplace_back(w, values);
      }
      const float scale = s.scale * p.scale;
      std::vector<float> row(static_cast<std::size_t>(p.n_in));
      for (std::int64_t o = 0; o < p.n_out; ++o) {
        std::fill(row.begin(), row.end(), 0.0f);
        for (std::int64_t k = 0; k < p.rank; ++k) {
          const float bk = p.b[static_cast<std::size_t>(o * p.rank + k)];
          const float* ak = p.a.data() + k * p.n_in;
          for (std::int64_t i = 0; i < p.n_in; ++i) row[static_cast<std::size_t>(i)] += bk * ak[i];
        }
        float* dst = values->data() + o * p.n_in;
        for (std::int64_t i = 0; i < p.n_in; ++i) dst[i] += scale * row[static_cast<std::size_t>(i)];
      }
    }
  }
  for (auto& [target, values] : copies) {
    *target = weight_view(values->data(), values->size() * sizeof(float), tensor::DType::f32, n_out(*target),
                          n_in(*target));
    merged->storage.push_back(values);
  }
  return merged;
}

}  // namespace pie
