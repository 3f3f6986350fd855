// The text-encoder families (BERT, RoBERTa, MPNet, DistilBERT; XLM-R in test_cross_encoder.cpp) against an
// independent PyTorch port of Hugging Face's modeling_*.py (tools/reference/text_encoders.py, which wrote
// tests/data/text_encoders/): config reading, weight-name prefixes, the last hidden states of texts run in
// padded batches, batching invariance, the number of compiled programs, the Neural Engine simulator, and
// errors.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "text_encoder_fixtures.hpp"

namespace test_text_encoder {

namespace {

using anvil::models::text_encoder;

using namespace anvil_test::text_encoders;

// The hidden states of every text, [sum of lengths, D] like hidden.npy, from one run in padded batches.
anvil::host_tensor hidden_states(text_encoder& encoder, const texts& input, std::size_t batch_size) {
    std::size_t total = 0;
    std::vector<std::size_t> offsets;
    for (const auto& t : input.ids) {
        offsets.push_back(total);
        total += t.size();
    }
    const std::int64_t dim = encoder.config().stack.hidden;
    anvil::host_tensor result(anvil::dtype::f32, anvil::dims{static_cast<std::int64_t>(total), dim});
    encoder.run(input.ids, input.types, batch_size,
                [&](const anvil::models::token_batch& batch, const anvil::host_tensor& hidden) {
                    REQUIRE(hidden.shape() == anvil::dims{batch.rows, batch.length, dim});
                    const auto d = static_cast<std::size_t>(dim);
                    for (std::size_t r = 0; r < batch.items.size(); ++r) {
                        const float* from =
                            hidden.values<float>().data() + r * static_cast<std::size_t>(batch.length) * d;
                        const std::size_t item = batch.items[r];
                        std::copy(from, from + input.ids[item].size() * d,
                                  result.values<float>().data() + offsets[item] * d);
                    }
                });
    return result;
}

const char* const sentence_fixtures[] = {"bert_sentence", "roberta_sentence", "mpnet_sentence",
                                         "distilbert_sentence"};

}  // namespace

TEST_CASE("text encoder: config.json of each family, and the weight-name prefix") {
    using anvil::models::text_family;
    const auto bert = text_encoder::load(fixture("bert_sentence"), cpu());
    CHECK(bert.config().family == text_family::bert);
    CHECK(bert.config().stack.hidden == 36);
    CHECK(bert.config().stack.heads == 3);
    CHECK(bert.config().type_vocab_size == 2);
    CHECK(bert.config().max_tokens() == 38);
    CHECK(bert.prefix().empty());

    const auto roberta = text_encoder::load(fixture("roberta_sentence"), cpu());
    CHECK(roberta.config().family == text_family::roberta);
    CHECK(roberta.config().stack.act == anvil::models::activation::gelu_tanh);
    CHECK(roberta.config().padding_idx == 1);
    CHECK(roberta.config().max_tokens() == 38);  // positions 2..39 of 40

    const auto mpnet = text_encoder::load(fixture("mpnet_sentence"), cpu());
    CHECK(mpnet.config().family == text_family::mpnet);
    CHECK(mpnet.config().type_vocab_size == 0);
    CHECK(mpnet.config().relative_buckets == 32);

    const auto distil = text_encoder::load(fixture("distilbert_sentence"), cpu());
    CHECK(distil.config().family == text_family::distilbert);
    CHECK(distil.config().stack.hidden == 44);
    CHECK(distil.config().stack.intermediate == 56);
    CHECK(distil.config().stack.layer_norm_eps == 1e-12);
    CHECK(distil.config().max_tokens() == 40);

    // The *ForSequenceClassification checkpoints keep the encoder under the family's prefix.
    CHECK(text_encoder::load(fixture("bert_cross"), cpu()).prefix() == "bert.");
    CHECK(text_encoder::load(fixture("xlmr_cross"), cpu()).prefix() == "roberta.");
    CHECK(text_encoder::load(fixture("xlmr_cross"), cpu()).config().family == text_family::xlm_roberta);
    CHECK(text_encoder::load(fixture("distilbert_cross"), cpu()).prefix() == "distilbert.");
    CHECK(text_encoder::load(fixture("mpnet_cross"), cpu()).prefix() == "mpnet.");
}

TEST_CASE("text encoder: MPNet's relative position buckets match modeling_mpnet.py") {
    // relative_position_bucket(memory - context) for -60..60, printed by torch from the reference's copy.
    const int expected[] = {
        13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
        12, 12, 12, 12, 11, 11, 11, 11, 11, 11, 11, 11, 11, 10, 10, 10, 10, 10, 10, 10, 9,  9,  9,  9,  8,
        8,  8,  8,  7,  6,  5,  4,  3,  2,  1,  0,  17, 18, 19, 20, 21, 22, 23, 24, 24, 24, 24, 25, 25, 25,
        25, 26, 26, 26, 26, 26, 26, 26, 27, 27, 27, 27, 27, 27, 27, 27, 27, 28, 28, 28, 28, 28, 28, 28, 28,
        28, 28, 28, 28, 28, 28, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29};
    for (int r = -60; r <= 60; ++r) {
        CAPTURE(r);
        CHECK(anvil::models::mpnet_relative_bucket(r) == expected[r + 60]);
    }
}

TEST_CASE("text encoder: every family's hidden states match PyTorch on a padded batch") {
    for (const std::string name : sentence_fixtures) {
        CAPTURE(name);
        auto encoder = text_encoder::load(fixture(name), cpu());
        const auto input = read_texts(fixture(name));
        const auto expected = anvil_test::load_npy(fixture(name) + "/hidden.npy");
        // batch 8: every text in one padded batch; batch 2: batches of different lengths.
        for (const std::size_t batch_size : {std::size_t{8}, std::size_t{2}}) {
            CAPTURE(batch_size);
            const double error =
                anvil_test::max_relative_error(hidden_states(encoder, input, batch_size), expected);
            MESSAGE(name, " batch ", batch_size, ": max relative error ", error);
            CHECK(error < 1e-4);
        }
    }
}

TEST_CASE("text encoder: a text alone and the same text in a padded batch agree") {
    for (const std::string name : sentence_fixtures) {
        CAPTURE(name);
        auto encoder = text_encoder::load(fixture(name), cpu());
        const auto input = read_texts(fixture(name));
        const auto batched = hidden_states(encoder, input, 8);
        std::size_t offset = 0;
        const auto dim = static_cast<std::size_t>(encoder.config().stack.hidden);
        for (std::size_t i = 0; i < input.ids.size(); ++i) {
            texts one{{input.ids[i]}, {input.types[i]}};
            const auto alone = hidden_states(encoder, one, 1);
            const auto rows = batched.values<float>().subspan(offset * dim, input.ids[i].size() * dim);
            const auto part = anvil::host_tensor::from(rows, alone.shape());
            CAPTURE(i);
            CHECK(anvil_test::max_relative_error(alone, part) < 1e-5);
            offset += input.ids[i].size();
        }
    }
}

TEST_CASE("text encoder: padded lengths come from a short ladder") {
    using anvil::models::bucketed_length;
    using anvil::models::length_buckets;
    // The Neural Engine's: powers of two from 8, capped at the model's maximum.
    CHECK(bucketed_length(1, 512) == 8);
    CHECK(bucketed_length(9, 512) == 16);
    CHECK(bucketed_length(65, 512) == 128);
    CHECK(bucketed_length(300, 512) == 512);
    CHECK(bucketed_length(300, 384) == 384);
    // The CPU's: steps of 8 to 64, 16 to 128, 32 to 256, then 64; at most a quarter is padding.
    const auto fine = length_buckets::fine;
    CHECK(bucketed_length(1, 512, fine) == 8);
    CHECK(bucketed_length(57, 512, fine) == 64);
    CHECK(bucketed_length(65, 512, fine) == 80);
    CHECK(bucketed_length(129, 512, fine) == 160);
    CHECK(bucketed_length(257, 512, fine) == 320);
    CHECK(bucketed_length(500, 512, fine) == 512);
    std::set<std::int64_t> lengths;
    for (std::int64_t n = 1; n <= 512; ++n) {
        const std::int64_t padded = bucketed_length(n, 512, fine);
        CHECK(padded >= n);
        CHECK(static_cast<double>(padded - n) <= std::max(7.0, static_cast<double>(n) / 4.0));
        lengths.insert(padded);
    }
    CHECK(lengths.size() <= 22);
}

TEST_CASE("text encoder: texts of many lengths share a few compiled programs") {
    auto encoder = text_encoder::load(fixture("bert_sentence"), cpu());
    std::vector<std::vector<std::int32_t>> ids;
    for (std::int32_t length = 1; length <= 20; ++length) {
        std::vector<std::int32_t> text(static_cast<std::size_t>(length), 11);
        text.front() = 3;
        ids.push_back(text);
    }
    std::size_t seen = 0;
    encoder.run(ids, {}, 4, [&](const anvil::models::token_batch& batch, const anvil::host_tensor&) {
        CHECK(batch.rows == 4);
        // On the CPU lengths go in steps of 8 up to 64: 20 -> 24, 16 -> 16, 12 -> 16, 8 -> 8, 4 -> 8.
        CHECK((batch.length == 8 || batch.length == 16 || batch.length == 24));
        seen += batch.items.size();
    });
    CHECK(seen == 20);
    CHECK(encoder.compiled_programs() == 3);  // {4, 8}, {4, 16}, {4, 24}
    // A second pass compiles nothing; the default batch fits them all in one.
    encoder.run(ids, {}, 4, [](const anvil::models::token_batch&, const anvil::host_tensor&) {});
    CHECK(encoder.compiled_programs() == 3);
    CHECK(anvil::models::bucketed_length(33, 38) == 38);
    CHECK(anvil::models::bucketed_length(5, 38) == 8);
    CHECK(anvil::models::bucketed_rows(3, 32) == 4);
    CHECK(anvil::models::bucketed_rows(5, 6) == 6);
}

// The simulator computes in fp16 (10-bit mantissa: a relative step of ~1e-3 per rounding) through two layers
// of LayerNorm'd states of magnitude ~1-4; the measured max errors were 3.6e-3..4.4e-3, so 1.5e-2 leaves 3x
// margin.
void check_simulated_device(const anvil_test::ane_target& target) {
    anvil::models::load_options options;
    options.compile = target.options;
    for (const std::string name : sentence_fixtures) {
        CAPTURE(name);
        auto encoder = text_encoder::load(fixture(name), options);
        const auto input = read_texts(fixture(name));
        const auto expected = anvil_test::load_npy(fixture(name) + "/hidden.npy");
        const double error = anvil_test::max_relative_error(hidden_states(encoder, input, 8), expected);
        MESSAGE(name, " ", anvil_test::route_name(target.options), ": max relative error ", error);
        CHECK(error < 1.5e-2);
    }
}

TEST_CASE("text encoder: the Neural Engine simulator agrees within fp16's precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target)) return;
    check_simulated_device(target);
}

TEST_CASE("text encoder: the Core ML route agrees within fp16's precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target, anvil::device::coreml)) return;
    check_simulated_device(target);
}

TEST_CASE("text encoder: bad folders and bad token ids give clear errors") {
    CHECK_THROWS_WITH_AS(
        static_cast<void>(text_encoder::load(
            edited_folder("bert_sentence", R"({"model_type": "gpt2", "vocab_size": 64})").path, cpu())),
        doctest::Contains("model_type 'gpt2' is not a supported text encoder"), anvil::unsupported_error);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(text_encoder::load(
            edited_folder("distilbert_sentence",
                          R"({"model_type": "distilbert", "vocab_size": 64, "sinusoidal_pos_embds": true})")
                .path,
            cpu())),
        doctest::Contains("sinusoidal_pos_embds true is not supported"), anvil::unsupported_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(text_encoder::load(
                             edited_folder("bert_sentence", R"({"model_type": "bert", "vocab_size": 64,
                               "position_embedding_type": "relative_key"})")
                                 .path,
                             cpu())),
                         doctest::Contains("position_embedding_type 'relative_key' is not supported"),
                         anvil::unsupported_error);
    // A third layer the checkpoint lacks; a hidden size it does not have.
    const std::string bert = R"({"model_type": "bert", "vocab_size": 64, "hidden_size": 36,
        "num_attention_heads": 3, "max_position_embeddings": 38, )";
    CHECK_THROWS_WITH_AS(
        static_cast<void>(text_encoder::load(
            edited_folder("bert_sentence", bert + R"("num_hidden_layers": 3, "intermediate_size": 52})").path,
            cpu())),
        doctest::Contains("the tensor 'encoder.layer.2.attention.self.query.weight' is missing"),
        anvil::format_error);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(text_encoder::load(edited_folder("bert_sentence", bert + R"("num_hidden_layers": 2,
            "intermediate_size": 50})")
                                                 .path,
                                             cpu())),
        doctest::Contains("tensor 'encoder.layer.0.intermediate.dense.weight': expected shape [50, 36], got "
                          "[52, 36]"),
        anvil::shape_error);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(text_encoder::load(
            edited_folder("bert_sentence", R"({"model_type": "mpnet", "vocab_size": 64, "hidden_size": 36,
                "num_attention_heads": 3, "max_position_embeddings": 38})")
                .path,
            cpu())),
        doctest::Contains("the tensor 'encoder.layer.0.attention.attn.q.weight' is missing"),
        anvil::format_error);

    auto encoder = text_encoder::load(fixture("bert_sentence"), cpu());
    const auto run = [&](std::vector<std::vector<std::int32_t>> ids,
                         std::vector<std::vector<std::int32_t>> types) {
        encoder.run(ids, types, 4, [](const anvil::models::token_batch&, const anvil::host_tensor&) {});
    };
    CHECK_THROWS_WITH_AS(run({{3, 5, 4}, {3, 64, 4}}, {}),
                         doctest::Contains("text 1, token 1: id 64 is outside the vocabulary [0, 64)"),
                         anvil::error);
    CHECK_THROWS_WITH_AS(run({{3, -1}}, {}), doctest::Contains("id -1 is outside the vocabulary"),
                         anvil::error);
    CHECK_THROWS_WITH_AS(run({{3, 5}}, {{0, 2}}), doctest::Contains("token type 2 is outside [0, 2)"),
                         anvil::error);
    CHECK_THROWS_WITH_AS(run({{3, 5}}, {{0}}),
                         doctest::Contains("text 0 has 2 token ids but 1 token type ids"),
                         anvil::shape_error);
    CHECK_THROWS_WITH_AS(run({{3}, {}}, {}), doctest::Contains("text 1 has no tokens"), anvil::error);
    CHECK_THROWS_WITH_AS(run({std::vector<std::int32_t>(39, 5)}, {}),
                         doctest::Contains("text 0 has 39 tokens; the model takes at most 38"),
                         anvil::shape_error);
    // No texts: nothing to run, nothing compiled.
    std::size_t calls = 0;
    encoder.run({}, {}, 4, [&](const anvil::models::token_batch&, const anvil::host_tensor&) { ++calls; });
    CHECK(calls == 0);
    CHECK(encoder.compiled_programs() == 0);
}

}  // namespace test_text_encoder
