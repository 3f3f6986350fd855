// anvil: tokenizer_decoders's definitions (see tokenizer_decoders.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/io/tokenizer_decoders.hpp"
#include "anvil/io/tokenizer_normalizers.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

ANVIL_INLINE std::optional<std::uint8_t> byte_fallback_value(std::string_view token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return std::nullopt;
    std::uint32_t value = 0;
    for (const char c : token.substr(3, 2)) {
        const int digit = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
        if (digit < 0) return std::nullopt;
        value = value * 16 + static_cast<std::uint32_t>(digit);
    }
    return static_cast<std::uint8_t>(value);
}

ANVIL_INLINE void byte_fallback_decoder::decode(std::vector<std::string>& tokens) const {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    std::size_t count = 0;
    const auto flush = [&] {
        if (count == 0) return;
        if (is_valid_utf8(bytes)) {
            out.push_back(bytes);
        } else {
            for (std::size_t i = 0; i < count; ++i)
                out.emplace_back("\xEF\xBF\xBD");
        }
        bytes.clear();
        count = 0;
    };
    for (std::string& token : tokens) {
        if (const auto byte = byte_fallback_value(token)) {
            bytes += static_cast<char>(*byte);
            ++count;
            continue;
        }
        flush();
        out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
}

ANVIL_INLINE bool byte_fallback_decoder::is_valid_utf8(std::string_view bytes) {
    for (std::size_t at = 0; at < bytes.size();) {
        const utf8_step step = read_utf8(bytes, at);
        if (step.invalid_length) return false;
        at += step.length;
    }
    return true;
}

ANVIL_INLINE void fuse_decoder::decode(std::vector<std::string>& tokens) const {
    std::string joined;
    for (const std::string& token : tokens)
        joined += token;
    tokens.assign(1, std::move(joined));
}

ANVIL_INLINE void strip_decoder::decode(std::vector<std::string>& tokens) const {
    for (std::string& token : tokens) {
        std::size_t begin = 0, end = token.size();
        for (std::size_t i = 0; i < start_ && std::string_view(token).substr(begin).starts_with(content_);
             ++i)
            begin += content_.size();
        for (std::size_t i = 0; i < stop_ && end - begin >= content_.size() &&
                                std::string_view(token).substr(begin, end - begin).ends_with(content_);
             ++i)
            end -= content_.size();
        token = token.substr(begin, end - begin);
    }
}

ANVIL_INLINE void metaspace_decoder::decode(std::vector<std::string>& tokens) const {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const bool drop = i == 0 && scheme_ != prepend_scheme::never;
        replace_normalizer(replacement_, drop ? "" : " ").normalize(tokens[i]);
    }
}

}  // namespace anvil::detail
