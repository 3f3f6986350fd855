// checkpoint: Hugging Face model folders — a single file, model.safetensors, an index with shards, shards
// without an index — from the committed fixtures, and broken folders built in a temporary directory.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_checkpoint {

namespace {

const std::filesystem::path data_dir = std::filesystem::path(ANVIL_TEST_DATA_DIR) / "safetensors";

// A fresh folder under the system's temporary directory, removed with everything in it.
class scratch_folder {
public:
    scratch_folder() {
        std::random_device random;
        path_ =
            std::filesystem::temp_directory_path() / ("anvil_test_checkpoint_" + std::to_string(random()));
        std::filesystem::create_directories(path_);
    }
    scratch_folder(const scratch_folder&) = delete;
    scratch_folder& operator=(const scratch_folder&) = delete;
    ~scratch_folder() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    [[nodiscard]] const std::filesystem::path& path() const { return path_; }

    void write_text(const std::string& name, const std::string& text) const {
        std::ofstream out(path_ / name, std::ios::binary);
        out << text;
    }
    // A shard holding one f32 tensor of each name, value 1.
    void write_shard(const std::string& name, const std::vector<std::string>& tensors) const {
        anvil::safetensors_writer writer;
        for (const auto& tensor : tensors)
            writer.add(tensor, {1}, std::vector<float>{1.0f});
        writer.write(path_ / name);
    }

private:
    std::filesystem::path path_;
};

std::string index_json(const std::string& weight_map) {
    return "{\"metadata\":{},\"weight_map\":{" + weight_map + "}}";
}

std::vector<std::string> names_of(const anvil::checkpoint& checkpoint) {
    std::vector<std::string> names;
    for (const auto* tensor : checkpoint.tensors())
        names.push_back(tensor->name());
    return names;
}

}  // namespace

TEST_CASE("checkpoint: an index and two shards, opened by folder or by index file") {
    for (const auto& path : {data_dir / "sharded", data_dir / "sharded" / "model.safetensors.index.json"}) {
        CAPTURE(path);
        const auto checkpoint = anvil::checkpoint::open(path);
        CHECK(checkpoint.path() == path);
        CHECK(checkpoint.index_path() == data_dir / "sharded" / "model.safetensors.index.json");
        REQUIRE(checkpoint.files().size() == 2);
        CHECK(checkpoint.files()[0].path().filename() == "model-00001-of-00002.safetensors");
        CHECK(checkpoint.files()[1].path().filename() == "model-00002-of-00002.safetensors");
        CHECK(names_of(checkpoint) ==
              std::vector<std::string>{"embed.weight", "layers.0.weight", "layers.1.weight", "norm.weight"});
        // 4x3 + 3x3 + 3x3 + 3 elements; f32, bf16, f16, f32 bytes.
        CHECK(checkpoint.parameter_count() == 33);
        CHECK(checkpoint.byte_size() == 48 + 18 + 18 + 12);

        const auto embed = checkpoint.tensor("embed.weight").to_f32();
        REQUIRE(embed.size() == 12);
        for (std::size_t i = 0; i < 12; ++i)
            CHECK(embed[i] == 0.5f * static_cast<float>(i));
        const auto layer0 = checkpoint.tensor("layers.0.weight").require(anvil::dtype::bf16, {3, 3}).to_f32();
        for (std::size_t i = 0; i < 9; ++i)
            CHECK(layer0[i] == static_cast<float>(i) - 4.0f);
        const auto layer1 = checkpoint.tensor("layers.1.weight").to_f16();
        for (std::size_t i = 0; i < 9; ++i)
            CHECK(static_cast<float>(layer1[i]) == (static_cast<float>(i) - 4.0f) * 0.25f);
        CHECK(checkpoint.tensor("norm.weight").to_f32() == std::vector<float>{1.0f, 2.0f, 3.0f});
        CHECK(
            checkpoint.tensor("layers.1.weight").source_name().ends_with("model-00002-of-00002.safetensors"));
        CHECK(checkpoint.find("lm_head.weight") == nullptr);
        CHECK_THROWS_WITH_AS(
            static_cast<void>(checkpoint.tensor("layers.2.weight")),
            doctest::Contains((path.string() + ": no tensor named 'layers.2.weight' (did you mean").c_str()),
            anvil::format_error);
    }
}

TEST_CASE("checkpoint: a single file, and a folder of shards without an index") {
    const auto single = anvil::checkpoint::open(data_dir / "all_dtypes.safetensors");
    CHECK(single.files().size() == 1);
    CHECK(single.size() == 15);
    CHECK(single.index_path().empty());
    CHECK(single.tensor("t_i32").data<std::int32_t>()[0] == -300);

    const auto unindexed = anvil::checkpoint::open(data_dir / "unindexed");
    CHECK(unindexed.files().size() == 2);
    CHECK(names_of(unindexed) == std::vector<std::string>{"x", "y", "z"});
    CHECK(unindexed.tensor("y").data<std::int64_t>()[0] == -5);
    CHECK(unindexed.parameter_count() == 5);
}

TEST_CASE("checkpoint: a folder with model.safetensors prefers it to other files; moves keep views valid") {
    scratch_folder folder;
    folder.write_shard("model.safetensors", {"a", "b"});
    folder.write_shard("adapter.safetensors", {"a"});  // would clash if it were read
    auto checkpoint = anvil::checkpoint::open(folder.path());
    CHECK(checkpoint.files().size() == 1);
    const anvil::tensor_view* a = checkpoint.find("a");
    const anvil::checkpoint moved = std::move(checkpoint);
    CHECK(moved.find("a") == a);
    CHECK(moved.tensor("a").to_f32() == std::vector<float>{1.0f});
}

TEST_CASE("checkpoint: broken indexes are refused, naming the index and the tensor") {
    scratch_folder folder;
    const auto index = (folder.path() / "model.safetensors.index.json").string();
    folder.write_shard("one.safetensors", {"a", "b"});
    folder.write_shard("two.safetensors", {"b", "c"});
    const auto refuse = [&](const std::string& text) {
        folder.write_text("model.safetensors.index.json", text);
        try {
            static_cast<void>(anvil::checkpoint::open(folder.path()));
        } catch (const anvil::error& e) {
            CHECK(std::string(e.what()).find(index) == 0);
            return std::string(e.what());
        }
        return std::string("(accepted)");
    };
    CHECK(refuse("{\"weight_map\": ").find(": byte 15: ") != std::string::npos);
    CHECK(refuse("[1]").find("the index is an array, expected an object with a \"weight_map\"") !=
          std::string::npos);
    CHECK(refuse("{\"metadata\":{}}").find("the index has no \"weight_map\"") != std::string::npos);
    CHECK(refuse("{\"weight_map\":[]}").find("\"weight_map\" is an array") != std::string::npos);
    CHECK(refuse(index_json("\"a\":3"))
              .find("weight_map gives tensor 'a' the number 3, expected a file name") != std::string::npos);
    CHECK(refuse(index_json("\"a\":\"one.safetensors\",\"c\":\"three.safetensors\""))
              .find("shard 'three.safetensors' (listed for tensor 'c') is missing") != std::string::npos);
    CHECK(refuse(index_json("\"a\":\"one.safetensors\",\"z\":\"one.safetensors\""))
              .find("weight_map puts tensor 'z' in 'one.safetensors', but that shard has no such tensor") !=
          std::string::npos);
    CHECK(refuse(index_json("\"a\":\"one.safetensors\",\"c\":\"two.safetensors\""))
              .find("tensor 'b' is in both") != std::string::npos);
    CHECK(
        refuse(index_json("\"a\":\"../one.safetensors\""))
            .find("the shard '../one.safetensors', which uses \"..\" (shards must stay inside the folder)") !=
        std::string::npos);
    CHECK(refuse(index_json("\"a\":\"sub/../../one.safetensors\"")).find("which uses \"..\"") !=
          std::string::npos);
    CHECK(refuse(index_json("\"a\":\"/etc/passwd\"")).find("is an absolute path") != std::string::npos);
    CHECK(refuse(index_json("\"a\":\"\"")).find("the shard '', which is empty") != std::string::npos);
    CHECK(refuse(index_json("\"a\":\"one.safetensors\\u0000.txt\"")).find("contains a NUL byte") !=
          std::string::npos);
    // The same shard spelled two ways is opened once.
    folder.write_text("model.safetensors.index.json",
                      index_json("\"a\":\"one.safetensors\",\"b\":\"./one.safetensors\""));
    CHECK(anvil::checkpoint::open(folder.path()).files().size() == 1);
}

TEST_CASE("checkpoint: folders it cannot read say why") {
    scratch_folder folder;
    CHECK_THROWS_WITH_AS(
        static_cast<void>(anvil::checkpoint::open(folder.path())),
        doctest::Contains("no model.safetensors, model.safetensors.index.json or other .safetensors file"),
        anvil::format_error);
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::checkpoint::open(folder.path() / "missing")),
                         doctest::Contains("missing: no such file or folder"), anvil::io_error);
    folder.write_shard("a.safetensors", {"x", "y"});
    folder.write_shard("b.safetensors", {"y"});
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::checkpoint::open(folder.path())),
                         doctest::Contains("tensor 'y' is in both"), anvil::format_error);
    folder.write_text("broken.safetensors", "nope");
    std::filesystem::remove(folder.path() / "b.safetensors");
    CHECK_THROWS_WITH_AS(static_cast<void>(anvil::checkpoint::open(folder.path())),
                         doctest::Contains("broken.safetensors: the file is 4 bytes"), anvil::format_error);
}

}  // namespace test_checkpoint
