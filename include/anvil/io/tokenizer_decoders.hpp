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

#include "anvil/compilation.hpp"
#include "anvil/io/tokenizer_normalizers.hpp"
#include "anvil/io/tokenizer_pipeline.hpp"
#include "anvil/io/tokenizer_pre_tokenizers.hpp"

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
std::optional<std::uint8_t> byte_fallback_value(std::string_view token);

// Runs of <0xAB> tokens become their bytes as one token when those are valid UTF-8, else one U+FFFD per byte.
class byte_fallback_decoder final : public decoder {
public:
    ANVIL_INLINE void decode(std::vector<std::string>& tokens) const override;

private:
    static bool is_valid_utf8(std::string_view bytes);
};

// All tokens into one.
class fuse_decoder final : public decoder {
public:
    ANVIL_INLINE void decode(std::vector<std::string>& tokens) const override;
};

// Up to `start` leading and `stop` trailing copies of one code point off each token.
class strip_decoder final : public decoder {
public:
    strip_decoder(std::string content, std::size_t start, std::size_t stop)
        : content_(std::move(content)), start_(start), stop_(stop) {}
    ANVIL_INLINE void decode(std::vector<std::string>& tokens) const override;

private:
    std::string content_;
    std::size_t start_, stop_;
};

// The replacement back to ' '; in the first token it is dropped instead unless the prepend scheme is never.
class metaspace_decoder final : public decoder {
public:
    metaspace_decoder(std::string replacement, prepend_scheme scheme)
        : replacement_(std::move(replacement)), scheme_(scheme) {}
    ANVIL_INLINE void decode(std::vector<std::string>& tokens) const override;

private:
    std::string replacement_;
    prepend_scheme scheme_;
};

}  // namespace anvil::detail

#if ANVIL_DEFINITIONS
#include "anvil/io/tokenizer_decoders-inl.hpp"
#endif
