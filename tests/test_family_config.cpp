// test_family_config.cpp - the typed family configs (family_config.hpp): read from config.json
// through their tables, carried through the normalized config's JSON, checked naming the key.
#include <doctest/doctest.h>

#include "mobius/sdk/config.hpp"
#include "sdk_util.hpp"

using namespace mobius;
using nlohmann::json;
using SdkError = mobius::sdk::Error;

TEST_CASE("family config: ArchitectureConfig round-trips through JSON with its family configs") {
  ArchitectureConfig c = test::llama_tiny_config();
  c.num_nextn_predict_layers = 1;
  c.moe = MoEConfig{.moe_intermediate_size = 32, .n_routed_experts = 16, .num_experts_per_tok = 4,
                    .decoder_sparse_step = 2, .mlp_only_layers = {0, 3}, .scoring = "sigmoid",
                    .routed_scaling_factor = 2.5};
  c.mla = MLAConfig{.q_lora_rank = 0, .kv_lora_rank = 32, .qk_nope_head_dim = 16,
                    .qk_rope_head_dim = 16, .v_head_dim = 12, .attention_bias = true};
  const json j = c;
  CHECK(j.at("linear_attn").is_null());
  CHECK(j.at("moe").at("mlp_only_layers") == json::array({0, 3}));
  const auto back = j.get<ArchitectureConfig>();
  CHECK(json(back) == j);
  REQUIRE(back.moe);
  CHECK(back.moe->scoring == "sigmoid");
  CHECK(back.mla->attention_bias);
  CHECK_FALSE(back.linear_attn);
  CHECK(back.num_nextn_predict_layers == 1);
  // A key the normalized config leaves out takes the field's default; keys of a plugin's own
  // sit beside the fields and are skipped.
  json partial = j;
  partial.erase("moe");
  partial.erase("qk_norm");
  partial["residual_scale"] = 0.5;
  const auto p = partial.get<ArchitectureConfig>();
  CHECK_FALSE(p.moe);
  CHECK(p.qk_norm == "none");
}

TEST_CASE("family config: DeepSeek rows read defaults, nulls and the router each version fixes") {
  // Nothing stated: transformers' V3 defaults.
  const json empty = json::object();
  MoEConfig v3 = MoEConfig::read(ConfigReader(empty, "config.json"), "deepseek_v3");
  CHECK(v3.n_routed_experts == 256);
  CHECK(v3.num_experts_per_tok == 8);
  CHECK(v3.first_k_dense_replace == 3);
  CHECK(v3.scoring == "sigmoid");
  CHECK(v3.topk_method == "noaux_tc");
  CHECK(v3.norm_topk_prob);
  CHECK(v3.routed_scaling_factor == 2.5);
  MLAConfig mla = MLAConfig::read(ConfigReader(empty, "config.json"), "deepseek_v3");
  CHECK(mla.q_lora_rank == 1536);
  CHECK(mla.qk_head_dim() == 192);

  // V3 ignores scoring_func / topk_method and stray Qwen-MoE keys; null means none or one group.
  const json v3_cfg = {{"scoring_func", "softmax"},  {"topk_method", "greedy"},
                       {"decoder_sparse_step", 2},   {"mlp_only_layers", {3}},
                       {"n_group", nullptr},         {"topk_group", 0},
                       {"n_shared_experts", nullptr}};
  v3 = MoEConfig::read(ConfigReader(v3_cfg, "config.json"), "deepseek_v3");
  CHECK(v3.scoring == "sigmoid");
  CHECK(v3.topk_method == "noaux_tc");
  CHECK(v3.decoder_sparse_step == 1);
  CHECK(v3.mlp_only_layers.empty());
  CHECK(v3.n_group == 1);
  CHECK(v3.topk_group == 1);
  CHECK(v3.n_shared_experts == 0);
  CHECK(MLAConfig::read(ConfigReader(json{{"q_lora_rank", nullptr}}, "c"), "deepseek_v2")
            .q_lora_rank == 0);

  // V2: softmax and no renormalisation whatever the config says; topk_method of its own set.
  const json v2_cfg = {{"num_experts_per_tok", 6},
                       {"scoring_func", "sigmoid"},
                       {"norm_topk_prob", true},
                       {"topk_method", "group_limited_greedy"}};
  MoEConfig v2 = MoEConfig::read(ConfigReader(v2_cfg, "config.json"), "deepseek_v2");
  CHECK(v2.scoring == "softmax");
  CHECK_FALSE(v2.norm_topk_prob);
  CHECK(v2.topk_method == "group_limited_greedy");
  CHECK_THROWS_WITH_AS(MoEConfig::read(ConfigReader(empty, "config.json"), "deepseek_v2"),
                       "[config] config.json: 'num_experts_per_tok' is required", SdkError);
  // A dense V2 config (no routed experts) need not state it.
  CHECK(MoEConfig::read(ConfigReader(json{{"n_routed_experts", nullptr}}, "c"), "deepseek_v2")
            .n_routed_experts == 0);
  CHECK_THROWS_WITH_AS(
      MoEConfig::read(ConfigReader(json{{"num_experts_per_tok", 6}, {"topk_method", "noaux_tc"}},
                                   "config.json"),
                      "deepseek_v2"),
      "[config] config.json: 'topk_method' has unknown value 'noaux_tc' for deepseek_v2 (known: "
      "greedy, group_limited_greedy)",
      SdkError);
  CHECK_THROWS_WITH_AS(MoEConfig::read(ConfigReader(empty, "config.json"), "llama"),
                       "[plugin] the MoE table has no row for model type 'llama'", SdkError);
}

TEST_CASE("family config: a row spells keys its own way, and the checks name them so") {
  // A Qwen-MoE-like row: other key names, a sparse step and dense-only layers.
  const FamilyRow<MoEConfig> row = {
      "toy_moe",
      {.moe_intermediate_size = 8, .n_routed_experts = 8, .num_experts_per_tok = 2},
      {FieldKey("n_routed_experts", "num_experts"), "num_experts_per_tok",
       "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers", "norm_topk_prob"}};
  const json cfg = {{"num_experts", 4}, {"decoder_sparse_step", 2}, {"mlp_only_layers", {5}}};
  MoEConfig m = MoEConfig::read(ConfigReader(cfg, "config.json"), row);
  CHECK(m.n_routed_experts == 4);
  std::vector<int64_t> moe_layers;
  for (int64_t l = 0; l < 8; ++l)
    if (m.is_moe_layer(l)) moe_layers.push_back(l);
  CHECK(moe_layers == std::vector<int64_t>{1, 3, 7});
  CHECK_THROWS_WITH_AS(
      MoEConfig::read(ConfigReader(json{{"num_experts", 4}, {"num_experts_per_tok", 5}}, "config.json"), row),
      "[config] config.json: 'num_experts_per_tok' (5) must be between 1 and 'num_experts' (4)",
      SdkError);
  CHECK_THROWS_WITH_AS(
      MoEConfig::read(ConfigReader(json{{"mlp_only_layers", {1, "x"}}}, "config.json"), row),
      "[config] config.json: 'mlp_only_layers' must be an integer, got 'x'", SdkError);
  CHECK_THROWS_WITH_AS(
      MoEConfig::read(ConfigReader(json{{"decoder_sparse_step", 0}}, "config.json"), row),
      "[config] config.json: 'decoder_sparse_step' must be positive, got 0", SdkError);
}

TEST_CASE("family config: Gated DeltaNet reads the linear_* keys; validate() names them") {
  const json cfg = {{"linear_num_key_heads", 2}, {"linear_num_value_heads", 4}};
  GatedDeltaNetConfig g =
      GatedDeltaNetConfig::read(ConfigReader(cfg, "config.json text_config"), "qwen3_5");
  CHECK(g.num_k_heads == 2);
  CHECK(g.num_v_heads == 4);
  CHECK(g.k_head_dim == 128);
  CHECK(g.conv_kernel == 4);
  CHECK(json(g).contains("num_k_heads"));
  CHECK_THROWS_WITH_AS(
      GatedDeltaNetConfig::read(ConfigReader(json{{"linear_num_key_heads", 2}, {"linear_num_value_heads", 3}},
                                             "config.json text_config"),
                                "qwen3_5"),
      "[config] config.json text_config: 'linear_num_value_heads' (3) must be a multiple of "
      "'linear_num_key_heads' (2)",
      SdkError);
  // Built in code, checked the same way (no location).
  g.num_v_heads = 3;
  CHECK_THROWS_WITH_AS(g.validate(),
                       "[config] 'linear_num_value_heads' (3) must be a multiple of "
                       "'linear_num_key_heads' (2)",
                       SdkError);
  // ArchitectureConfig::validate checks the family configs it holds, bounds included.
  ArchitectureConfig c = test::llama_tiny_config();
  c.linear_attn = GatedDeltaNetConfig{};
  CHECK_NOTHROW(c.validate());
  c.linear_attn->num_v_heads = 5000;
  CHECK_THROWS_WITH_AS(c.validate(),
                       "[config] 'linear_num_value_heads' is 5000, larger than 1024, the most "
                       "mobius accepts (released models have at most about 64)",
                       SdkError);
  c = test::llama_tiny_config();
  c.num_nextn_predict_layers = 100;
  CHECK_THROWS_WITH_AS(c.validate(),
                       doctest::Contains("'num_nextn_predict_layers' is 100, larger than 64"),
                       SdkError);
  c = test::llama_tiny_config();
  c.mla = MLAConfig{.kv_lora_rank = 32, .qk_nope_head_dim = 16, .qk_rope_head_dim = 16,
                    .v_head_dim = 16};
  c.rope.partial_rotary_factor = 0.5;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("'partial_rotary_factor' must be 1 for MLA"),
                       SdkError);
}
