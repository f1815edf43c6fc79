// decoder_family.cpp - decoder packs as tables (decoder_family.hpp).
#include "mobius/sdk/decoder_family.hpp"

#include <memory>

namespace mobius::nn {

nlohmann::json parse_decoder_family(const DecoderFamily& family, const std::string& model_type,
                                    const nlohmann::json& config_json) {
  ConfigReader r(text_config(config_json), "config.json");
  ArchitectureConfig c = read_decoder_config(r, model_type, family.defaults);
  nlohmann::json extra = nlohmann::json::object();
  if (family.own) family.own(r, c, extra);
  c.validate();
  nlohmann::json out = c;
  out.update(extra);
  return out;
}

void register_decoder_families(PluginRegistrar& r, const std::map<std::string, DecoderFamily>& families) {
  // The table outlives the plugin's callbacks: a copy owned by them.
  auto table = std::make_shared<const std::map<std::string, DecoderFamily>>(families);
  std::vector<std::string> types;
  for (const auto& [type, f] : *table) types.push_back(type);
  r.add_each(
      types, "text-generation",
      [table](const std::string& type, const nlohmann::json& raw) {
        return parse_decoder_family(table->at(type), type, raw);
      },
      [table](BuildContext& ctx, const nlohmann::json& j) {
        const ArchitectureConfig cfg = j.get<ArchitectureConfig>();
        const DecoderFamily& f = table->at(cfg.model_type);
        build_text_generation(ctx, CausalLMModel(cfg, f.spec ? f.spec(j) : DecoderSpec{}));
      });
}

}  // namespace mobius::nn
