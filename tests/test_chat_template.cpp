// Chat templates: anvil's built-in renderers against the real Jinja templates rendered by jinja2
// (tools/reference/chat_goldens.py wrote tests/data/chat_templates/: each family's tokenizer_config.json and
// goldens.json with the expected text, or the template's own error, for every conversation).
#include <doctest/doctest.h>

#include <anvil/anvil.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace test_chat_template {

namespace {

namespace am = anvil::models;

const std::filesystem::path folder = std::filesystem::path(ANVIL_TEST_DATA_DIR) / "chat_templates";

std::vector<am::chat_message> conversation(const anvil::json::value& goldens, const std::string& name) {
    std::vector<am::chat_message> messages;
    for (const auto& m : goldens.at("conversations").at(name).as_array())
        messages.push_back({m.at("role").as_string(), m.at("content").as_string()});
    return messages;
}

std::string render_error(const am::chat_template& t, const std::vector<am::chat_message>& messages,
                         bool prompt) {
    try {
        (void)am::render_chat(t, messages, prompt);
    } catch (const anvil::error& e) {
        return e.what();
    }
    return "(no error)";
}

std::filesystem::path scratch(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("anvil_test_chat_template_" + name);
    std::filesystem::create_directories(dir);
    return dir;
}

void write(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST_CASE("chat templates: every family renders as its Jinja template does") {
    const auto goldens = anvil::json::parse_file(folder / "goldens.json");
    std::size_t texts = 0, errors = 0;
    for (const auto& c : goldens.at("cases").as_array()) {
        const std::string family = c.at("family").as_string();
        const std::string name = c.at("conversation").as_string();
        const bool prompt = c.at("add_generation_prompt").as_bool();
        CAPTURE(family);
        CAPTURE(name);
        CAPTURE(prompt);
        auto t = am::read_chat_template(folder / family);
        REQUIRE(t.has_value());
        if (const auto* thinking = c.find("enable_thinking")) t->enable_thinking = thinking->as_bool();
        const auto messages = conversation(goldens, name);
        if (const auto* text = c.find("text")) {
            CHECK(am::render_chat(*t, messages, prompt) == text->as_string());
            ++texts;
        } else {
            // The template raises: anvil refuses the conversation with the template's own words.
            CHECK_THROWS_WITH_AS((void)am::render_chat(*t, messages, prompt),
                                 doctest::Contains(c.at("error").as_string().c_str()), anvil::error);
            ++errors;
        }
    }
    CHECK(texts > 100);
    CHECK(errors > 10);
}

TEST_CASE("chat templates: families and variants recognised from the real templates") {
    const auto qwen3 = am::read_chat_template(folder / "qwen3");
    REQUIRE(qwen3);
    CHECK(qwen3->format == am::chat_format::chatml);
    CHECK(qwen3->qwen3_thinking);
    CHECK(qwen3->default_system.empty());
    CHECK(qwen3->eos_token == "<|im_end|>");
    CHECK(qwen3->bos_token.empty());

    const auto qwen25 = am::read_chat_template(folder / "qwen2_5");
    REQUIRE(qwen25);
    CHECK(qwen25->default_system == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    CHECK(qwen25->qwen_roles);
    CHECK_FALSE(qwen25->qwen3_thinking);
    CHECK(am::read_chat_template(folder / "qwen2")->default_system == "You are a helpful assistant.");

    const auto llama3 = am::read_chat_template(folder / "llama3");
    REQUIRE(llama3);
    CHECK(llama3->format == am::chat_format::llama3);
    CHECK(llama3->bos_token == "<|begin_of_text|>");
    CHECK(llama3->always_generation_prompt);
    CHECK_FALSE(am::read_chat_template(folder / "llama3_instruct")->always_generation_prompt);

    CHECK(am::read_chat_template(folder / "llama2")->format == am::chat_format::llama2);
    CHECK(am::read_chat_template(folder / "mixtral")->format == am::chat_format::mistral);
    CHECK(am::read_chat_template(folder / "mistral_v0_1")->eos_space);
    CHECK(am::read_chat_template(folder / "mistral_v0_2")->mistral_v2);
}

TEST_CASE("chat templates: no template is nullopt, an unknown one a clear error") {
    // The real Mistral tokenizer_config.json has no chat_template.
    CHECK_FALSE(am::read_chat_template(folder / "mistral").has_value());
    const auto empty = scratch("empty");
    CHECK_FALSE(am::read_chat_template(empty).has_value());
    std::filesystem::remove_all(empty);

    const std::string gemma =
        "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] "
        "+ '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}";
    CHECK_THROWS_WITH_AS((void)am::recognise_chat_template(gemma),
                         doctest::Contains("ChatML (Qwen2/2.5/3), Llama-3, Mistral [INST] and Llama-2"),
                         anvil::unsupported_error);
    CHECK_THROWS_WITH_AS((void)am::recognise_chat_template(gemma), doctest::Contains("<start_of_turn>"),
                         anvil::unsupported_error);
    CHECK_THROWS_WITH_AS(
        (void)am::make_chat_template("{{- bos_token }}<|start_header_id|>system<|end_header_id|>\n\n"
                                     "Cutting Knowledge Date: December 2023\n",
                                     "", ""),
        doctest::Contains("Llama-3.1+"), anvil::unsupported_error);
    CHECK_THROWS_WITH_AS((void)am::make_chat_template("[AVAILABLE_TOOLS] [INST]", "", ""),
                         doctest::Contains("[AVAILABLE_TOOLS]"), anvil::unsupported_error);

    const auto dir = scratch("bad");
    write(dir / "tokenizer_config.json", R"({"chat_template": 7})");
    CHECK_THROWS_WITH_AS((void)am::read_chat_template(dir),
                         doctest::Contains("'chat_template' must be a string"), anvil::format_error);
    write(dir / "tokenizer_config.json", R"({"chat_template": "<|im_start|>", "eos_token": 3})");
    CHECK_THROWS_WITH_AS((void)am::read_chat_template(dir), doctest::Contains("'eos_token' must be a string"),
                         anvil::format_error);
    // A list of named templates: the "default" one; AddedToken objects for the special tokens.
    write(dir / "tokenizer_config.json",
          R"({"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": )"
          R"("{{ '<|start_header_id|>' }}{% if add_generation_prompt %}{% endif %}"}],)"
          R"( "bos_token": {"content": "<B>"}})");
    const auto named = am::read_chat_template(dir);
    REQUIRE(named);
    CHECK(named->format == am::chat_format::llama3);
    CHECK(named->bos_token == "<B>");
    std::filesystem::remove_all(dir);
}

TEST_CASE("chat templates: messages a template cannot render are refused") {
    const am::chat_template qwen = *am::read_chat_template(folder / "qwen3");
    CHECK_THROWS_WITH_AS((void)am::render_chat(qwen, std::vector<am::chat_message>{}, true),
                         doctest::Contains("no messages"), anvil::error);
    const std::vector<am::chat_message> developer{{"developer", "x"}, {"user", "hi"}};
    CHECK(render_error(qwen, developer, true).find("role 'developer'") != std::string::npos);
    // Plain ChatML renders any role.
    const am::chat_template chatml = *am::read_chat_template(folder / "chatml");
    CHECK(am::render_chat(chatml, developer, false) ==
          "<|im_start|>developer\nx<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
    const am::chat_template llama2 = *am::read_chat_template(folder / "llama2");
    const std::vector<am::chat_message> tool{{"user", "a"}, {"tool", "b"}};
    CHECK(render_error(llama2, tool, true).find("message 1 has role 'tool'") != std::string::npos);
    const am::chat_template mixtral = *am::read_chat_template(folder / "mixtral");
    CHECK(render_error(mixtral, tool, true).find("Only user and assistant roles are supported!") !=
          std::string::npos);
}

}  // namespace test_chat_template
