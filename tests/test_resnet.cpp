// The ResNet recipe against torchvision's own ResNet-18 and ResNet-50 and a plain-PyTorch port of Hugging
// Face's modeling_resnet.py (tools/reference/resnet_fixtures.py, which wrote tests/data/resnet/). Full-size
// weights are too large to commit: both sides draw them from the same deterministic generator (below, and
// deterministic_values in the Python), this test writes them as a torchvision checkpoint in f16 and compares
// the logits with the committed ones, computed by torchvision in float64 on the same stored values.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include "model_test_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace test_resnet {

namespace {

using anvil::models::resnet;

std::string data(const std::string& name) {
    return anvil_test::data_path("resnet/" + name);
}

// --- the deterministic weights (tools/reference/resnet_fixtures.py, bit for bit) ---

std::uint64_t fnv1a64(std::string_view name) {
    std::uint64_t h = 0xCBF29CE484222325ULL;
    for (const char c : name) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001B3ULL;
    }
    return h;
}

// The tensor's kind picks the distribution (see the Python); raw-pointer loops keep an unoptimised build's
// generation of ResNet-50's 25M values short.
std::vector<float> deterministic_values(const std::string& name, const std::vector<std::int64_t>& shape) {
    std::int64_t count = 1;
    std::int64_t fan_in = 1;
    for (std::size_t axis = 0; axis < shape.size(); ++axis) {
        count *= shape[axis];
        if (axis > 0) fan_in *= shape[axis];
    }
    enum class kind { weight, running_mean, running_var, norm_scale, bias };
    const kind k = shape.size() >= 2                ? kind::weight
                   : name.ends_with("running_mean") ? kind::running_mean
                   : name.ends_with("running_var")  ? kind::running_var
                   : name.ends_with(".weight")      ? kind::norm_scale
                                                    : kind::bias;
    const double weight_scale = double{static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)))};
    const double tenth = double{0.1f};
    const double quarter = double{0.25f};
    const std::uint64_t seed = fnv1a64(name);
    std::vector<float> values(static_cast<std::size_t>(count));
    float* out = values.data();
    for (std::size_t i = 0; i < values.size(); ++i) {
        std::uint64_t z = seed + i + 0x9E3779B97F4A7C15ULL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        const double u = static_cast<double>(z >> 40) * 0x1p-24;
        const double s = 2.0 * u - 1.0;
        switch (k) {
            case kind::weight:
                out[i] = static_cast<float>(s * weight_scale);
                break;
            case kind::running_mean:
                out[i] = static_cast<float>(s * tenth);
                break;
            case kind::running_var:
                out[i] = 1.0f + static_cast<float>(u * quarter);
                break;
            case kind::norm_scale:
                out[i] = 1.0f + static_cast<float>(s * tenth);
                break;
            case kind::bias:
                out[i] = static_cast<float>(s * tenth);
                break;
        }
    }
    return values;
}

std::vector<anvil::half> as_f16(const std::vector<float>& values) {
    std::vector<anvil::half> halves(values.size());
    anvil::half* out = halves.data();
    const float* in = values.data();
    for (std::size_t i = 0; i < values.size(); ++i)
        out[i] = anvil::half(in[i]);
    return halves;
}

struct tensor_spec {
    std::string name;
    std::vector<std::int64_t> shape;
};

// torchvision.models.resnet's state_dict: BasicBlock (expansion 1) or Bottleneck (expansion 4), stride 2 in
// the first block of stages 2-4, a downsample where the stride or the width changes.
std::vector<tensor_spec> torchvision_tensors(bool bottleneck, const std::vector<std::int64_t>& depths,
                                             std::int64_t classes) {
    std::vector<tensor_spec> out;
    const auto conv = [&](const std::string& name, std::int64_t o, std::int64_t i, std::int64_t k) {
        out.push_back({name + ".weight", {o, i, k, k}});
    };
    const auto norm = [&](const std::string& name, std::int64_t channels) {
        for (const char* leaf : {".weight", ".bias", ".running_mean", ".running_var", ".num_batches_tracked"})
            out.push_back({name + leaf, std::string_view(leaf) == ".num_batches_tracked"
                                            ? std::vector<std::int64_t>{}
                                            : std::vector<std::int64_t>{channels}});
    };
    conv("conv1", 64, 3, 7);
    norm("bn1", 64);
    const std::int64_t expansion = bottleneck ? 4 : 1;
    std::int64_t in = 64;
    for (std::size_t stage = 0; stage < depths.size(); ++stage) {
        const std::int64_t planes = std::int64_t{64} << stage;
        for (std::int64_t block = 0; block < depths[stage]; ++block) {
            const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(block) + ".";
            if (bottleneck) {
                conv(p + "conv1", planes, in, 1);
                norm(p + "bn1", planes);
                conv(p + "conv2", planes, planes, 3);
                norm(p + "bn2", planes);
                conv(p + "conv3", planes * 4, planes, 1);
                norm(p + "bn3", planes * 4);
            } else {
                conv(p + "conv1", planes, in, 3);
                norm(p + "bn1", planes);
                conv(p + "conv2", planes, planes, 3);
                norm(p + "bn2", planes);
            }
            if (block == 0 && (stage > 0 || in != planes * expansion)) {
                conv(p + "downsample.0", planes * expansion, in, 1);
                norm(p + "downsample.1", planes * expansion);
            }
            in = planes * expansion;
        }
    }
    out.push_back({"fc.weight", {classes, in}});
    out.push_back({"fc.bias", {classes}});
    return out;
}

// Adds the tensors to a writer: f16 from the generator, num_batches_tracked as torch stores it (i64 0).
void add_generated(anvil::safetensors_writer& writer, const std::vector<tensor_spec>& tensors) {
    for (const auto& spec : tensors) {
        if (spec.name.ends_with("num_batches_tracked")) {
            writer.add(spec.name, spec.shape, std::vector<std::int64_t>{0});
        } else {
            writer.add(spec.name, spec.shape, as_f16(deterministic_values(spec.name, spec.shape)));
        }
    }
}

using anvil_test::temporary_folder;

void write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream file(path);
    file << text;
    REQUIRE(file.good());
}

// ResNet-18 in two shards with an index, as Hugging Face shards large checkpoints.
void write_resnet18(const std::filesystem::path& folder) {
    const auto tensors = torchvision_tensors(false, {2, 2, 2, 2}, 1000);
    anvil::safetensors_writer first;
    anvil::safetensors_writer second;
    std::string map;
    for (const auto& spec : tensors) {
        const bool early = !spec.name.starts_with("layer3") && !spec.name.starts_with("layer4") &&
                           !spec.name.starts_with("fc");
        add_generated(early ? first : second, {spec});
        map += std::string(map.empty() ? "" : ",\n") + "    \"" + spec.name + "\": \"" +
               (early ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors") + "\"";
    }
    first.write(folder / "model-00001-of-00002.safetensors");
    second.write(folder / "model-00002-of-00002.safetensors");
    write_text(folder / "model.safetensors.index.json",
               "{\"metadata\": {}, \"weight_map\": {\n" + map + "\n}}\n");
}

void check_close(resnet& model, const std::string& inputs, const std::string& expected, double tolerance) {
    const auto out = model.logits(anvil_test::load_npy(data(inputs)));
    const double error = anvil_test::max_relative_error(out, anvil_test::load_npy(data(expected)));
    MESSAGE(expected << ": max relative error " << error);
    CHECK(error < tolerance);
}

using anvil_test::cpu;

// A copy of the small Hugging Face fixture with some tensors changed: `edit` returns false to drop a tensor,
// or writes a replacement itself and returns false.
template <class Edit>
void copy_checkpoint(const std::string& from, const std::filesystem::path& folder, Edit edit) {
    const auto source = anvil::checkpoint::open(data(from));
    anvil::safetensors_writer writer;
    for (const anvil::tensor_view* view : source.tensors()) {
        if (edit(*view, writer)) writer.add(*view);
    }
    writer.write(folder / "model.safetensors");
}

}  // namespace

TEST_CASE("resnet: the C++ weight generator draws the same values as the Python one") {
    const auto probe = anvil_test::load_npy(data("probe.npy")).to_f32();
    REQUIRE(probe.size() == 32);
    const std::vector<tensor_spec> probed = {{"conv1.weight", {64, 3, 7, 7}},
                                             {"bn1.weight", {64}},
                                             {"layer1.0.bn1.running_var", {64}},
                                             {"fc.bias", {1000}}};
    for (std::size_t t = 0; t < probed.size(); ++t) {
        const auto values = as_f16(deterministic_values(probed[t].name, probed[t].shape));
        for (std::size_t i = 0; i < 8; ++i) {
            CAPTURE(probed[t].name);
            CAPTURE(i);
            CHECK(static_cast<float>(values[i]) == probe[t * 8 + i]);
        }
    }
}

TEST_CASE("resnet: torchvision's ResNet-18 (sharded, no config.json) matches torchvision") {
    temporary_folder folder;
    write_resnet18(folder.path);
    auto weights = anvil::checkpoint::open(folder.path);
    CHECK(resnet::recognizes(weights));

    auto model = resnet::load(folder.path, cpu());
    const auto& c = model.config();
    CHECK(c.naming == "torchvision");
    CHECK(c.stem_channels == 64);
    CHECK(c.depths == std::vector<std::int64_t>{2, 2, 2, 2});
    CHECK(c.widths == std::vector<std::int64_t>{64, 128, 256, 512});
    CHECK_FALSE(c.bottleneck);
    CHECK(c.classes == 1000);
    REQUIRE(model.labels().size() == 1000);
    CHECK(model.labels()[0] == "LABEL_0");
    CHECK(model.labels()[999] == "LABEL_999");

    check_close(model, "inputs_a.npy", "resnet18_a.npy", 1e-4);
    check_close(model, "inputs_b.npy", "resnet18_b.npy", 1e-4);
    CHECK(model.compiled_programs() == 2);

#ifdef __OPTIMIZE__
    // The plain reference kernels, which define each op, agree too (unoptimised builds run them on the small
    // Hugging Face models only: naive convolutions over ResNet-18 take ~15 s there).
    auto reference = resnet::load(folder.path, cpu(anvil::cpu_kernels::reference));
    check_close(reference, "inputs_b.npy", "resnet18_b.npy", 1e-4);
#endif
}

TEST_CASE("resnet: torchvision's ResNet-50 matches torchvision") {
    temporary_folder folder;
    anvil::safetensors_writer writer;
    add_generated(writer, torchvision_tensors(true, {3, 4, 6, 3}, 1000));
    writer.write(folder.path / "model.safetensors");

    auto model = resnet::load(folder.path, cpu());
    const auto& c = model.config();
    CHECK(c.naming == "torchvision");
    CHECK(c.bottleneck);
    CHECK(c.depths == std::vector<std::int64_t>{3, 4, 6, 3});
    CHECK(c.widths == std::vector<std::int64_t>{256, 512, 1024, 2048});
    CHECK(c.inner_widths == std::vector<std::int64_t>{64, 128, 256, 512});
    CHECK(c.groups == 1);
    check_close(model, "inputs_b.npy", "resnet50_b.npy", 1e-4);
}

TEST_CASE("resnet: Hugging Face's ResNetForImageClassification naming, bottleneck (V1) and basic (GELU)") {
    CHECK(resnet::recognizes(anvil::checkpoint::open(data("hf_bottleneck"))));
    auto bottleneck = resnet::load(data("hf_bottleneck"), cpu());
    const auto& c = bottleneck.config();
    CHECK(c.naming == "huggingface");
    CHECK(c.bottleneck);
    CHECK(c.stem_channels == 12);
    CHECK(c.depths == std::vector<std::int64_t>{1, 2, 1, 1});
    CHECK(c.widths == std::vector<std::int64_t>{12, 20, 28, 36});
    CHECK(c.downsample_in_bottleneck);
    CHECK(bottleneck.labels() == std::vector<std::string>{"cat", "dog", "owl", "fox", "emu"});
    check_close(bottleneck, "inputs_a.npy", "hf_bottleneck/logits_a.npy", 1e-4);
    check_close(bottleneck, "inputs_b.npy", "hf_bottleneck/logits_b.npy", 1e-4);
    CHECK(bottleneck.compiled_programs() == 2);
    check_close(bottleneck, "inputs_a.npy", "hf_bottleneck/logits_a.npy", 1e-4);  // reuses its program
    CHECK(bottleneck.compiled_programs() == 2);

    auto basic = resnet::load(data("hf_basic/model.safetensors"), cpu());
    CHECK_FALSE(basic.config().bottleneck);
    CHECK(basic.config().downsample_in_first_stage);
    CHECK(basic.config().act == anvil::models::activation::gelu);
    REQUIRE(basic.labels().size() == 7);
    CHECK(basic.labels()[6] == "violet");
    check_close(basic, "inputs_a.npy", "hf_basic/logits_a.npy", 1e-4);
    check_close(basic, "inputs_b.npy", "hf_basic/logits_b.npy", 1e-4);

    // The plain reference kernels, which define each op, agree too.
    for (const std::string name : {"hf_bottleneck", "hf_basic"}) {
        CAPTURE(name);
        auto reference = resnet::load(data(name), cpu(anvil::cpu_kernels::reference));
        check_close(reference, "inputs_a.npy", name + "/logits_a.npy", 1e-4);
    }
}

void check_simulated_device(const anvil_test::ane_target& target) {
    anvil::models::load_options options;
    options.compile = target.options;
    // The Neural Engine computes and stores activations and weights in fp16 (relative rounding up to
    // 2^-11 ~ 4.9e-4 per value); over ~20 layers these add up like a random walk, ~sqrt(20) * 4.9e-4 ~ 2.2e-3
    // of the logits' scale (|logit| <= ~2 here). Measured through the simulator: 2.1e-3 (ResNet-18), 8.9e-4
    // (bottleneck), 1.4e-4 (basic); the bound leaves ~5x.
    constexpr double fp16_tolerance = 1e-2;
    for (const std::string name : {"hf_bottleneck", "hf_basic"}) {
        CAPTURE(name);
        // Whatever the simulated chip refuses runs on the CPU, and the numbers hold ...
        options.compile.strict_device = false;
        options.compile.placement_log = std::make_shared<anvil::placement_journal>();
        auto model = resnet::load(data(name), options);
        check_close(model, "inputs_b.npy", name + "/logits_b.npy", fp16_tolerance);
        std::size_t refused = 0;
        for (const auto& report : options.compile.placement_log->reports())
            refused += report.refused();
        // ... and with strict_device the whole network runs on the ANE, or (where this run's profile makes
        // the device refuse a segment) the compile fails saying so.
        options.compile.strict_device = true;
        options.compile.placement_log.reset();
        if (refused == 0) {
            auto strict = resnet::load(data(name), options);
            check_close(strict, "inputs_b.npy", name + "/logits_b.npy", fp16_tolerance);
        } else {
            CHECK_THROWS_WITH_AS(
                [&] {
                    auto strict = resnet::load(data(name), options);
                    check_close(strict, "inputs_b.npy", name + "/logits_b.npy", fp16_tolerance);
                }(),
                doctest::Contains("refused"), anvil::unsupported_error);
        }
    }
#ifdef __OPTIMIZE__
    options.compile.strict_device = false;
    temporary_folder folder;
    write_resnet18(folder.path);
    auto model = resnet::load(folder.path, options);
    check_close(model, "inputs_b.npy", "resnet18_b.npy", fp16_tolerance);
#else
    MESSAGE(
        "unoptimised build: ResNet-18 through the simulator is left to optimised builds (hashing its 22 MB "
        "of weights for the program cache takes ~20 s without optimisation)");
#endif
}

TEST_CASE("resnet: through the Neural Engine simulator, within fp16's precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target)) return;
    check_simulated_device(target);
}

TEST_CASE("resnet: through the Core ML route, within fp16's precision") {
    anvil_test::ane_target target;
    if (!anvil_test::use_ane_simulator(target, anvil::device::coreml)) return;
    check_simulated_device(target);
}

TEST_CASE("resnet: checkpoints that do not fit name the tensor, the field or the shapes") {
    SUBCASE("a misshapen tensor") {
        temporary_folder folder;
        copy_checkpoint("hf_bottleneck", folder.path, [](const anvil::tensor_view& view, auto& writer) {
            if (view.name() != "resnet.encoder.stages.1.layers.0.layer.1.convolution.weight") return true;
            writer.add(view.name(), std::vector<std::int64_t>{5, 4, 3, 3}, std::vector<float>(180, 0.5f));
            return false;
        });
        std::filesystem::copy_file(data("hf_bottleneck/config.json"), folder.path / "config.json");
        CHECK_THROWS_WITH_AS(static_cast<void>(resnet::load(folder.path, cpu())),
                             doctest::Contains("tensor 'resnet.encoder.stages.1.layers.0.layer.1.convolution."
                                               "weight': expected shape [5, 5, 3, 3], got [5, 4, 3, 3]"),
                             anvil::shape_error);
    }
    SUBCASE("a missing tensor") {
        temporary_folder folder;
        copy_checkpoint("hf_bottleneck", folder.path, [](const anvil::tensor_view& view, auto&) {
            return view.name() != "resnet.encoder.stages.2.layers.0.layer.0.normalization.running_var";
        });
        CHECK_THROWS_WITH_AS(static_cast<void>(resnet::load(folder.path, cpu())),
                             doctest::Contains("the tensor 'resnet.encoder.stages.2.layers.0.layer.0."
                                               "normalization.running_var' is missing (expected shape [7])"),
                             anvil::format_error);
    }
    SUBCASE("a block that changes width without a projection") {
        temporary_folder folder;
        copy_checkpoint("hf_bottleneck", folder.path, [](const anvil::tensor_view& view, auto&) {
            return view.name() != "resnet.encoder.stages.1.layers.0.shortcut.convolution.weight";
        });
        CHECK_THROWS_WITH_AS(
            static_cast<void>(resnet::load(folder.path, cpu())),
            doctest::Contains("the tensor 'resnet.encoder.stages.1.layers.0.shortcut.convolution.weight' is "
                              "missing: block resnet.encoder.stages.1.layers.0. maps 12 channels to 20 with "
                              "stride 2, so its shortcut needs a projection"),
            anvil::format_error);
    }
    SUBCASE("a folder that is not a ResNet") {
        temporary_folder folder;
        anvil::safetensors_writer writer;
        writer.add("encoder.layer.0.attention.self.query.weight", {2, 2}, std::vector<float>(4, 1.0f));
        writer.write(folder.path / "model.safetensors");
        CHECK_FALSE(resnet::recognizes(anvil::checkpoint::open(folder.path)));
        CHECK_THROWS_WITH_AS(static_cast<void>(resnet::load(folder.path, cpu())),
                             doctest::Contains("not a ResNet checkpoint: it has neither 'conv1.weight'"),
                             anvil::format_error);
    }
    SUBCASE("bad config.json fields") {
        const auto check_config = [](const std::string& config, const std::string& expected) {
            CAPTURE(config);
            temporary_folder folder;
            std::filesystem::copy_file(data("hf_bottleneck/model.safetensors"),
                                       folder.path / "model.safetensors");
            write_text(folder.path / "config.json", config);
            CHECK_THROWS_WITH_AS(static_cast<void>(resnet::load(folder.path, cpu())),
                                 doctest::Contains(expected.c_str()), anvil::format_error);
        };
        const std::string sizes = R"("embedding_size": 12, "hidden_sizes": [12, 20, 28, 36], )";
        check_config("{" + sizes + R"("depths": [1, 2, 1, 1], "layer_type": "wide"})",
                     "config.json: 'layer_type' must be \"basic\" or \"bottleneck\", got \"wide\"");
        check_config("{" + sizes + R"("depths": [1, 2, 1]})",
                     "config.json: 'depths' lists 3 stages and 'hidden_sizes' 4");
        check_config("{" + sizes + R"("depths": [1, "2", 1, 1]})",
                     "config.json: 'depths' must be a list of integers");
        check_config("{" + sizes + R"("depths": [1, 1, 1, 1], "downsample_in_bottleneck": true})",
                     "config.json: 'depths' gives stage 1 1 layers, but the checkpoint also has "
                     "'resnet.encoder.stages.1.layers.1.layer.0.convolution.weight'");
        check_config("{" + sizes + R"("depths": [1, 2, 1, 1], "downsample_in_first_stage": "yes"})",
                     "config.json: 'downsample_in_first_stage' must be true or false, got \"yes\"");
    }
}

TEST_CASE("resnet: pixels of the wrong rank, channels or type") {
    auto model = resnet::load(data("hf_bottleneck"), cpu());
    CHECK_THROWS_WITH_AS(
        static_cast<void>(model.logits(anvil::host_tensor(anvil::dtype::f32, anvil::dims{3, 8, 8}))),
        doctest::Contains("resnet: pixels must be [N, 3, H, W] with N, H, W >= 1, got [3, 8, 8]"),
        anvil::shape_error);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(model.logits(anvil::host_tensor(anvil::dtype::f32, anvil::dims{1, 4, 8, 8}))),
        doctest::Contains("got [1, 4, 8, 8]"), anvil::shape_error);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(model.logits(anvil::host_tensor(anvil::dtype::f16, anvil::dims{1, 3, 8, 8}))),
        doctest::Contains("resnet: pixels must be f32, got f16"), anvil::type_error);
    CHECK(model.compiled_programs() == 0);
}

TEST_CASE(
    "resnet: train mode normalises with the batch's statistics, which as running ones give the same logits") {
    // The train-mode forward (what `anvil train` differentiates; tests/cli/test_train_command.py compares its
    // training with PyTorch's in float64) returns every BatchNorm's batch mean and biased variance. Written
    // into a copy of the checkpoint as its running statistics, they make the inference path, with every
    // BatchNorm folded, compute the same logits on the same batch: the two forwards share one layout (a V1
    // bottleneck with GELU here).
    const std::string folder_name = data("hf_bottleneck");
    const auto weights = std::make_shared<const anvil::checkpoint>(anvil::checkpoint::open(folder_name));
    const auto layout = anvil::detail::read_resnet_layout(*weights, folder_name);
    const auto pixels = anvil_test::load_npy(data("inputs_a.npy"));  // [2, 3, 40, 36]
    anvil::graph g;
    anvil::models::weight_loader loader(g, weights);
    const auto pass =
        anvil::models::resnet_train_forward(loader, layout, g.input<float>("pixels", pixels.shape()));
    std::size_t norms = 1;
    for (const auto& block : layout.blocks)
        norms += block.layers.size() + (block.projection ? 1 : 0);
    REQUIRE(pass.statistics.size() == norms);
    CHECK(pass.statistics.front().norm == "resnet.embedder.embedder.normalization");
    CHECK(pass.statistics.front().count == 2 * 20 * 18);
    std::vector<anvil::value> outputs{pass.logits.value()};
    for (const auto& statistics : pass.statistics) {
        outputs.push_back(statistics.mean.value());
        outputs.push_back(statistics.variance.value());
    }
    anvil::program program = anvil::compile(outputs);
    const std::vector<anvil::host_tensor> results = program.run({{"pixels", pixels}});

    std::map<std::string, std::vector<float>> running;
    for (std::size_t i = 0; i < pass.statistics.size(); ++i) {
        running[pass.statistics[i].norm + ".running_mean"] = results[1 + 2 * i].to_f32();
        running[pass.statistics[i].norm + ".running_var"] = results[2 + 2 * i].to_f32();
    }
    temporary_folder folder;
    copy_checkpoint("hf_bottleneck", folder.path, [&](const anvil::tensor_view& view, auto& writer) {
        const auto found = running.find(view.name());
        if (found == running.end()) return true;
        writer.add(view.name(), std::vector<std::int64_t>{static_cast<std::int64_t>(found->second.size())},
                   found->second);
        return false;
    });
    std::filesystem::copy_file(data("hf_bottleneck/config.json"), folder.path / "config.json");
    auto folded = resnet::load(folder.path, cpu());
    const double error = anvil_test::max_relative_error(folded.logits(pixels), results[0]);
    MESSAGE("train mode vs its statistics folded: max relative error " << error);
    CHECK(error < 1e-4);

    // One value per channel has no unbiased variance: refused, as PyTorch refuses it.
    anvil::graph tiny;
    anvil::models::weight_loader tiny_loader(tiny, weights);
    CHECK_THROWS_WITH_AS(
        static_cast<void>(anvil::models::resnet_train_forward(
            tiny_loader, layout, tiny.input<float>("pixels", anvil::dims{1, 3, 8, 8}))),
        doctest::Contains("in train mode needs more than 1 value per channel, got input size [1, "),
        anvil::shape_error);
}

}  // namespace test_resnet
