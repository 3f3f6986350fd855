// anvil: chat templates. tokenizer_config.json carries a Jinja template; anvil runs no Jinja: it recognises
// which family's template it is (by markers that every published variant of the family has) and renders
// that family with built-in code that reproduces the template's output byte for byte.
//
// Supported, checked against the real templates rendered by jinja2 (tools/reference/chat_goldens.py):
//   chatml  - plain ChatML, Qwen2 and Qwen2.5 (their default system message, read from the template) and
//   Qwen3
//             (its <think> handling of assistant turns, enable_thinking); Qwen2.5/3 "tool" turns become
//             <tool_response> blocks.
//   llama3  - Llama-3 (base and Instruct).
//   mistral - Mistral-7B-Instruct v0.1, Mixtral-8x7B-Instruct v0.1, Mistral-7B-Instruct v0.2 (system message
//             folded into the first [INST]).
//   llama2  - Llama-2-chat (<<SYS>> block).
// Limitations (each an error, never a silent difference): messages carry only role + content (no tools,
// tool_calls, reasoning_content, images); Llama-3.1+ templates (dated system header, tools) and Mistral's
// tool-aware v0.3 templates are refused; roles a template would silently drop (Qwen2.5/3: anything but
// system/user/assistant/tool; Llama-2: anything but user/assistant after the system message) are refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "anvil/compilation.hpp"
#include "anvil/core/json_value.hpp"

namespace anvil::models {

struct chat_message {
    std::string role, content;
};

// A conversation rendered by a chat template. The text already holds the special tokens the template writes
// (<|begin_of_text|>, <|im_start|>, [INST] ...), so it is encoded without adding any, as Hugging Face's
// apply_chat_template does: encoding it as plain text would put a second BOS in front of Llama-3's.
struct chat_prompt {
    std::string text;
};

enum class chat_format : std::uint8_t { chatml, llama3, mistral, llama2 };

[[nodiscard]] std::string_view to_string(chat_format f) noexcept;

struct chat_template {
    chat_format format = chat_format::chatml;
    std::string bos_token, eos_token;
    // Where the variants of a family differ (make_chat_template reads these from the Jinja source).
    std::string default_system;             // chatml: system turn when the conversation has none (Qwen2/2.5)
    bool qwen_roles = false;                // chatml: Qwen2.5/3 rules for "tool" and unknown roles
    bool qwen3_thinking = false;            // chatml: Qwen3's <think> handling
    bool enable_thinking = true;            // Qwen3: false appends an empty <think></think> to the prompt
    bool always_generation_prompt = false;  // llama3: the base template adds the assistant header regardless
    bool mistral_v2 = false;                // mistral: " [INST] " spacing and a system message (v0.2)
    bool eos_space = false;                 // mistral v0.1: a space after each assistant turn's eos
};

namespace recipe_detail {

bool contains(std::string_view text, std::string_view part) noexcept;

// Python's str.isspace() for one code point: what Jinja's `trim` and str.strip() remove.
bool is_python_space(std::uint32_t c) noexcept;

// Decodes the UTF-8 sequence at text[begin, end); 0xFFFFFFFF when malformed (never whitespace).
std::uint32_t decode_code_point(std::string_view text, std::size_t begin, std::size_t end) noexcept;

std::size_t utf8_length(unsigned char lead) noexcept;

// Python's str.strip() / lstrip() / rstrip(): Unicode whitespace when `chars` is empty, else those ASCII
// chars.
std::string_view python_strip(std::string_view s, bool left, bool right, std::string_view chars = {});

// A Jinja string literal's escapes (\n, \t, \\, \', \").
std::string jinja_unescape(std::string_view s);

// The default system message of a ChatML template: a literal '<|im_start|>system\n...<|im_end|>' whose text
// is part of the literal (rather than `+ messages[0]['content']`).
std::string chatml_default_system(std::string_view source);

std::string quote_start(std::string_view source);

[[noreturn]] void unknown_template(std::string_view what, std::string_view source);

}  // namespace recipe_detail

// Recognises the family of tokenizer_config.json's `chat_template` (error naming what it found when unknown).
[[nodiscard]] chat_format recognise_chat_template(std::string_view jinja_source);

// The family and the variant details of a template, with the tokens it refers to as bos_token/eos_token.
[[nodiscard]] chat_template make_chat_template(std::string_view jinja_source, std::string bos_token,
                                               std::string eos_token);

namespace recipe_detail {

std::string special_token(const json::value& config, std::string_view key, const std::string& source);

}  // namespace recipe_detail

// The chat template of a model folder: tokenizer_config.json's `chat_template` (a string, or the "default" of
// a list of named templates) or a chat_template.jinja file; std::nullopt when the folder has none.
[[nodiscard]] std::optional<chat_template> read_chat_template(const std::filesystem::path& folder);

namespace recipe_detail {

void render_chatml(const chat_template& t, std::span<const chat_message> messages, std::string& out);

void check_alternation(std::span<const chat_message> turns, std::size_t offset, std::string_view rule);

void render_inst(const chat_template& t, std::span<const chat_message> messages, std::string& out);

}  // namespace recipe_detail

// The prompt text of a conversation as the family's template renders it. add_generation_prompt appends the
// assistant header where the template has one (ChatML, Llama-3); [INST] templates always end ready for the
// assistant and ignore it, as their templates do.
[[nodiscard]] std::string render_chat(const chat_template& t, std::span<const chat_message> messages,
                                      bool add_generation_prompt);

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/common/chat_template-inl.hpp"
#endif
