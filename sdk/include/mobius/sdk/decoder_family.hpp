// mobius/sdk/decoder_family.hpp - a pack of decoder families as a table: per model type, its
// row of config defaults (under the family's own key spellings), the keys of its own, and its
// decoder spec. register_decoder_families registers every row for text generation.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "mobius/sdk/decoder.hpp"
#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/plugin.hpp"

namespace mobius::nn {

struct DecoderFamily {
  DecoderDefaults defaults;
  // Reads the family's own keys of config.json (`r`) into `c`; keys only the spec needs go to
  // `extra`, which the normalized config carries beside the ArchitectureConfig fields. May be
  // null.
  void (*own)(const ConfigReader& r, ArchitectureConfig& c, nlohmann::json& extra) = nullptr;
  // The spec the model is built with, from the normalized config.
  DecoderSpec (*spec)(const nlohmann::json& normalized) = nullptr;
};

// The normalized config of `model_type`'s row: read_decoder_config with the row's defaults, its
// own keys, validate(), and the extra keys beside.
nlohmann::json parse_decoder_family(const DecoderFamily& family, const std::string& model_type,
                                    const nlohmann::json& config_json);

// Registers each row for text generation: parse_decoder_family, then CausalLMModel(cfg, spec).
void register_decoder_families(PluginRegistrar& r, const std::map<std::string, DecoderFamily>& families);

}  // namespace mobius::nn
