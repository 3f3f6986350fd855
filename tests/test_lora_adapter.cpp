// lora_adapter: a base folder plus a PEFT LoRA adapter through load_options::adapter, compared with
// tools/reference/lora_adapters.py (tests/data/adapters: PyTorch in float64, the adapter applied unmerged as
// PEFT's LoRA layers compute it); the merge itself (W + alpha / r B A in f32, the saved head in place of the
// base's), PEFT's module matching, and the adapters refused by name. The command line's --adapter is
// tests/cli/test_adapter_commands.py.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "text_encoder_fixtures.hpp"

namespace test_lora_adapter {

namespace {

using namespace anvil_test::text_encoders;
using anvil_test::data_path;

anvil::models::load_options with_adapter(const std::string& name) {
    anvil::models::load_options o = cpu();
    o.adapter = data_path("adapters/" + name);
    return o;
}

}  // namespace

TEST_CASE(
    "lora adapter: recipes take a PEFT adapter through load_options and match PyTorch's unmerged LoRA") {
    SUBCASE("a sentence encoder (BERT, list targets with a dotted suffix)") {
        auto encoder =
            anvil::models::sentence_encoder::load(fixture("bert_sentence"), with_adapter("bert_sentence"));
        const auto input = read_texts(fixture("bert_sentence"));
        const auto expected = anvil_test::load_npy(data_path("adapters/bert_sentence/expected.npy"));
        CHECK(anvil_test::max_relative_error(encoder.encode_ids(input.ids, input.types), expected) < 1e-4);
        // Without the adapter the same folder gives the base model's embeddings.
        auto base = anvil::models::sentence_encoder::load(fixture("bert_sentence"), cpu());
        CHECK(anvil_test::max_relative_error(base.encode_ids(input.ids, input.types), expected) > 1e-2);
    }
    SUBCASE("a cross-encoder (DistilBERT, bf16, 3 labels, pre_classifier and classifier saved)") {
        auto scorer =
            anvil::models::cross_encoder::load(fixture("distilbert_cross"), with_adapter("distilbert_cross"));
        const auto input = read_texts(fixture("distilbert_cross"));
        const auto expected = anvil_test::load_npy(data_path("adapters/distilbert_cross/expected.npy"));
        CHECK(anvil_test::max_relative_error(scorer.logits_ids(input.ids, input.types), expected) < 1e-4);
    }
}

TEST_CASE("lora adapter: the merged checkpoint holds W + alpha / r B A in f32 and the adapter's head") {
    auto base = std::make_shared<const anvil::checkpoint>(anvil::checkpoint::open(fixture("bert_cross")));
    const auto merged = anvil::models::apply_lora_adapter(base, data_path("adapters/bert_cross"));
    const anvil::checkpoint adapter =
        anvil::checkpoint::open(data_path("adapters/bert_cross/adapter_model.safetensors"));
    const std::string module = "bert.encoder.layer.1.attention.self.key";
    const anvil::tensor_view& w = base->tensor(module + ".weight");
    CHECK(w.type() == anvil::dtype::f16);
    CHECK(merged->tensor(module + ".weight").type() == anvil::dtype::f32);
    const auto a = adapter.tensor("base_model.model." + module + ".lora_A.weight").to_f32();
    const auto b = adapter.tensor("base_model.model." + module + ".lora_B.weight").to_f32();
    const auto stored = w.to_f32();
    const auto got = merged->tensor(module + ".weight").to_f32();
    const std::size_t in = static_cast<std::size_t>(w.shape()[1]), rank = 2;
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        double update = 0.0;
        for (std::size_t k = 0; k < rank; ++k)
            update += double{b[i / in * rank + k]} * double{a[k * in + i % in]};
        worst = std::max(worst, std::abs(double{got[i]} - (double{stored[i]} + 2.5 * update)));
    }
    CHECK(worst < 1e-6);
    // The head comes from the adapter, in the dtype it was saved in; untouched tensors keep the base's bytes.
    const anvil::tensor_view& head = merged->tensor("classifier.weight");
    const anvil::tensor_view& saved = adapter.tensor("base_model.model.classifier.weight");
    CHECK(head.type() == saved.type());
    CHECK(head.to_f32() == saved.to_f32());
    CHECK(head.to_f32() != base->tensor("classifier.weight").to_f32());
    CHECK(merged->tensor("bert.encoder.layer.0.attention.self.query.weight").bytes().data() ==
          base->tensor("bert.encoder.layer.0.attention.self.query.weight").bytes().data());
    CHECK(merged->size() == base->size());
}

TEST_CASE("lora adapter: PEFT's module matching") {
    const std::vector<std::string> modules{"bert",
                                           "bert.layer",
                                           "bert.layer.0",
                                           "bert.layer.0.query",
                                           "bert.layer.0.value",
                                           "bert.layer.0.norm",
                                           "pre_classifier",
                                           "classifier",
                                           "classifier.query"};
    const std::set<std::string> linear{"bert.layer.0.query", "bert.layer.0.value", "pre_classifier",
                                       "classifier.query"};
    const std::vector<std::string> heads{"classifier"};
    anvil::models::lora_config c;
    c.target_list = {"query"};
    const auto listed = anvil::models::match_lora_modules(c, modules, linear, heads);
    // classifier.query is inside modules_to_save: not adapted. "pre_classifier" ends with "classifier".
    CHECK(listed.adapted == std::vector<std::string>{"bert.layer.0.query"});
    CHECK(listed.saved == std::vector<std::string>{"pre_classifier", "classifier"});
    c.target_list.clear();
    c.target_pattern = "bert\\.layer\\.\\d+\\.(query|value)";
    CHECK(anvil::models::match_lora_modules(c, modules, linear, heads).adapted ==
          std::vector<std::string>{"bert.layer.0.query", "bert.layer.0.value"});
    c.target_pattern = "query";  // re.fullmatch: a pattern must name the whole module
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::models::match_lora_modules(c, modules, linear, heads)),
                         doctest::Contains("unknown LoRA target module 'query'"), anvil::error);
    c.target_pattern.reset();
    c.target_list = {"norm"};
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::models::match_lora_modules(c, modules, linear, heads)),
                         doctest::Contains("bert.layer.0.norm is not a Linear"), anvil::error);
}

TEST_CASE("lora adapter: what does not fit is refused by name") {
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::models::sentence_encoder::load(fixture("bert_sentence"),
                                                                                 with_adapter("bert_cross"))),
                         doctest::Contains("unknown LoRA target module"), anvil::error);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::models::sentence_encoder::load(fixture("bert_sentence"),
                                                                                 with_adapter("nowhere"))),
                         doctest::Contains("not a folder"), anvil::io_error);
    // A ViT adapter on a DistilBERT: none of its target modules exist there.
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::models::cross_encoder::load(fixture("distilbert_cross"),
                                                                              with_adapter("vit"))),
                         doctest::Contains("unknown LoRA target module 'query'"), anvil::error);
}

}  // namespace test_lora_adapter
