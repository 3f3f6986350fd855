// libFuzzer target for anvil::tokenizer::from_json. Any input may be rejected with an anvil::error; one that
// loads must encode a few fixed strings and the input itself (as text, when it is UTF-8) without failing,
// give ids the tokenizer can turn back into tokens, and decode them. Errors must name the source.
#include <anvil/io/tokenizer.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

void require(bool condition) {
    if (!condition) __builtin_trap();
}

void exercise(const anvil::tokenizer& tok, std::string_view text) {
    anvil::encode_options options;
    const anvil::encoding e = tok.encode(text, options);
    require(e.ids.size() == e.type_ids.size() && e.ids.size() == e.special_tokens_mask.size());
    for (const std::int32_t id : e.ids)
        static_cast<void>(tok.id_to_token(id));  // every id names a token
    static_cast<void>(tok.decode(e.ids));
    static_cast<void>(tok.decode(e.ids, false));
    options.max_length = 16;
    try {
        const anvil::encoding cut = tok.encode_pair(text, "second text", options);
        require(cut.ids.size() <= 16);
    } catch (const anvil::error& error) {  // only when the specials alone exceed max_length
        require(std::string_view(error.what()).find("leaves no room") != std::string_view::npos);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    anvil::tokenizer tok;
    try {
        tok = anvil::tokenizer::from_json(anvil::json::parse(bytes, "fuzz.json"), "fuzz.json");
    } catch (const anvil::error& e) {
        require(std::string_view(e.what()).starts_with("fuzz.json: "));
        return 0;
    }
    // From here on, only invalid UTF-8 input text may throw.
    for (const std::string_view text : {"", "Hello, world! The quick brown fox.", "  café naïve 北京 😀\t\n",
                                        "[CLS] <s> </s> <mask> <|endoftext|> [SEP]"})
        exercise(tok, text);
    try {
        anvil::detail::validate_utf8(bytes, "fuzz input");
    } catch (const anvil::format_error&) {
        bool threw = false;
        try {
            static_cast<void>(tok.encode(bytes));
        } catch (const anvil::format_error& e) {
            threw = std::string_view(e.what()).find("invalid UTF-8 at byte") != std::string_view::npos;
        }
        require(threw);
        return 0;
    }
    exercise(tok, bytes);
    return 0;
}
