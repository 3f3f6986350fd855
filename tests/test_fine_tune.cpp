// Fine-tuning's building blocks (train/fine_tune.hpp, train/numpy_random.hpp): numpy's default_rng as the
// shuffling and LoRA initialisation use it, against values numpy 1.24 printed; Hugging Face's weight-decay
// rule; the weight_loader substitute every recipe trains through; the library API on a random-weight BERT
// folder, with its errors. tests/cli/test_train_command.py compares whole runs with the float64 reference.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include "model_test_support.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fine_tune_test {

std::filesystem::path cases_folder() {
    return std::filesystem::path(ANVIL_TEST_DATA_DIR) / "train" / "cases";
}

void write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream file(path, std::ios::binary);
    file << text;
    REQUIRE(file.good());
}

// One step at lr 0 on a one-line jsonl: the loss of that example under the folder's weights.
double loss_of(const std::filesystem::path& model, const std::filesystem::path& data) {
    anvil::train::fine_tune_options o;
    o.model = model;
    o.data = data;
    o.steps = 1;
    o.lr = 0.0;
    o.compile.target = anvil::device::cpu;
    return anvil::train::fine_tuning::load(o).step().loss;
}

}  // namespace fine_tune_test

TEST_CASE(
    "numpy_generator: default_rng(seed) permutations, uniforms and raw draws as numpy 1.24 gives them") {
    // /usr/bin/python3 -c "import numpy as np; s=...; print(list(np.random.default_rng(s).permutation(12)),
    //     [float(v).hex() for v in np.random.default_rng(s).uniform(-0.5, 0.5, 3)])"
    struct expected {
        std::uint64_t seed;
        std::vector<std::size_t> permutation12, permutation5;
        std::vector<double> uniform;
    };
    const std::vector<expected> cases = {
        {0,
         {9, 2, 7, 4, 5, 11, 0, 3, 6, 10, 8, 1},
         {2, 4, 3, 0, 1},
         {0x1.187f5e7ece140p-3, -0x1.d77a103be9318p-3, -0x1.d60b095ac4c86p-2}},
        {7,
         {4, 6, 10, 0, 1, 3, 8, 7, 2, 5, 9, 11},
         {2, 0, 4, 1, 3},
         {0x1.00320d4f8f2a4p-3, 0x1.96bf36f2bc99ap-2, 0x1.1a4d597e502bep-2}},
        {42,
         {0, 7, 6, 9, 11, 3, 5, 2, 4, 10, 1, 8},
         {4, 2, 3, 1, 0},
         {0x1.1887ef345b648p-2, -0x1.f4b533cb0dc10p-5, 0x1.6f344b09bb684p-2}},
        {4294967303ull,
         {7, 10, 6, 11, 0, 8, 9, 1, 3, 4, 2, 5},
         {3, 0, 2, 1, 4},
         {0x1.149fd4577b256p-2, -0x1.8d62f1c87f1fap-2, -0x1.3e5d29eef6e4cp-2}},
        {18446744073709551615ull,
         {8, 6, 3, 2, 11, 0, 4, 7, 1, 5, 9, 10},
         {4, 0, 3, 1, 2},
         {0x1.70b1d3d4623a8p-3, 0x1.619967d7cce08p-2, -0x1.f86b539a90f4cp-2}},
    };
    for (const expected& e : cases) {
        CAPTURE(e.seed);
        CHECK(anvil::train::numpy_generator(e.seed).permutation(12) == e.permutation12);
        CHECK(anvil::train::numpy_generator(e.seed).permutation(5) == e.permutation5);
        CHECK(anvil::train::numpy_generator(e.seed).uniform(-0.5, 0.5, 3) == e.uniform);
    }
    // np.random.default_rng(3).integers(0, 2**64, size=3, dtype=np.uint64): the raw 64-bit outputs.
    anvil::train::numpy_generator raw(3);
    CHECK(raw.next_uint64() == 1579948266424812280ull);
    CHECK(raw.next_uint64() == 4368382809143759861ull);
    CHECK(raw.next_uint64() == 14780904992460893238ull);
    CHECK(anvil::train::numpy_generator(1).permutation(0).empty());
    CHECK(anvil::train::numpy_generator(1).permutation(1) == std::vector<std::size_t>{0});
}

TEST_CASE(
    "numpy_generator: default_rng([a, b]) draws as numpy 1.24 gives them (dropout's per-step seeding)") {
    // /usr/bin/python3 -c "import numpy as np; print([float(v).hex() for v in
    // np.random.default_rng(e).random(3)])" for each list e: SeedSequence concatenates each integer's 32-bit
    // words, so 2^32 + 7 counts two.
    struct expected {
        std::vector<std::uint64_t> entropy;
        std::vector<double> random;
    };
    const std::vector<expected> cases = {
        {{0, 1}, {0x1.c78bd7c50b582p-1, 0x1.1d4132d1fc63bp-1, 0x1.9a109ff09b1bdp-1}},
        {{42, 7}, {0x1.0a0d0906f6320p-1, 0x1.ab67268aa9cf0p-3, 0x1.0551c716cf494p-1}},
        {{4294967303ull, 3}, {0x1.08982945309edp-1, 0x1.aad38d49b73b0p-3, 0x1.99e34a6432434p-3}},
        {{18446744073709551615ull, 1099511627776ull},
         {0x1.77c6c05c0e2a9p-1, 0x1.7d1de587d6bc9p-1, 0x1.a1275f657b6c2p-2}},
    };
    for (const expected& e : cases) {
        CAPTURE(e.entropy);
        anvil::train::numpy_generator draws(e.entropy);
        for (const double value : e.random)
            CHECK(draws.next_double() == value);
    }
}

TEST_CASE("hf_decays: the Trainer's decay groups by name") {
    using anvil::detail::fine_tuning::hf_decays;
    CHECK(hf_decays("bert.encoder.layer.0.attention.self.query.weight"));
    CHECK(hf_decays("bert.embeddings.word_embeddings.weight"));
    CHECK(hf_decays("vit.embeddings.cls_token"));
    CHECK(hf_decays("resnet.embedder.embedder.normalization.weight"));  // BatchNorm weights decay
    CHECK(hf_decays("bert.encoder.layer.0.attention.self.query.lora_A.weight"));
    CHECK_FALSE(hf_decays("classifier.bias"));
    CHECK_FALSE(hf_decays("bert.embeddings.LayerNorm.weight"));
    CHECK_FALSE(hf_decays("distilbert.transformer.layer.0.sa_layer_norm.weight"));
    CHECK_FALSE(hf_decays("vit.encoder.layer.0.layernorm_before.weight"));
    CHECK_FALSE(hf_decays("mpnet.encoder.relative_attention_bias.weight"));
    CHECK_FALSE(hf_decays("model.norm.weight"));
    CHECK_FALSE(hf_decays("model.layers.0.input_rmsnorm.weight"));
    CHECK(hf_decays("model.normalizer.weight"));  // "norm" only as a whole component
}

TEST_CASE("weight_loader substitute: a recipe reads what the substitute gives, with each tensor's role") {
    const auto weights = std::make_shared<const anvil::checkpoint>(
        anvil::checkpoint::open(fine_tune_test::cases_folder() / "models" / "bert"));
    anvil::graph g;
    std::vector<std::string> linear, other;
    anvil::models::weight_loader loader(
        g, weights,
        [&](anvil::graph& target, std::string_view name, anvil::models::weight_role role,
            const anvil::dims& shape,
            const std::function<anvil::tensor<float>()>&) -> std::optional<anvil::tensor<float>> {
            (role == anvil::models::weight_role::linear_weight ? linear : other).emplace_back(name);
            if (name != "classifier.weight") return std::nullopt;
            return anvil::tensor<float>(target.parameter(std::string(name), anvil::dtype::f32, shape));
        });
    const auto layer = anvil::models::load_linear(loader, "classifier", 3, 32);
    const auto norm = anvil::models::load_layer_norm(loader, "bert.embeddings.LayerNorm", 32, 1e-12);
    CHECK(linear == std::vector<std::string>{"classifier.weight"});
    CHECK(other == std::vector<std::string>{"classifier.bias", "bert.embeddings.LayerNorm.weight",
                                            "bert.embeddings.LayerNorm.bias"});
    REQUIRE(g.parameters().size() == 1);
    CHECK(g.parameters()[0].producer().name == "classifier.weight");
    CHECK(layer.weight.value().id() == g.parameters()[0].id());
    CHECK(norm.weight.value().producer().kind == anvil::op::constant);
}

TEST_CASE("fine_tuning: the library API trains a BERT classifier and names bad options") {
    const auto folder = fine_tune_test::cases_folder();
    anvil::train::fine_tune_options o;
    o.model = folder / "models" / "bert";
    o.data = folder / "data" / "bert.jsonl";
    o.batch_size = 10;
    o.steps = 3;
    o.lr = 2e-3;
    o.shuffle = false;
    o.schedule = anvil::train::schedule_kind::constant;
    o.compile.target = anvil::device::cpu;
    auto run = anvil::train::fine_tuning::load(o);
    CHECK(run.total_steps() == 3);
    CHECK(run.examples() == 10);
    std::vector<double> losses;
    while (run.steps_done() < run.total_steps())
        losses.push_back(run.step().loss);
    CHECK(losses[2] < losses[0]);  // the same batch three times
    CHECK(run.programs_compiled() == 1);
    CHECK_THROWS_WITH_AS(static_cast<void>(run.step()), doctest::Contains("all 3 steps are done"),
                         anvil::error);

    auto bad = o;
    bad.freeze = {"."};
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::fine_tuning::load(bad)),
                         doctest::Contains("freezes every trainable tensor"), anvil::error);
    bad = o;
    bad.freeze = {"("};
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::fine_tuning::load(bad)),
                         doctest::Contains("--freeze: bad regex"), anvil::error);
    bad = o;
    bad.nesterov = true;
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::fine_tuning::load(bad)),
                         doctest::Contains("--nesterov needs"), anvil::error);
    bad = o;
    bad.lora_rank = 2;
    bad.lora_targets = std::vector<std::string>{"word_embeddings"};
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::fine_tuning::load(bad)),
                         doctest::Contains("is not a Linear"), anvil::error);
    bad = o;
    bad.lora_rank = 2;
    bad.lora_targets = std::vector<std::string>{"classifier"};
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::fine_tuning::load(bad)),
                         doctest::Contains("is in modules_to_save"), anvil::error);
    bad = o;
    bad.data = folder / "data" / "bad" / "too_long.jsonl";
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::train::fine_tuning::load(bad)),
                         doctest::Contains("--truncate"), anvil::error);
    bad.truncate = true;
    CHECK(anvil::train::fine_tuning::load(bad).examples() == 1);
}

TEST_CASE("fine_tuning: the text and image line forms feed what the tokenizer and the preprocessing make") {
    const anvil_test::temporary_folder scratch("anvil-fine-tune");
    SUBCASE("{\"text\", \"text_pair\"} through the folder's vocab.txt equals the ids it encodes to") {
        const auto model = scratch.path / "bert";
        std::filesystem::create_directories(model);
        for (const char* file : {"config.json", "model.safetensors"})
            std::filesystem::copy_file(fine_tune_test::cases_folder() / "models" / "bert" / file,
                                       model / file);
        // A WordPiece vocabulary of the fixture's 100 ids: the specials, then words and letters.
        std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\na\ndog\n##s\n";
        for (int i = 13; i < 100; ++i)
            vocab += "w" + std::to_string(i) + "\n";
        fine_tune_test::write_text(model / "vocab.txt", vocab);
        const anvil::tokenizer words = anvil::tokenizer::load(model);
        const anvil::encoding e = words.encode_pair("The cat sat", "a dogs on the mat");
        REQUIRE(e.ids.size() > 8);
        std::string ids, types;
        for (std::size_t i = 0; i < e.ids.size(); ++i) {
            ids += (i ? ", " : "") + std::to_string(e.ids[i]);
            types += (i ? ", " : "") + std::to_string(e.type_ids[i]);
        }
        fine_tune_test::write_text(scratch.path / "text.jsonl",
                                   "{\"text\": \"The cat sat\", \"text_pair\": \"a dogs on the mat\", "
                                   "\"label\": 2}\n");
        fine_tune_test::write_text(scratch.path / "ids.jsonl",
                                   "{\"ids\": [" + ids + "], \"type_ids\": [" + types + "], \"label\": 2}\n");
        CHECK(fine_tune_test::loss_of(model, scratch.path / "text.jsonl") ==
              fine_tune_test::loss_of(model, scratch.path / "ids.jsonl"));
        fine_tune_test::write_text(scratch.path / "no_tokenizer.jsonl",
                                   "{\"text\": \"the cat\", \"label\": 0}\n");
        CHECK_THROWS_WITH_AS(
            static_cast<void>(fine_tune_test::loss_of(fine_tune_test::cases_folder() / "models" / "bert",
                                                      scratch.path / "no_tokenizer.jsonl")),
            doctest::Contains("needs the model folder's tokenizer"), anvil::error);
    }
    SUBCASE("{\"image\"} through preprocessor_config.json equals the pixels it preprocesses to") {
        const auto model = scratch.path / "vit";
        std::filesystem::create_directories(model);
        for (const char* file : {"config.json", "model.safetensors"})
            std::filesystem::copy_file(fine_tune_test::cases_folder() / "models" / "vit" / file,
                                       model / file);
        fine_tune_test::write_text(
            model / "preprocessor_config.json",
            R"({"image_processor_type": "ViTImageProcessor", "do_resize": true, "size": {"height": 8, "width": 8}, "resample": 2, "do_rescale": true,
                       "rescale_factor": 0.00392156862745098, "do_normalize": true,
                       "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})");
        const auto picture = std::filesystem::path(ANVIL_TEST_DATA_DIR) / "images" / "chelsea.png";
        const anvil::host_tensor pixels =
            anvil::preprocess(anvil::read_image(picture), anvil::image_preprocessing::load(model));
        REQUIRE(pixels.shape() == anvil::dims{3, 8, 8});
        anvil::npy::write(scratch.path / "chelsea.npy", anvil::dtype::f32,
                          std::span<const std::int64_t>(pixels.shape().begin(), pixels.shape().end()),
                          pixels.raw());
        fine_tune_test::write_text(scratch.path / "image.jsonl",
                                   "{\"image\": \"" + picture.string() + "\", \"label\": 1}\n");
        fine_tune_test::write_text(scratch.path / "pixels.jsonl",
                                   "{\"pixels\": \"chelsea.npy\", \"label\": 1}\n");
        CHECK(fine_tune_test::loss_of(model, scratch.path / "image.jsonl") ==
              fine_tune_test::loss_of(model, scratch.path / "pixels.jsonl"));
    }
}

TEST_CASE("fine_tuning: a ResNet evaluates in eval mode without compiling again as its statistics change") {
    // test_train_command.py compares the numbers with the float64 reference; this checks what it cannot see:
    // the running statistics are program inputs, so a second evaluation after more steps compiles nothing.
    const auto folder = fine_tune_test::cases_folder();
    anvil::train::fine_tune_options o;
    o.model = folder / "models" / "resnet";
    o.data = folder / "data" / "resnet.jsonl";
    o.batch_size = 4;
    o.epochs = 2;
    o.lr = 0.05;
    o.optimizer = "sgd";
    o.shuffle = false;
    o.compile.target = anvil::device::cpu;
    auto run = anvil::train::fine_tuning::load(o);
    std::vector<anvil::train::evaluation> evaluations;
    std::vector<std::size_t> compiled;
    while (run.steps_done() < run.total_steps()) {
        static_cast<void>(run.step());
        if (run.at_epoch_end()) {
            evaluations.push_back(run.evaluate(o.data));
            compiled.push_back(run.programs_compiled());
        }
    }
    REQUIRE(evaluations.size() == 2);
    // Steps of 4, 4 and 2 examples, evaluations of the same two shapes: four programs, none after epoch 1.
    CHECK(compiled == std::vector<std::size_t>{4, 4});
    CHECK(evaluations[0].examples == 10);
    CHECK(evaluations[0].accuracy.has_value());
    CHECK(evaluations[0].loss != evaluations[1].loss);  // the weights and statistics moved in between
}

TEST_CASE("fine_tuning: a multi-label classifier's labels are lists of num_labels numbers in [0, 1]") {
    const anvil_test::temporary_folder scratch("anvil-fine-tune-multilabel");
    const auto folder = fine_tune_test::cases_folder();
    anvil::train::fine_tune_options o;
    o.model = folder / "models" / "bert_multilabel";
    o.compile.target = anvil::device::cpu;
    const auto refused = [&](const std::string& label) {
        fine_tune_test::write_text(scratch.path / "bad.jsonl",
                                   "{\"ids\": [2, 5, 3], \"label\": [1, 0, 0, 1]}\n"
                                   "{\"ids\": [2, 6, 3], \"label\": " +
                                       label + "}\n");
        o.data = scratch.path / "bad.jsonl";
        try {
            static_cast<void>(anvil::train::fine_tuning::load(o));
        } catch (const anvil::error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    CHECK(refused("1").find("line 2: label 1 is not a list of 4 numbers") != std::string::npos);
    CHECK(refused("[1, 0, 1]").find("label [1,0,1] is not a list of 4 numbers") != std::string::npos);
    CHECK(refused("[1, 0, true, 1]").find("is not a list of 4 numbers") != std::string::npos);
    CHECK(refused("[1, 0, 1.5, 1]").find("has a value outside [0, 1]") != std::string::npos);
    CHECK(refused("[0, 0.5, 1, 0.25]") == "accepted");
}
