// anvil: the decoders of SentencePiece-style tokenizers (Hugging Face `tokenizers` decoders/*.rs): Replace,
// ByteFallback, Fuse, Strip and Metaspace. Each rewrites the list of token strings; the tokenizer
// concatenates what is left. (WordPiece and ByteLevel live with their models, Sequence in
// tokenizer_json.hpp.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/io/tokenizer_normalizers.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/tokenizer_pre_tokenizers.hpp"
#include "anvil/io/unicode.hpp"

namespace anvil::detail {

// Every occurrence of a literal pattern in each token.
class replace_decoder final : public decoder {
public:
    replace_decoder(std::string pattern, std::string content)
        : replace_(std::move(pattern), std::move(content)) {}
    void decode(std::vector<std::string>& tokens) const override {
        for (std::string& token : tokens)
            replace_.normalize(token);
    }

private:
    replace_normalizer replace_;
};

// The byte of a "<0xAB>" token.
inline std::optional<std::uint8_t> byte_fallback_value(std::string_view token) {
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

// Runs of <0xAB> tokens become their bytes as one token when those are valid UTF-8, else one U+FFFD per byte.
class byte_fallback_decoder final : public decoder {
public:
    void decode(std::vector<std::string>& tokens) const override {
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

private:
    static bool is_valid_utf8(std::string_view bytes) {
        for (std::size_t at = 0; at < bytes.size();) {
            const utf8_step step = read_utf8(bytes, at);
            if (step.invalid_length) return false;
            at += step.length;
        }
        return true;
    }
};

// All tokens into one.
class fuse_decoder final : public decoder {
public:
    void decode(std::vector<std::string>& tokens) const override {
        std::string joined;
        for (const std::string& token : tokens)
            joined += token;
        tokens.assign(1, std::move(joined));
    }
};

// Up to `start` leading and `stop` trailing copies of one code point off each token.
class strip_decoder final : public decoder {
public:
    strip_decoder(std::string content, std::size_t start, std::size_t stop)
        : content_(std::move(content)), start_(start), stop_(stop) {}
    void decode(std::vector<std::string>& tokens) const override {
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

private:
    std::string content_;
    std::size_t start_, stop_;
};

// The replacement back to ' '; in the first token it is dropped instead unless the prepend scheme is never.
class metaspace_decoder final : public decoder {
public:
    metaspace_decoder(std::string replacement, prepend_scheme scheme)
        : replacement_(std::move(replacement)), scheme_(scheme) {}
    void decode(std::vector<std::string>& tokens) const override {
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            const bool drop = i == 0 && scheme_ != prepend_scheme::never;
            replace_normalizer(replacement_, drop ? "" : " ").normalize(tokens[i]);
        }
    }

private:
    std::string replacement_;
    prepend_scheme scheme_;
};

}  // namespace anvil::detail
