// anvil: chat_template's definitions (see chat_template.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "anvil/core/error.hpp"
#include "anvil/core/json.hpp"
#include "anvil/models/common/chat_template.hpp"

namespace anvil::models {

ANVIL_INLINE std::string_view to_string(chat_format f) noexcept {
    switch (f) {
        case chat_format::chatml:
            return "chatml";
        case chat_format::llama3:
            return "llama3";
        case chat_format::mistral:
            return "mistral";
        case chat_format::llama2:
            return "llama2";
    }
    return "?";
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE bool contains(std::string_view text, std::string_view part) noexcept {
    return text.find(part) != std::string_view::npos;
}

ANVIL_INLINE bool is_python_space(std::uint32_t c) noexcept {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

ANVIL_INLINE std::uint32_t decode_code_point(std::string_view text, std::size_t begin,
                                             std::size_t end) noexcept {
    const auto byte = [&](std::size_t i) {
        return static_cast<std::uint32_t>(static_cast<unsigned char>(text[i]));
    };
    const std::size_t n = end - begin;
    const std::uint32_t lead = byte(begin);
    if (n == 1) return lead < 0x80 ? lead : 0xFFFFFFFFu;
    std::uint32_t c = lead & (0x7fu >> n);
    for (std::size_t i = begin + 1; i < end; ++i)
        c = (c << 6) | (byte(i) & 0x3fu);
    return c;
}

ANVIL_INLINE std::size_t utf8_length(unsigned char lead) noexcept {
    return lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
}

ANVIL_INLINE std::string_view python_strip(std::string_view s, bool left, bool right,
                                           std::string_view chars) {
    const auto strip_char = [&](std::uint32_t c) {
        return chars.empty() ? is_python_space(c)
                             : (c < 0x80 && contains(chars, std::string(1, static_cast<char>(c))));
    };
    std::size_t begin = 0, end = s.size();
    while (left && begin < end) {
        const std::size_t n = std::min(utf8_length(static_cast<unsigned char>(s[begin])), end - begin);
        if (!strip_char(decode_code_point(s, begin, begin + n))) break;
        begin += n;
    }
    while (right && end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80 && end - start < 4)
            --start;
        if (!strip_char(decode_code_point(s, start, end))) break;
        end = start;
    }
    return s.substr(begin, end - begin);
}

ANVIL_INLINE std::string jinja_unescape(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        const char e = s[++i];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
    }
    return out;
}

ANVIL_INLINE std::string chatml_default_system(std::string_view source) {
    static constexpr std::string_view head = "<|im_start|>system";
    for (std::size_t at = source.find(head); at != std::string_view::npos; at = source.find(head, at + 1)) {
        std::size_t text = at + head.size();
        if (source.substr(text, 2) == "\\n") {
            text += 2;
        } else if (source.substr(text, 1) == "\n") {
            text += 1;
        } else {
            continue;
        }
        if (text >= source.size() || source[text] == '\'' || source[text] == '"') continue;
        const std::size_t end = source.find("<|im_end|>", text);
        if (end == std::string_view::npos) continue;
        return jinja_unescape(source.substr(text, end - text));
    }
    return {};
}

ANVIL_INLINE std::string quote_start(std::string_view source) {
    constexpr std::size_t shown = 120;
    std::string start(source.substr(0, shown));
    for (char& c : start)
        if (c == '\n') c = ' ';
    return "\"" + start + (source.size() > shown ? "...\"" : "\"");
}

ANVIL_INLINE void unknown_template(std::string_view what, std::string_view source) {
    throw unsupported_error(anvil::detail::message(
        "chat template: ", what,
        "; anvil renders the ChatML (Qwen2/2.5/3), Llama-3, Mistral [INST] and Llama-2 <<SYS>> families; "
        "the template starts ",
        quote_start(source)));
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE chat_format recognise_chat_template(std::string_view jinja_source) {
    using recipe_detail::contains;
    if (contains(jinja_source, "<|im_start|>")) return chat_format::chatml;
    if (contains(jinja_source, "<|start_header_id|>")) return chat_format::llama3;
    if (contains(jinja_source, "<<SYS>>")) return chat_format::llama2;
    if (contains(jinja_source, "[INST]")) return chat_format::mistral;
    recipe_detail::unknown_template("not a template of a known family", jinja_source);
}

ANVIL_INLINE chat_template make_chat_template(std::string_view jinja_source, std::string bos_token,
                                              std::string eos_token) {
    using recipe_detail::contains;
    chat_template t;
    t.format = recognise_chat_template(jinja_source);
    t.bos_token = std::move(bos_token);
    t.eos_token = std::move(eos_token);
    switch (t.format) {
        case chat_format::chatml:
            if (contains(jinja_source, "tool_call") && !contains(jinja_source, "<tool_response>"))
                recipe_detail::unknown_template("a ChatML template with tool calls of an unknown style",
                                                jinja_source);
            t.default_system = recipe_detail::chatml_default_system(jinja_source);
            t.qwen_roles = contains(jinja_source, "<tool_response>");
            t.qwen3_thinking =
                contains(jinja_source, "</think>") || contains(jinja_source, "enable_thinking");
            break;
        case chat_format::llama3:
            if (contains(jinja_source, "Cutting Knowledge Date") || contains(jinja_source, "ipython"))
                recipe_detail::unknown_template(
                    "Llama-3.1+ templates (dated system header, tools) are not supported", jinja_source);
            t.always_generation_prompt = !contains(jinja_source, "add_generation_prompt");
            break;
        case chat_format::mistral:
            if (contains(jinja_source, "[AVAILABLE_TOOLS]") || contains(jinja_source, "[SYSTEM_PROMPT]"))
                recipe_detail::unknown_template(
                    "Mistral templates with [AVAILABLE_TOOLS]/[SYSTEM_PROMPT] are not supported",
                    jinja_source);
            t.mistral_v2 = contains(jinja_source, "' [INST] '");
            if (!t.mistral_v2 && contains(jinja_source, "system_message"))
                recipe_detail::unknown_template(
                    "a Mistral template with a system message of an unknown style", jinja_source);
            t.eos_space = contains(jinja_source, "eos_token + ' '");
            break;
        case chat_format::llama2:
            break;
    }
    return t;
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE std::string special_token(const json::value& config, std::string_view key,
                                       const std::string& source) {
    const json::value* v = config.find(key);
    if (!v || v->is_null()) return {};
    if (v->is_string()) return v->as_string();
    if (v->is_object())
        if (const json::value* content = v->find("content"); content && content->is_string())
            return content->as_string();
    throw format_error(anvil::detail::message(source, ": '", key,
                                              "' must be a string or an object with a string \"content\""));
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE std::optional<chat_template> read_chat_template(const std::filesystem::path& folder) {
    const std::filesystem::path config_path = folder / "tokenizer_config.json";
    const std::filesystem::path jinja_path = folder / "chat_template.jinja";
    json::value config;
    if (std::filesystem::is_regular_file(config_path)) config = json::parse_file(config_path);
    const std::string source = config_path.string();
    if (!config.is_null() && !config.is_object())
        throw format_error(anvil::detail::message(source, ": expected a JSON object"));
    std::string jinja;
    const json::value* value = config.is_object() ? config.find("chat_template") : nullptr;
    if (value && value->is_string()) {
        jinja = value->as_string();
    } else if (value && value->is_array()) {
        for (const json::value& named : value->as_array()) {
            const json::value* name = named.find("name");
            const json::value* text = named.find("template");
            if (name && name->is_string() && name->as_string() == "default" && text && text->is_string())
                jinja = text->as_string();
        }
        if (jinja.empty())
            throw format_error(
                anvil::detail::message(source, ": 'chat_template' is a list without a \"default\" template"));
    } else if (value && !value->is_null()) {
        throw format_error(anvil::detail::message(source, ": 'chat_template' must be a string or a list"));
    } else if (std::filesystem::is_regular_file(jinja_path)) {
        std::ifstream file(jinja_path, std::ios::binary);
        if (!file) throw io_error(anvil::detail::message(jinja_path.string(), ": cannot open"));
        jinja.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    } else {
        return std::nullopt;
    }
    std::string bos, eos;
    if (config.is_object()) {
        bos = recipe_detail::special_token(config, "bos_token", source);
        eos = recipe_detail::special_token(config, "eos_token", source);
    }
    return make_chat_template(jinja, std::move(bos), std::move(eos));
}

}  // namespace anvil::models

namespace anvil::models::recipe_detail {

ANVIL_INLINE void render_chatml(const chat_template& t, std::span<const chat_message> messages,
                                std::string& out) {
    const auto turn = [&](std::string_view role, std::string_view content) {
        out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
    };
    if (messages.front().role != "system" && !t.default_system.empty()) turn("system", t.default_system);
    // Qwen3: the last user turn that is not a tool response; assistant turns after it keep their thinking.
    std::size_t last_query = messages.size() - 1;
    for (std::size_t i = messages.size(); i-- > 0;) {
        const std::string& c = messages[i].content;
        if (messages[i].role == "user" &&
            !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const chat_message& m = messages[i];
        const bool last = i + 1 == messages.size();
        if (m.role == "assistant" && t.qwen3_thinking) {
            std::string_view content = m.content;
            std::string_view reasoning;
            if (contains(content, "</think>")) {
                const std::string_view before = content.substr(0, content.find("</think>"));
                content = python_strip(content.substr(content.rfind("</think>") + 8), true, false, "\n");
                reasoning = python_strip(before, false, true, "\n");
                if (const std::size_t open = reasoning.rfind("<think>"); open != std::string_view::npos)
                    reasoning = reasoning.substr(open + 7);
                reasoning = python_strip(reasoning, true, false, "\n");
            }
            out.append("<|im_start|>assistant\n");
            if (i > last_query && (last || !reasoning.empty())) {
                out.append("<think>\n")
                    .append(python_strip(reasoning, true, true, "\n"))
                    .append("\n</think>\n\n");
                out.append(python_strip(content, true, false, "\n"));
            } else {
                out.append(content);
            }
            out.append("<|im_end|>\n");
        } else if (m.role == "tool" && t.qwen_roles) {
            if (i == 0 || messages[i - 1].role != "tool") out.append("<|im_start|>user");
            out.append("\n<tool_response>\n").append(m.content).append("\n</tool_response>");
            if (last || messages[i + 1].role != "tool") out.append("<|im_end|>\n");
        } else if (m.role == "system" || m.role == "user" || m.role == "assistant" || !t.qwen_roles) {
            turn(m.role, m.content);
        } else {
            throw unsupported_error(anvil::detail::message(
                "chat template (Qwen): message ", i, " has role '", m.role,
                "', which the template would drop; the roles are system, user, assistant and tool"));
        }
    }
}

ANVIL_INLINE void check_alternation(std::span<const chat_message> turns, std::size_t offset,
                                    std::string_view rule) {
    for (std::size_t j = 0; j < turns.size(); ++j)
        if ((turns[j].role == "user") != (j % 2 == 0))
            throw error(anvil::detail::message("chat template: ", rule, " (message ", j + offset,
                                               " has role '", turns[j].role, "')"));
}

ANVIL_INLINE void render_inst(const chat_template& t, std::span<const chat_message> messages,
                              std::string& out) {
    const bool has_system =
        messages.front().role == "system" && (t.format == chat_format::llama2 || t.mistral_v2);
    const std::string_view system =
        has_system ? std::string_view(messages.front().content) : std::string_view();
    const std::span<const chat_message> turns = has_system ? messages.subspan(1) : messages;
    const std::size_t offset = has_system ? 1 : 0;
    if (t.format == chat_format::llama2) {
        check_alternation(turns, offset,
                          "Conversation roles must alternate user/assistant/user/assistant/...");
        for (std::size_t j = 0; j < turns.size(); ++j) {
            std::string content = turns[j].content;
            if (j == 0 && has_system)
                content = "<<SYS>>\n" + std::string(system) + "\n<</SYS>>\n\n" + content;
            const std::string_view stripped = python_strip(content, true, true);
            if (turns[j].role == "user") {
                out.append(t.bos_token).append("[INST] ").append(stripped).append(" [/INST]");
            } else if (turns[j].role == "assistant") {
                out.append(" ").append(stripped).append(" ").append(t.eos_token);
            } else {
                throw unsupported_error(anvil::detail::message(
                    "chat template (Llama-2): message ", j + offset, " has role '", turns[j].role,
                    "'; only user and assistant turns after an optional system message are rendered"));
            }
        }
        return;
    }
    out.append(t.bos_token);
    if (t.mistral_v2) {
        check_alternation(turns, offset,
                          "After the optional system message, conversation roles must alternate "
                          "user/assistant/user/assistant/...");
    } else {
        check_alternation(turns, offset,
                          "Conversation roles must alternate user/assistant/user/assistant/...");
    }
    for (std::size_t j = 0; j < turns.size(); ++j) {
        const chat_message& m = turns[j];
        if (m.role == "user") {
            out.append(t.mistral_v2 ? " [INST] " : "[INST] ");
            if (j == 0 && has_system) out.append(system).append("\n\n");
            out.append(m.content).append(" [/INST]");
        } else if (m.role == "assistant") {
            if (t.mistral_v2) out.append(" ");
            out.append(m.content).append(t.eos_token);
            if (t.eos_space) out.append(" ");
        } else {
            throw unsupported_error(anvil::detail::message(
                "chat template (Mistral): message ", j + offset, " has role '", m.role,
                t.mistral_v2
                    ? "'; Only user and assistant roles are supported, with the exception of an initial "
                      "optional system message!"
                    : "'; Only user and assistant roles are supported!"));
        }
    }
}

}  // namespace anvil::models::recipe_detail

namespace anvil::models {

ANVIL_INLINE std::string render_chat(const chat_template& t, std::span<const chat_message> messages,
                                     bool add_generation_prompt) {
    if (messages.empty()) throw error("chat template: the conversation has no messages");
    std::string out;
    switch (t.format) {
        case chat_format::chatml:
            recipe_detail::render_chatml(t, messages, out);
            if (add_generation_prompt) {
                out.append("<|im_start|>assistant\n");
                if (t.qwen3_thinking && !t.enable_thinking) out.append("<think>\n\n</think>\n\n");
            }
            break;
        case chat_format::llama3:
            for (std::size_t i = 0; i < messages.size(); ++i) {
                if (i == 0) out.append(t.bos_token);
                out.append("<|start_header_id|>").append(messages[i].role).append("<|end_header_id|>\n\n");
                out.append(recipe_detail::python_strip(messages[i].content, true, true)).append("<|eot_id|>");
            }
            if (add_generation_prompt || t.always_generation_prompt)
                out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
            break;
        case chat_format::mistral:
        case chat_format::llama2:
            recipe_detail::render_inst(t, messages, out);
            break;
    }
    return out;
}

}  // namespace anvil::models
