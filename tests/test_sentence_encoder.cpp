// sentence_encoder: sentence-transformers' Pooling (mean, cls, max) and Normalize over each family's encoder,
// compared with tools/reference/text_encoders.py (tests/data/text_encoders/*_sentence): the folder's default
// pooling and normalisation, each pooling explicitly, pooling none, the text path through the folder's
// WordPiece tokenizer, the Neural Engine simulator, and errors.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "text_encoder_fixtures.hpp"

namespace test_sentence_encoder {

namespace {

using anvil::models::pooling;
using anvil::models::sentence_encoder;

using namespace anvil_test::text_encoders;

anvil::models::encode_options with(pooling mode, bool normalize, std::size_t batch_size = 32) {
    anvil::models::encode_options o;
    o.pool = mode;
    o.normalize = normalize;
    o.batch_size = batch_size;
    return o;
}

const char* const families[] = {"bert_sentence", "roberta_sentence", "mpnet_sentence", "distilbert_sentence"};

// A folder holding `files` (name -> text) and a link to a fixture's model.
struct scratch_folder {
    std::filesystem::path path;
    scratch_folder(const std::string& model, const std::vector<std::pair<std::string, std::string>>& files) {
        path = std::filesystem::temp_directory_path() /
               ("anvil-sentence-" + model + "-" + std::to_string(files.size()) + "-" +
                std::to_string(std::hash<std::string>{}(files.back().second)));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path / "1_Pooling");
        for (const char* name : {"model.safetensors", "config.json"})
            std::filesystem::create_symlink(std::filesystem::absolute(fixture(model) + "/" + name),
                                            path / name);
        for (const auto& [name, text] : files)
            std::ofstream(path / name) << text;
    }
    ~scratch_folder() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    scratch_folder(const scratch_folder&) = delete;
    scratch_folder& operator=(const scratch_folder&) = delete;
};

}  // namespace

TEST_CASE("sentence encoder: every family's default embedding and each pooling match PyTorch") {
    for (const std::string name : families) {
        CAPTURE(name);
        auto encoder = sentence_encoder::load(fixture(name), cpu());
        const auto input = read_texts(fixture(name));
        const auto expected = anvil_test::load_npy(fixture(name) + "/embeddings.npy");
        CHECK(encoder.dimension() == expected.shape()[1]);
        const double error =
            anvil_test::max_relative_error(encoder.encode_ids(input.ids, input.types), expected);
        MESSAGE(name, " default pooling: max relative error ", error);
        CHECK(error < 1e-4);
        for (const auto& each : {std::pair{pooling::mean, "mean"}, std::pair{pooling::cls, "cls"},
                                 std::pair{pooling::max, "max"}}) {
            const pooling mode = each.first;
            const std::string file = each.second;
            CAPTURE(file);
            const auto want = anvil_test::load_npy(fixture(name) + "/" + file + ".npy");
            // batch 2: several padded batches, results back in the caller's order.
            CHECK(anvil_test::max_relative_error(
                      encoder.encode_ids(input.ids, input.types, with(mode, false, 2)), want) < 1e-4);
        }
    }
    // The folders' defaults come from modules.json and 1_Pooling/config.json.
    CHECK(sentence_encoder::load(fixture("bert_sentence"), cpu()).default_pooling() == pooling::mean);
    CHECK(sentence_encoder::load(fixture("bert_sentence"), cpu()).default_normalize());
    CHECK(sentence_encoder::load(fixture("roberta_sentence"), cpu()).default_pooling() == pooling::cls);
    CHECK_FALSE(sentence_encoder::load(fixture("roberta_sentence"), cpu()).default_normalize());
    CHECK(sentence_encoder::load(fixture("distilbert_sentence"), cpu()).default_pooling() == pooling::max);
}

TEST_CASE("sentence encoder: normalised embeddings have unit length; a text alone equals it in a batch") {
    auto encoder = sentence_encoder::load(fixture("mpnet_sentence"), cpu());
    const auto input = read_texts(fixture("mpnet_sentence"));
    const auto all = encoder.encode_ids(input.ids);
    const auto d = static_cast<std::size_t>(encoder.dimension());
    for (std::size_t i = 0; i < input.ids.size(); ++i) {
        double squares = 0.0;
        for (std::size_t j = 0; j < d; ++j)
            squares += std::pow(double{all.values<float>()[i * d + j]}, 2.0);
        CHECK(std::sqrt(squares) == doctest::Approx(1.0).epsilon(1e-6));
        const auto alone = encoder.encode_ids(std::span(input.ids).subspan(i, 1));
        const auto row = anvil::host_tensor::from(all.values<float>().subspan(i * d, d), alone.shape());
        CHECK(anvil_test::max_relative_error(alone, row) < 1e-5);
    }
}

TEST_CASE("sentence encoder: pooling none gives one text's hidden states") {
    auto encoder = sentence_encoder::load(fixture("roberta_sentence"), cpu());
    const auto input = read_texts(fixture("roberta_sentence"));
    const auto hidden = anvil_test::load_npy(fixture("roberta_sentence") + "/hidden.npy");
    const auto d = static_cast<std::size_t>(encoder.dimension());
    // Text 1 follows text 0's rows in hidden.npy.
    const auto got = encoder.encode_ids(std::span(input.ids).subspan(1, 1), {}, with(pooling::none, false));
    CHECK(got.shape() == anvil::dims{static_cast<std::int64_t>(input.ids[1].size()), encoder.dimension()});
    const auto want = anvil::host_tensor::from(
        hidden.values<float>().subspan(input.ids[0].size() * d, input.ids[1].size() * d), got.shape());
    CHECK(anvil_test::max_relative_error(got, want) < 1e-4);
    anvil::models::encode_options none;
    none.pool = pooling::none;
    CHECK_THROWS_WITH_AS(static_cast<void>(encoder.encode_ids(input.ids, {}, none)),
                         doctest::Contains("pooling none gives the hidden states of one text, got 4 texts"),
                         anvil::error);
    // No texts: an empty [0, D] result, nothing compiled.
    const auto empty = encoder.encode_ids({});
    CHECK(empty.shape() == anvil::dims{0, encoder.dimension()});
    CHECK(encoder.encode(std::span<const std::string>{}).shape() == anvil::dims{0, encoder.dimension()});
}

TEST_CASE("sentence encoder: texts through the folder's tokenizer") {
    auto encoder = sentence_encoder::load(fixture("bert_sentence"), cpu());
    const auto document = anvil::json::parse_file(fixture("bert_sentence") + "/texts.json");
    std::vector<std::string> sentences;
    for (const auto& text : document.as_array())
        sentences.push_back(text.as_string());
    const auto expected_ids = read_texts(fixture("bert_sentence"), "text_");
    for (std::size_t i = 0; i < sentences.size(); ++i) {
        CAPTURE(sentences[i]);
        CHECK(encoder.text_tokenizer().encode(sentences[i]).ids == expected_ids.ids[i]);
    }
    const auto expected = anvil_test::load_npy(fixture("bert_sentence") + "/text_embeddings.npy");
    const double error = anvil_test::max_relative_error(encoder.encode(sentences), expected);
    MESSAGE("texts: max relative error ", error);
    CHECK(error < 1e-4);
    // A text longer than the model takes is truncated (38 tokens here), not refused.
    std::string long_text;
    for (int i = 0; i < 60; ++i)
        long_text += "cat ";
    CHECK(encoder.encode(std::vector<std::string>{long_text}).shape() == anvil::dims{1, 36});
    // A folder without tokenizer files takes ids only.
    auto ids_only = sentence_encoder::load(fixture("mpnet_sentence"), cpu());
    CHECK_THROWS_WITH_AS(static_cast<void>(ids_only.encode(sentences)),
                         doctest::Contains("the model folder has no tokenizer"), anvil::io_error);
}

void check_simulated_device(const anvil_test::ane_target& target) {
    anvil::models::load_options options;
    options.compile = target.options;
    for (const std::string name : families) {
        CAPTURE(name);
        auto encoder = sentence_encoder::load(fixture(name), options);
        const auto input = read_texts(fixture(name));
        const double error =
            anvil_test::max_relative_error(encoder.encode_ids(input.ids, input.types),
                                           anvil_test::load_npy(fixture(name) + "/embeddings.npy"));
        MESSAGE(name, " ", anvil_test::route_name(target.options), ": max relative error ", error);
        CHECK(error < 1.5e-2);  // the hidden states' fp16 tolerance (test_text_encoder.cpp); pooling averages
    }
}

TEST_CASE("sentence encoder: the Neural Engine simulator agrees within fp16's precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target)) return;
    check_simulated_device(target);
}

TEST_CASE("sentence encoder: the Core ML route agrees within fp16's precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target, anvil::device::coreml)) return;
    check_simulated_device(target);
}

TEST_CASE("sentence encoder: unsupported modules and pooling configs are named") {
    const std::string pooling_mean =
        R"({"word_embedding_dimension": 36, "pooling_mode_mean_tokens": true,
            "pooling_mode_cls_token": false})";
    const std::string transformer_and_pooling =
        R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})";
    {
        scratch_folder folder("bert_sentence", {{"1_Pooling/config.json", pooling_mean},
                                                {"modules.json", transformer_and_pooling + R"(,
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}])"}});
        CHECK_THROWS_WITH_AS(static_cast<void>(sentence_encoder::load(folder.path, cpu())),
                             doctest::Contains("module 'sentence_transformers.models.Dense' (2_Dense) is not "
                                               "supported"),
                             anvil::unsupported_error);
    }
    {
        scratch_folder folder("bert_sentence",
                              {{"1_Pooling/config.json",
                                R"({"word_embedding_dimension": 36, "pooling_mode_mean_tokens": true,
                  "pooling_mode_max_tokens": true})"},
                               {"modules.json", transformer_and_pooling + "]"}});
        CHECK_THROWS_WITH_AS(static_cast<void>(sentence_encoder::load(folder.path, cpu())),
                             doctest::Contains("expected exactly one of pooling_mode_cls_token"),
                             anvil::unsupported_error);
    }
    {
        scratch_folder folder("bert_sentence",
                              {{"1_Pooling/config.json", R"({"word_embedding_dimension": 384})"},
                               {"modules.json", transformer_and_pooling + "]"}});
        CHECK_THROWS_WITH_AS(
            static_cast<void>(sentence_encoder::load(folder.path, cpu())),
            doctest::Contains("word_embedding_dimension 384 does not match the encoder's hidden "
                              "size 36"),
            anvil::format_error);
    }
    {
        // No Normalize module: the same mean pooling, not normalised.
        scratch_folder folder("bert_sentence", {{"1_Pooling/config.json", pooling_mean},
                                                {"modules.json", transformer_and_pooling + "]"}});
        auto encoder = sentence_encoder::load(folder.path, cpu());
        CHECK_FALSE(encoder.default_normalize());
        const auto input = read_texts(fixture("bert_sentence"));
        CHECK(anvil_test::max_relative_error(encoder.encode_ids(input.ids, input.types),
                                             anvil_test::load_npy(fixture("bert_sentence") + "/mean.npy")) <
              1e-4);
    }
}

}  // namespace test_sentence_encoder
