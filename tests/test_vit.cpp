// ViT and DeiT image classifiers loaded from random-weight checkpoints in Hugging Face's format and compared
// with the logits of an independent PyTorch port of transformers' modeling_vit.py / modeling_deit.py
// (tools/reference/vit_fixtures.py, which wrote tests/data/vit/): a ViT (f32 weights), a DeiT with its
// teacher head (bf16) and a DeiT without it (f16, no qkv bias, gelu_new), and a ViT shaped like
// google/vit-base-patch16-224 (224 x 224 images, 16 x 16 patches, a tiny hidden size; f16;
// tools/reference/patch16_fixtures.py), on the CPU with both kernel sets and on the Neural Engine simulator,
// where every segment of the 16 x 16 one, its patch conv included, runs on the Neural Engine. Then
// checkpoints and inputs that do not fit, with their messages.

#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "model_test_support.hpp"

namespace test_vit {

namespace {

using anvil::models::load_options;
using anvil::models::vit;
using anvil_test::data_path;

anvil::host_tensor fixture(const std::string& model, const std::string& name) {
    return anvil_test::load_npy(data_path("vit/" + model + "/" + name));
}

// The fixture's images: vit_b16's are computed (too large to store), the others' stored.
anvil::host_tensor fixture_pixels(const std::string& model) {
    return model == "vit_b16" ? anvil_test::patch16_pixels(2, 224) : fixture(model, "pixels.npy");
}

using anvil_test::cpu;

// A scratch copy of a fixture folder whose files a test may rewrite; removed with the object.
struct scratch_folder {
    std::filesystem::path path;
    explicit scratch_folder(const std::string& model) {
        std::string pattern = (std::filesystem::temp_directory_path() / "anvil-vit-XXXXXX").string();
        REQUIRE(mkdtemp(pattern.data()) != nullptr);
        path = pattern;
        if (!model.empty()) {
            for (const auto& entry : std::filesystem::directory_iterator(data_path("vit/" + model)))
                std::filesystem::copy_file(entry.path(), path / entry.path().filename());
        }
    }
    scratch_folder(const scratch_folder&) = delete;
    scratch_folder& operator=(const scratch_folder&) = delete;
    ~scratch_folder() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

// The fixture's checkpoint rewritten: `drop` left out, `replace` (name, shape) given zeros of a new shape.
void rewrite_weights(const scratch_folder& folder, const std::string& model, const std::string& drop,
                     const std::string& replace = {}, const std::vector<std::int64_t>& shape = {}) {
    const auto source = anvil::checkpoint::open(data_path("vit/" + model + "/model.safetensors"));
    anvil::safetensors_writer writer;
    for (const auto* tensor : source.tensors()) {
        if (tensor->name() == drop) continue;
        if (tensor->name() == replace) {
            std::size_t count = 1;
            for (const auto extent : shape)
                count *= static_cast<std::size_t>(extent);
            writer.add(replace, shape, std::vector<float>(count, 0.0f));
            continue;
        }
        writer.add(*tensor);
    }
    writer.write(folder.path / "model.safetensors");
}

}  // namespace

TEST_CASE("vit: ViT and DeiT logits match PyTorch, with the optimised and the reference kernels") {
    for (const std::string model : {"vit", "deit_teacher", "deit", "vit_b16"}) {
        CAPTURE(model);
        const auto pixels = fixture_pixels(model);
        const auto expected = fixture(model, "logits.npy");
        for (const auto kernels : {anvil::cpu_kernels::optimized, anvil::cpu_kernels::reference}) {
            CAPTURE(static_cast<int>(kernels));
            auto classifier = vit::load(data_path("vit/" + model), cpu(kernels));
            const auto logits = classifier.logits(pixels);
            CHECK(logits.shape() == expected.shape());
            CHECK(anvil_test::max_relative_error(logits, expected) < 1e-4);
            CHECK(classifier.labels().size() == 7);
            CHECK(classifier.labels()[2] == "great white shark");
        }
    }
}

TEST_CASE("vit: the heads and tokens follow the checkpoint, and each batch size compiles once") {
    auto teacher = vit::load(data_path("vit/deit_teacher"), cpu(anvil::cpu_kernels::optimized));
    CHECK(teacher.head() == anvil::models::vit_head::cls_and_distillation);
    CHECK(teacher.config().tokens() == 18);
    CHECK(teacher.config().layers == 3);
    auto plain = vit::load(data_path("vit/deit"), cpu(anvil::cpu_kernels::optimized));
    CHECK(plain.head() == anvil::models::vit_head::cls);
    CHECK_FALSE(plain.config().qkv_bias);
    CHECK(plain.config().act == anvil::models::activation::gelu_tanh);
    CHECK(plain.config().layer_norm_eps == doctest::Approx(1e-6));

    // One image of the batch alone gives that image's logits, from a second program.
    auto classifier = vit::load(data_path("vit/vit"), cpu(anvil::cpu_kernels::optimized));
    const auto pixels = fixture("vit", "pixels.npy");
    const auto expected = fixture("vit", "logits.npy").to_f32();
    const auto all = pixels.to_f32();
    const std::size_t image = all.size() / 2;
    const auto second = anvil::host_tensor::from(
        std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(image), all.end()),
        anvil::dims{1, 3, 20, 20});
    const auto alone = classifier.logits(second).to_f32();
    REQUIRE(alone.size() == 7);
    for (std::size_t i = 0; i < 7; ++i)
        CHECK(alone[i] == doctest::Approx(expected[7 + i]).epsilon(1e-4));
    static_cast<void>(classifier.logits(pixels));
    static_cast<void>(classifier.logits(pixels));
    CHECK(classifier.compiled_programs() == 2);
}

void check_simulated_device(const anvil_test::ane_target& target) {
    for (const std::string model : {"vit", "deit_teacher", "deit", "vit_b16"}) {
        CAPTURE(model);
        load_options options;
        options.compile = target.options;
        options.compile.placement_log = std::make_shared<anvil::placement_journal>();
        auto classifier = vit::load(data_path("vit/" + model), options);
        const auto expected = fixture(model, "logits.npy");
        const double error =
            anvil_test::max_relative_error(classifier.logits(fixture_pixels(model)), expected);
        MESSAGE(model << ": max relative error " << anvil_test::route_name(target.options) << " " << error);
        // fp16 storage and arithmetic (unit roundoff 4.9e-4) through 2-3 layers of layernorm, softmax and
        // GELU gave at most 1.8e-3 (ViT), 1.0e-3 (both DeiTs) on the simulator; 1e-2 leaves a 5x margin and
        // still catches a wrong token, head or layer (those move logits by 0.1 and more).
        CHECK(error < 1e-2);
        // Every segment on the Neural Engine, the patch conv's included (RUNTIME.md §0b #26: a space-to-depth
        // rearrangement and a 1x1 conv, for any patch size), unless a variant injects faults (those runs
        // check that refused segments run on the CPU and the numbers stay right).
        if (anvil_test::simulator_injects_faults()) continue;
        anvil_test::check_all_on_ane_with_one_conv(*options.compile.placement_log);
    }
}

TEST_CASE("vit: ViT and DeiT on the Neural Engine simulator agree with PyTorch to fp16 precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target)) return;
    check_simulated_device(target);
}

TEST_CASE("vit: ViT and DeiT through the Core ML route agree with PyTorch to fp16 precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target, anvil::device::coreml)) return;
    check_simulated_device(target);
}

TEST_CASE("vit: checkpoints, configs and images that do not fit name what is wrong") {
    const auto options = cpu(anvil::cpu_kernels::optimized);
    SUBCASE("a missing tensor") {
        scratch_folder folder("vit");
        rewrite_weights(folder, "vit", "vit.encoder.layer.1.intermediate.dense.weight");
        CHECK_THROWS_WITH_AS(
            static_cast<void>(vit::load(folder.path, options)),
            doctest::Contains("the tensor 'vit.encoder.layer.1.intermediate.dense.weight' is "
                              "missing (expected shape [52, 36])"),
            anvil::format_error);
    }
    SUBCASE("position embeddings for another image size") {
        scratch_folder folder("deit_teacher");
        rewrite_weights(folder, "deit_teacher", "", "deit.embeddings.position_embeddings", {1, 17, 36});
        CHECK_THROWS_WITH_AS(static_cast<void>(vit::load(folder.path, options)),
                             doctest::Contains("tensor 'deit.embeddings.position_embeddings': expected shape "
                                               "[1, 18, 36], got [1, 17, 36]"),
                             anvil::shape_error);
    }
    SUBCASE("an image of another size") {
        auto classifier = vit::load(data_path("vit/vit"), options);
        const auto wrong =
            anvil::host_tensor::from(std::vector<float>(2 * 3 * 24 * 24, 0.5f), anvil::dims{2, 3, 24, 24});
        CHECK_THROWS_WITH_AS(static_cast<void>(classifier.logits(wrong)),
                             doctest::Contains("the image is 24 x 24 but the model takes 20 x 20"),
                             anvil::shape_error);
        const auto gray =
            anvil::host_tensor::from(std::vector<float>(2 * 20 * 20, 0.5f), anvil::dims{2, 1, 20, 20});
        CHECK_THROWS_WITH_AS(static_cast<void>(classifier.logits(gray)),
                             doctest::Contains("expected pixels [batch, 3, 20, 20], got [2, 1, 20, 20]"),
                             anvil::shape_error);
    }
    SUBCASE("a bare ViTModel with its pooler is not a classifier") {
        scratch_folder folder("");
        const auto source = anvil::checkpoint::open(data_path("vit/vit/model.safetensors"));
        anvil::safetensors_writer writer;
        for (const auto* tensor : source.tensors()) {
            const std::string name(tensor->name());
            if (name.starts_with("vit.")) writer.add(name.substr(4), *tensor);
        }
        writer.add("pooler.dense.weight", {36, 36}, std::vector<float>(36 * 36, 0.0f));
        writer.add("pooler.dense.bias", {36}, std::vector<float>(36, 0.0f));
        writer.write(folder.path / "model.safetensors");
        std::filesystem::copy_file(data_path("vit/vit/config.json"), folder.path / "config.json");
        CHECK_THROWS_WITH_AS(
            static_cast<void>(vit::load(folder.path, options)),
            doctest::Contains("this is a bare ViTModel checkpoint (tensors 'embeddings.*' and its "
                              "pooler 'pooler.dense.*' without the 'vit.' prefix"),
            anvil::unsupported_error);
    }
    SUBCASE("a DeiT without any head") {
        scratch_folder folder("deit");
        rewrite_weights(folder, "deit", "classifier.weight");
        CHECK_THROWS_WITH_AS(
            static_cast<void>(vit::load(folder.path, options)),
            doctest::Contains("no classification head: expected the tensor 'classifier.weight' "
                              "(DeiTForImageClassification) or 'cls_classifier.weight'"),
            anvil::unsupported_error);
    }
    SUBCASE("config.json fields") {
        scratch_folder folder("vit");
        folder.write("config.json", R"({"model_type": "vit", "hidden_size": 36, "num_attention_heads": 5})");
        CHECK_THROWS_WITH_AS(
            static_cast<void>(vit::load(folder.path, options)),
            doctest::Contains("config.json: hidden_size 36 is not a multiple of num_attention_heads 5"),
            anvil::format_error);
        folder.write("config.json", R"({"model_type": "vit", "image_size": [20, 20, 3]})");
        CHECK_THROWS_WITH_AS(
            static_cast<void>(vit::load(folder.path, options)),
            doctest::Contains("'image_size' must be a number or [height, width], got [20,20,3]"),
            anvil::format_error);
        folder.write("config.json", R"({"model_type": "swin"})");
        CHECK_THROWS_WITH_AS(static_cast<void>(vit::load(folder.path, options)),
                             doctest::Contains("model_type 'swin' is not a ViT or DeiT model"),
                             anvil::unsupported_error);
        folder.write("config.json", R"({"model_type": "vit", "hidden_size": 36, "num_attention_heads": 3,
                                        "num_hidden_layers": 2, "intermediate_size": 52, "image_size": 20,
                                        "patch_size": 4, "id2label": {"7": "eighth"}})");
        CHECK_THROWS_WITH_AS(static_cast<void>(vit::load(folder.path, options)),
                             doctest::Contains("id2label entry \"7\" is not a class index in [0, 7)"),
                             anvil::format_error);
    }
}

}  // namespace test_vit
