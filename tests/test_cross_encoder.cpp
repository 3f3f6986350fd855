// cross_encoder: each family's sequence-classification head (BERT's pooler + classifier, RoBERTa/XLM-R's and
// MPNet's classification head, DistilBERT's pre_classifier + ReLU) on pairs, compared with
// tools/reference/text_encoders.py (tests/data/text_encoders/*_cross): logits and scores from token ids,
// pairs of texts through the folder's tokenizer, the Neural Engine simulator, and errors.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "text_encoder_fixtures.hpp"

namespace test_cross_encoder {

namespace {

using anvil::models::cross_encoder;

using namespace anvil_test::text_encoders;

const char* const families[] = {"bert_cross", "xlmr_cross", "distilbert_cross", "mpnet_cross"};

}  // namespace

TEST_CASE("cross encoder: every family's head gives PyTorch's logits; the score is the first") {
    for (const std::string name : families) {
        CAPTURE(name);
        auto model = cross_encoder::load(fixture(name), cpu());
        const auto input = read_texts(fixture(name));
        const auto expected = anvil_test::load_npy(fixture(name) + "/logits.npy");
        for (const std::size_t batch_size : {std::size_t{32}, std::size_t{2}}) {
            const auto logits = model.logits_ids(input.ids, input.types, batch_size);
            const double error = anvil_test::max_relative_error(logits, expected);
            MESSAGE(name, " batch ", batch_size, ": max relative error ", error);
            CHECK(error < 1e-4);
        }
        const auto scores = model.predict_ids(input.ids, input.types);
        REQUIRE(scores.size() == input.ids.size());
        const auto labels = static_cast<std::size_t>(expected.shape()[1]);
        for (std::size_t i = 0; i < scores.size(); ++i)
            CHECK(scores[i] == doctest::Approx(expected.values<float>()[i * labels]).epsilon(1e-4));
    }
    auto distil = cross_encoder::load(fixture("distilbert_cross"), cpu());
    CHECK(distil.labels() == std::vector<std::string>{"neg", "neutral", "pos"});
    CHECK(cross_encoder::load(fixture("bert_cross"), cpu()).labels() == std::vector<std::string>{"LABEL_0"});
}

TEST_CASE("cross encoder: a pair alone scores as it does in a padded batch") {
    auto model = cross_encoder::load(fixture("xlmr_cross"), cpu());
    const auto input = read_texts(fixture("xlmr_cross"));
    const auto all = model.predict_ids(input.ids, input.types);
    for (std::size_t i = 0; i < input.ids.size(); ++i) {
        const auto alone = model.predict_ids(std::span(input.ids).subspan(i, 1));
        CHECK(alone[0] == doctest::Approx(all[i]).epsilon(1e-5));
    }
    CHECK(model.predict_ids({}).empty());
    CHECK(model.logits_ids({}).shape() == anvil::dims{0, 1});
    CHECK(model.compiled_programs() <= 3);
}

TEST_CASE("cross encoder: pairs of texts through the folder's tokenizer") {
    auto model = cross_encoder::load(fixture("bert_cross"), cpu());
    const auto document = anvil::json::parse_file(fixture("bert_cross") + "/texts.json");
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const auto& pair : document.as_array())
        pairs.emplace_back(pair.as_array()[0].as_string(), pair.as_array()[1].as_string());
    const auto expected_ids = read_texts(fixture("bert_cross"), "text_");
    for (std::size_t i = 0; i < pairs.size(); ++i) {
        const auto e = model.text_tokenizer().encode_pair(pairs[i].first, pairs[i].second);
        CHECK(e.ids == expected_ids.ids[i]);
        CHECK(e.type_ids == expected_ids.types[i]);
    }
    const auto expected = anvil_test::load_npy(fixture("bert_cross") + "/text_logits.npy");
    const auto scores = model.predict(pairs);
    REQUIRE(scores.size() == pairs.size());
    for (std::size_t i = 0; i < pairs.size(); ++i)
        CHECK(scores[i] == doctest::Approx(expected.values<float>()[i]).epsilon(1e-4));
    CHECK(model.predict(std::vector<std::pair<std::string, std::string>>{}).empty());
}

void check_simulated_device(const anvil_test::ane_target& target) {
    anvil::models::load_options options;
    options.compile = target.options;
    for (const std::string name : families) {
        CAPTURE(name);
        auto model = cross_encoder::load(fixture(name), options);
        const auto input = read_texts(fixture(name));
        const double error = anvil_test::max_relative_error(
            model.logits_ids(input.ids, input.types), anvil_test::load_npy(fixture(name) + "/logits.npy"));
        MESSAGE(name, " ", anvil_test::route_name(target.options), ": max relative error ", error);
        CHECK(error < 1.5e-2);  // the hidden states' fp16 tolerance (test_text_encoder.cpp)
    }
}

TEST_CASE("cross encoder: the Neural Engine simulator agrees within fp16's precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target)) return;
    check_simulated_device(target);
}

TEST_CASE("cross encoder: the Core ML route agrees within fp16's precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target, anvil::device::coreml)) return;
    check_simulated_device(target);
}

TEST_CASE("cross encoder: an unknown architecture or a missing head tensor is named") {
    const std::string bert = R"({"model_type": "bert", "vocab_size": 64, "hidden_size": 36,
        "num_attention_heads": 3, "intermediate_size": 52, "num_hidden_layers": 2,
        "max_position_embeddings": 40,
        "architectures": )";
    CHECK_THROWS_WITH_AS(static_cast<void>(cross_encoder::load(
                             edited_folder("bert_cross", bert + R"(["BertForMaskedLM"]})").path, cpu())),
                         doctest::Contains("architecture 'BertForMaskedLM' is not a supported cross-encoder"),
                         anvil::unsupported_error);
    // A RoBERTa config on BertForSequenceClassification's weights: no encoder under "" or "roberta.".
    const std::string roberta_on_bert = R"({"model_type": "roberta", "vocab_size": 64, "hidden_size": 36,
        "num_attention_heads": 3, "intermediate_size": 52, "num_hidden_layers": 2,
        "max_position_embeddings": 40,
        "pad_token_id": 0})";
    CHECK_THROWS_WITH_AS(
        static_cast<void>(cross_encoder::load(edited_folder("bert_cross", roberta_on_bert).path, cpu())),
        doctest::Contains("no roberta encoder weights: neither 'embeddings.word_embeddings.weight' nor "
                          "'roberta.embeddings.word_embeddings.weight'"),
        anvil::format_error);
    const std::string labels =
        bert + R"(["BertForSequenceClassification"], "id2label": {"0": "a", "1": "b"}})";
    CHECK_THROWS_WITH_AS(
        static_cast<void>(cross_encoder::load(edited_folder("bert_cross", labels).path, cpu())),
        doctest::Contains("id2label entry \"1\" is not a class index in [0, 1)"), anvil::format_error);
    // A sentence encoder's weights have no classification head.
    const std::string no_head = R"({"model_type": "bert", "vocab_size": 64, "hidden_size": 36,
        "num_attention_heads": 3, "intermediate_size": 52, "num_hidden_layers": 2,
        "max_position_embeddings": 38})";
    CHECK_THROWS_WITH_AS(
        static_cast<void>(cross_encoder::load(edited_folder("bert_sentence", no_head).path, cpu())),
        doctest::Contains("the classification head's tensor 'classifier.weight' is missing"),
        anvil::format_error);
    auto model = cross_encoder::load(fixture("mpnet_cross"), cpu());
    CHECK_THROWS_WITH_AS(
        static_cast<void>(model.predict(std::vector<std::pair<std::string, std::string>>{{"a", "b"}})),
        doctest::Contains("the model folder has no tokenizer"), anvil::io_error);
}

}  // namespace test_cross_encoder
