// CLIP: random-weight CLIPModel checkpoints in Hugging Face's format compared with an independent PyTorch
// port of transformers' modeling_clip.py (tools/reference/clip_fixtures.py, which wrote tests/data/clip/):
//   clip         f32, quick_gelu, pooling at the first EOS;
//   clip_legacy  bf16, gelu, eos_token_id 2 in its config (pooling at the argmax of the ids);
//   clip_b16     f16, shaped like CLIP ViT-B/16 (224 x 224 images, 16 x 16 patches) with tiny towers
//                (tools/reference/patch16_fixtures.py), whose image tower runs whole on the Neural Engine;
// both towers on the CPU with both kernel sets, on the Neural Engine simulator and through the Core ML
// route; the CLIP tokenizer.json (NFC, the \s+ Replace, Lowercase, the Split with invert, BPE with </w>)
// against ids from a Python implementation of the tokenizers pipeline; zero-shot probabilities; and the
// inputs and folders that do not fit, with their messages.

#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
// White-box: the split pattern and the whitespace normaliser by name.
#include <anvil/io/split_patterns.hpp>
#include <anvil/io/tokenizer_normalizers.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "model_test_support.hpp"

namespace test_clip {

namespace {

namespace fs = std::filesystem;
namespace json = anvil::json;
using anvil::models::clip;
using anvil::models::load_options;
using anvil_test::cpu;
using anvil_test::data_path;

anvil::host_tensor fixture(const std::string& model, const std::string& name) {
    return anvil_test::load_npy(data_path("clip/" + model + "/" + name));
}

// The fixture's images: clip_b16's are computed (too large to store), the others' stored.
anvil::host_tensor fixture_pixels(const std::string& model) {
    return model == "clip_b16" ? anvil_test::patch16_pixels(2, 224) : fixture(model, "pixels.npy");
}

std::vector<std::string> fixture_texts(const std::string& model) {
    const json::value texts = json::parse_file(data_path("clip/" + model + "/texts.json"));
    std::vector<std::string> out;
    for (const auto& text : texts.as_array())
        out.push_back(text.as_string());
    return out;
}

// The fixture's ids [T, L] as lists, each cut after its first EOS (what a tokenizer gives, unpadded).
std::vector<std::vector<std::int32_t>> fixture_ids(const std::string& model, std::int32_t eos) {
    const anvil::host_tensor ids = fixture(model, "input_ids.npy");
    const auto values = ids.values<std::int32_t>();
    const auto rows = static_cast<std::size_t>(ids.shape()[0]);
    const auto length = static_cast<std::size_t>(ids.shape()[1]);
    std::vector<std::vector<std::int32_t>> out(rows);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t k = 0; k < length; ++k) {
            out[r].push_back(values[r * length + k]);
            if (values[r * length + k] == eos) break;
        }
    }
    return out;
}

std::int32_t eos_of(const clip& model) {
    return *model.text_tokenizer().token_to_id("<|endoftext|>");
}

// A scratch copy of a fixture folder whose files a test may rewrite; removed with the object.
struct scratch_folder {
    anvil_test::temporary_folder folder{"anvil-clip"};
    explicit scratch_folder(const std::string& model) {
        for (const auto& entry : fs::directory_iterator(data_path("clip/" + model)))
            fs::copy_file(entry.path(), folder.path / entry.path().filename());
    }
    [[nodiscard]] const fs::path& path() const { return folder.path; }
    void write(const std::string& name, const std::string& text) const {
        std::ofstream(path() / name) << text;
    }
};

std::string error_of(auto&& call) {
    try {
        call();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no error)";
}

// Both towers of `model` against the fixture: features, embeddings and logits.
void check_towers(const std::string& model, const load_options& options, double tolerance) {
    CAPTURE(model);
    auto loaded = clip::load(data_path("clip/" + model), options);
    const auto texts = fixture_texts(model);
    const auto pixels = fixture_pixels(model);
    const double text_error = anvil_test::max_relative_error(loaded.text_embeddings(texts, false),
                                                             fixture(model, "text_features.npy"));
    const double image_error = anvil_test::max_relative_error(loaded.image_embeddings(pixels, false),
                                                              fixture(model, "image_features.npy"));
    const double text_embeds_error =
        anvil_test::max_relative_error(loaded.text_embeddings(texts), fixture(model, "text_embeds.npy"));
    const double image_embeds_error =
        anvil_test::max_relative_error(loaded.image_embeddings(pixels), fixture(model, "image_embeds.npy"));
    const double logits_error = anvil_test::max_relative_error(loaded.logits_per_image(pixels, texts),
                                                               fixture(model, "logits_per_image.npy"));
    MESSAGE(model << ": max relative error of text features " << text_error << ", image features "
                  << image_error << ", embeddings " << text_embeds_error << " / " << image_embeds_error
                  << ", logits_per_image " << logits_error);
    CHECK(text_error < tolerance);
    CHECK(image_error < tolerance);
    CHECK(text_embeds_error < tolerance);
    CHECK(image_embeds_error < tolerance);
    CHECK(logits_error < 10 * tolerance);  // scaled by exp(logit_scale), about 14
}

}  // namespace

TEST_CASE("clip: the tokenizer.json pipeline gives the golden ids, truncated ones too") {
    const json::value goldens = json::parse_file(data_path("clip/tokenizer_goldens.json"));
    const anvil::tokenizer tok = anvil::tokenizer::load(data_path("clip/clip"));
    const auto max_length = static_cast<std::size_t>(goldens.find("max_length")->as_int());
    std::size_t checked = 0;
    for (const auto& item : goldens.find("cases")->as_array()) {
        const std::string& text = item.find("text")->as_string();
        CAPTURE(text);
        std::vector<std::int32_t> ids, truncated;
        for (const auto& id : item.find("ids")->as_array())
            ids.push_back(static_cast<std::int32_t>(id.as_int()));
        for (const auto& id : item.find("truncated")->as_array())
            truncated.push_back(static_cast<std::int32_t>(id.as_int()));
        CHECK(tok.encode(text).ids == ids);
        anvil::encode_options cut;
        cut.max_length = max_length;
        CHECK(tok.encode(text, cut).ids == truncated);
        ++checked;
    }
    CHECK(checked >= 12);
    // Decoding as CLIP's tokenizers do: specials skipped, "</w>" a space, the ends trimmed. The expected
    // texts follow that rule by hand from CLIP's pre-tokenization (lowercased; letters, single digits,
    // runs of other symbols and the contractions 's 't ... as pieces).
    const auto model = clip::load(data_path("clip/clip"), cpu());
    const std::vector<std::pair<std::string, std::string>> decoded = {
        {"a photo of a cat", "a photo of a cat"},
        {"a photo of a dog.", "a photo of a dog ."},
        {"A PHOTO of   two\tDogs!!", "a photo of two dogs !!"},
        {"it's 2024, isn't it?", "it 's 2 0 2 4 , isn 't it ?"},
        {"<|startoftext|>hello<|endoftext|>", "hello"},
        {"   ", ""}};
    for (const auto& item : decoded) {
        const std::string& text = item.first;
        CAPTURE(text);
        CHECK(model.text(tok.encode(text).ids) == item.second);
    }
}

TEST_CASE("clip: the split pattern keeps CLIP's pieces and drops the whitespace between them") {
    const auto pieces = [](std::string_view text, bool with_specials) {
        std::vector<std::string> out;
        anvil::detail::split_clip(text, with_specials, [&](std::size_t b, std::size_t e) {
            out.emplace_back(text.substr(b, e - b));
        });
        return out;
    };
    // Contractions first and case-sensitive, letter runs, one digit each, punctuation runs.
    CHECK(pieces("it's 42 dogs!!", false) == std::vector<std::string>{"it", "'s", "4", "2", "dogs", "!!"});
    CHECK(pieces("IT'S they'll", false) == std::vector<std::string>{"IT", "'", "S", "they", "'ll"});
    CHECK(pieces("x!'s", false) == std::vector<std::string>{"x", "!'", "s"});
    CHECK(pieces("  \t ", false).empty());
    CHECK(pieces("a<|endoftext|>", false) == std::vector<std::string>{"a", "<|", "endoftext", "|>"});
    CHECK(pieces("a<|endoftext|>", true) == std::vector<std::string>{"a", "<|endoftext|>"});
    std::string text = "two\t\u3000 spaces\n";
    anvil::detail::whitespace_runs_normalizer(" ").normalize(text);
    CHECK(text == "two spaces ");
}

TEST_CASE("clip: both towers match PyTorch on the CPU, with the optimised and the reference kernels") {
    for (const auto kernels : {anvil::cpu_kernels::optimized, anvil::cpu_kernels::reference}) {
        CAPTURE(static_cast<int>(kernels));
        // fp32 on both sides: the fixtures are float64 results rounded once.
        check_towers("clip", cpu(kernels), 1e-4);
        check_towers("clip_legacy", cpu(kernels), 1e-4);
        check_towers("clip_b16", cpu(kernels), 1e-4);
    }
}

TEST_CASE("clip: padding, batching and legacy pooling do not change a text's embedding") {
    auto model = clip::load(data_path("clip/clip"), cpu());
    CHECK(model.config().text.max_positions == 16);
    CHECK_FALSE(model.config().text.legacy_pooling());
    CHECK(model.config().vision.tokens() == 17);
    const auto texts = fixture_texts("clip");
    const auto expected = fixture("clip", "text_features.npy");
    // The fixture's ids (what the golden tokenizer gave), and each text alone: one program per shape.
    const auto ids = fixture_ids("clip", eos_of(model));
    CHECK(anvil_test::max_relative_error(model.text_embeddings_from_ids(ids, false), expected) < 1e-4);
    const auto all = expected.to_f32();
    const auto dim = static_cast<std::size_t>(model.config().projection_dim);
    for (std::size_t i = 0; i < texts.size(); ++i) {
        const auto alone = model.text_embeddings(std::span<const std::string>(&texts[i], 1), false).to_f32();
        REQUIRE(alone.size() == dim);
        for (std::size_t k = 0; k < dim; ++k)
            CHECK(alone[k] == doctest::Approx(all[i * dim + k]).epsilon(1e-4));
    }
    // Padding after the EOS with other ids changes nothing (causal attention).
    auto padded = ids;
    for (auto& text : padded)
        while (text.size() < 16)
            text.push_back(7);
    CHECK(anvil_test::max_relative_error(model.text_embeddings_from_ids(padded, false), expected) < 1e-4);

    auto legacy = clip::load(data_path("clip/clip_legacy"), cpu());
    CHECK(legacy.config().text.legacy_pooling());
    CHECK(legacy.config().text.act == anvil::models::activation::gelu);
    CHECK(legacy.config().vision.layer_norm_eps == doctest::Approx(1e-6));
}

TEST_CASE("clip: zero-shot probabilities are the softmax of CLIP's logits, best first") {
    auto model = clip::load(data_path("clip/clip"), cpu());
    const auto pixels = fixture("clip", "pixels.npy");
    const auto texts = fixture_texts("clip");
    const auto logits = fixture("clip", "logits_per_image.npy").to_f32();
    // The texts as labels under the template "{}": the logits the fixture has.
    const auto ranked = model.zero_shot(pixels, texts, "{}");
    REQUIRE(ranked.size() == 2);
    const std::size_t l = texts.size();
    for (std::size_t i = 0; i < ranked.size(); ++i) {
        CAPTURE(i);
        REQUIRE(ranked[i].size() == l);
        double top = -1e30, total = 0.0;
        for (std::size_t j = 0; j < l; ++j)
            top = std::max(top, double{logits[i * l + j]});
        for (std::size_t j = 0; j < l; ++j)
            total += std::exp(double{logits[i * l + j]} - top);
        double sum = 0.0;
        for (std::size_t r = 0; r < l; ++r) {
            const auto& entry = ranked[i][r];
            CHECK(entry.label == texts[entry.index]);
            CHECK(entry.probability ==
                  doctest::Approx(std::exp(double{logits[i * l + entry.index]} - top) / total).epsilon(1e-4));
            if (r > 0) CHECK(ranked[i][r - 1].probability >= entry.probability);
            sum += entry.probability;
        }
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
    }
    // A template puts each label in a sentence.
    const std::vector<std::string> labels{"cat", "dog"};
    const auto templated = model.zero_shot(pixels, labels, "a photo of a {}.").front();
    const std::vector<std::string> sentences{"a photo of a cat.", "a photo of a dog."};
    const auto direct = model.logits_per_image(pixels, sentences).to_f32();
    for (const auto& entry : templated)
        CHECK(entry.logit == doctest::Approx(direct[entry.index]).epsilon(1e-5));
}

TEST_CASE("clip: preprocessing follows preprocessor_config.json, else CLIPImageProcessor's defaults") {
    auto model = clip::load(data_path("clip/clip"), cpu());
    const anvil::image_preprocessing& p = model.preprocessing();
    CHECK(p.resize_shortest_edge == 32);
    CHECK(p.crop_height == 32);
    CHECK(p.crop_width == 32);
    CHECK(p.filter == anvil::resample::bicubic);
    CHECK(p.mean[0] == doctest::Approx(0.48145466));
    CHECK(p.std[2] == doctest::Approx(0.27577711));
    // An image of any size comes out at the model's size, and embeds.
    anvil::image picture;
    picture.width = 45;
    picture.height = 37;
    picture.channels = 3;
    picture.pixels.resize(45 * 37 * 3);
    for (std::size_t i = 0; i < picture.pixels.size(); ++i)
        picture.pixels[i] = static_cast<std::uint8_t>((i * 37) % 251);
    const auto embedded = model.image_embeddings(std::span<const anvil::image>(&picture, 1));
    CHECK(embedded.shape() == anvil::dims{1, 24});

    scratch_folder folder("clip");
    fs::remove(folder.path() / "preprocessor_config.json");
    const auto defaults = clip::load(folder.path(), cpu()).preprocessing();
    CHECK(defaults.resize_shortest_edge == 32);  // the config's image size
    CHECK(defaults.crop_height == 32);
    CHECK(defaults.filter == anvil::resample::bicubic);
    CHECK(defaults.mean[1] == doctest::Approx(0.4578275));
}

void check_simulated_device(const anvil_test::ane_target& target) {
    load_options options;
    options.compile = target.options;
    // Every segment of both towers on the Neural Engine, unless a variant injects faults (those runs check
    // that the CPU takes the refused segments and the numbers stay right).
    options.compile.strict_device = !anvil_test::simulator_injects_faults();
    // fp16 storage and arithmetic through 1-2 layers of each tower; features of magnitude ~1 moved by at
    // most a few 1e-3 in the runs seen (the messages give them); 2e-2 still catches a wrong token, layer,
    // pooling or projection (those move features by 0.1 and more).
    check_towers("clip", options, 2e-2);
    check_towers("clip_legacy", options, 2e-2);
    check_towers("clip_b16", options, 2e-2);
    if (!options.compile.strict_device) return;
    // The image tower of the ViT-B/16-shaped model whole on the Neural Engine, its 16 x 16 patch conv as a
    // space-to-depth rearrangement and a 1x1 conv (RUNTIME.md §0b #26): no CPU segment at all.
    options.compile.placement_log = std::make_shared<anvil::placement_journal>();
    auto b16 = clip::load(data_path("clip/clip_b16"), options);
    static_cast<void>(b16.image_embeddings(fixture_pixels("clip_b16")));
    anvil_test::check_all_on_ane_with_one_conv(*options.compile.placement_log);
}

TEST_CASE("clip: both towers on the Neural Engine simulator agree with PyTorch to fp16 precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target)) return;
    check_simulated_device(target);
}

TEST_CASE("clip: both towers through the Core ML route agree with PyTorch to fp16 precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target, anvil::device::coreml)) return;
    check_simulated_device(target);
}

TEST_CASE("clip: folders, configs and inputs that do not fit name what is wrong") {
    using doctest::Contains;
    auto model = clip::load(data_path("clip/clip"), cpu());
    const std::vector<std::string> labels{"cat"};
    CHECK_THROWS_WITH(
        (void)model.image_embeddings(anvil::host_tensor(anvil::dtype::f32, anvil::dims{1, 3, 28, 28})),
        Contains("clip: expected pixels [batch, 3, 32, 32] (vision_config image_size), got [1, 3, 28, 28]"));
    CHECK_THROWS_WITH((void)model.zero_shot(fixture("clip", "pixels.npy"), labels, "a photo"),
                      Contains("the label template 'a photo' has no {}"));
    CHECK_THROWS_WITH((void)model.zero_shot(fixture("clip", "pixels.npy"), {}, "{}"),
                      Contains("needs at least one label"));
    const std::vector<std::vector<std::int32_t>> out_of_range{{1, 99999}};
    CHECK_THROWS_WITH((void)model.text_embeddings_from_ids(out_of_range),
                      Contains("token id 99999 is out of range"));
    const std::vector<std::vector<std::int32_t>> no_eos{{eos_of(model) - 1, 3, 4}};
    CHECK_THROWS_WITH((void)model.text_embeddings_from_ids(no_eos),
                      Contains("text 0 has no end-of-text token"));
    const std::vector<std::vector<std::int32_t>> too_long{std::vector<std::int32_t>(17, eos_of(model))};
    CHECK_THROWS_WITH((void)model.text_embeddings_from_ids(too_long),
                      Contains("text 0 has 17 tokens; the text tower takes at most 16"));

    {  // Not a CLIP config.
        scratch_folder folder("clip");
        folder.write("config.json", R"({"model_type": "vit"})");
        CHECK_THROWS_AS((void)clip::load(folder.path(), cpu()), anvil::unsupported_error);
        CHECK_THROWS_WITH((void)clip::load(folder.path(), cpu()),
                          Contains("model_type 'vit' is not a CLIP model"));
    }
    {  // A tower's config that does not fit its weights, or itself.
        scratch_folder folder("clip");
        json::value config = json::parse_file(folder.path() / "config.json");
        config.as_object()["vision_config"].as_object()["hidden_size"] = json::value(std::int64_t{42});
        folder.write("config.json", json::dump(config));
        CHECK_THROWS_WITH(
            (void)clip::load(folder.path(), cpu()),
            Contains("vision_config: hidden_size 42 is not a multiple of num_attention_heads 4"));
        config.as_object()["vision_config"].as_object()["hidden_size"] = json::value(std::int64_t{48});
        folder.write("config.json", json::dump(config));
        CHECK_THROWS_WITH((void)clip::load(folder.path(), cpu()),
                          Contains("vision_model.embeddings.class_embedding"));
        config.as_object()["vision_config"] = json::value("big");
        folder.write("config.json", json::dump(config));
        CHECK_THROWS_WITH((void)clip::load(folder.path(), cpu()),
                          Contains("'vision_config' must be an object"));
    }
    {  // No logit_scale, and no tokenizer.
        scratch_folder folder("clip");
        const auto source = anvil::checkpoint::open(data_path("clip/clip/model.safetensors"));
        anvil::safetensors_writer writer;
        for (const auto* tensor : source.tensors())
            if (tensor->name() != "logit_scale") writer.add(*tensor);
        writer.write(folder.path() / "model.safetensors");
        CHECK_THROWS_WITH((void)clip::load(folder.path(), cpu()), Contains("no tensor 'logit_scale'"));
    }
    {
        scratch_folder folder("clip");
        fs::remove(folder.path() / "tokenizer.json");
        auto bare = clip::load(folder.path(), cpu());
        CHECK_THROWS_WITH((void)bare.text_embeddings(labels), Contains("the model folder has no tokenizer"));
        CHECK(bare.text_embeddings_from_ids(fixture_ids("clip", eos_of(model))).shape() ==
              anvil::dims{4, 24});
    }
}

}  // namespace test_clip
