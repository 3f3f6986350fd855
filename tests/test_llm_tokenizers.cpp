// Decoder-LLM tokenizers: the real Qwen3 and Mistral tokenizer.json files (committed as .tar.xz, extracted by
// the build into ANVIL_TEST_LLM_TOKENIZERS_DIR) and Llama-3's (not committed: Llama 3 licence; tested when
// ANVIL_TEST_SHARED_ASSETS_DIR holds tokenizers/llama3/tokenizer.json) against golden ids and decoded text
// from tools/reference/llm_tokenizer_goldens.py, an independent Python implementation of Hugging Face's
// pipeline (its Split runs the real regex with the `regex` module). Also: the hand-written split patterns and
// NFC against Python's regex/unicodedata, Metaspace, the streaming detokenizer, and errors.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
// White-box: the tokenizers' internals (anvil::detail) by name.
#include <anvil/io/split_patterns.hpp>
#include <anvil/io/tokenizer_decoders.hpp>
#include <anvil/io/tokenizer_normalizers.hpp>
#include <anvil/io/unicode.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace test_llm_tokenizers {

namespace fs = std::filesystem;
namespace json = anvil::json;

namespace {

const fs::path data_dir = fs::path(ANVIL_TEST_DATA_DIR) / "llm_tokenizers";

#ifdef ANVIL_TEST_LLM_TOKENIZERS_DIR
const fs::path extracted_dir = ANVIL_TEST_LLM_TOKENIZERS_DIR;
#else
const fs::path extracted_dir;
#endif

#ifdef ANVIL_TEST_SHARED_ASSETS_DIR
const fs::path llama3_dir = fs::path(ANVIL_TEST_SHARED_ASSETS_DIR) / "tokenizers" / "llama3";
#else
const fs::path llama3_dir;
#endif

bool have_llama3() {
    return !llama3_dir.empty() && fs::is_regular_file(llama3_dir / "tokenizer.json");
}

const json::value& goldens() {
    static const json::value document = json::parse_file(data_dir / "goldens.json");
    return document;
}

// The extracted folder of qwen3 or mistral; a failed REQUIRE when the build did not extract the archives.
fs::path extracted(std::string_view name) {
    REQUIRE_MESSAGE(!extracted_dir.empty(),
                    "ANVIL_TEST_LLM_TOKENIZERS_DIR is not defined: the build must extract "
                    "tests/data/llm_tokenizers/*.tar.xz and pass the folder");
    const fs::path folder = extracted_dir / name;
    REQUIRE_MESSAGE(fs::is_regular_file(folder / "tokenizer.json"), (folder / "tokenizer.json").string(),
                    " is missing: the build must extract ",
                    (data_dir / (std::string(name) + ".tar.xz")).string(), " there");
    return folder;
}

const anvil::tokenizer& load(std::string_view name) {
    static std::map<std::string, anvil::tokenizer, std::less<>> cache;
    const auto found = cache.find(name);
    if (found != cache.end()) return found->second;
    const fs::path folder = name == "llama3" ? llama3_dir : extracted(name);
    return cache.emplace(std::string(name), anvil::tokenizer::load(folder)).first->second;
}

std::vector<std::int32_t> ints(const json::value& array) {
    std::vector<std::int32_t> out;
    for (const json::value& v : array.as_array())
        out.push_back(static_cast<std::int32_t>(v.as_int()));
    return out;
}

void check_goldens(std::string_view name) {
    const anvil::tokenizer& tok = load(name);
    const json::array& texts = goldens().at("texts").as_array();
    const json::array& cases = goldens().at("tokenizers").at(name).as_array();
    REQUIRE(texts.size() == cases.size());
    REQUIRE(texts.size() >= 40);
    for (std::size_t i = 0; i < texts.size(); ++i) {
        const std::string& text = texts[i].as_string();
        CAPTURE(text);
        const std::vector<std::int32_t> expected = ints(cases[i].at("ids"));
        const std::vector<std::int32_t> ids = tok.encode(text).ids;
        CHECK(ids == expected);
        CHECK(tok.decode(expected) == cases[i].at("decoded").as_string());
    }
}

bool valid_utf8(std::string_view text) {
    for (std::size_t at = 0; at < text.size();) {
        const anvil::detail::utf8_step step = anvil::detail::read_utf8(text, at);
        if (step.invalid_length) return false;
        at += step.length;
    }
    return true;
}

// Streaming the ids of every golden text (and more) gives pieces of whole characters that add up to the full
// decode, with and without special tokens.
void check_stream(std::string_view name) {
    const anvil::tokenizer& tok = load(name);
    std::vector<std::string> texts;
    for (const json::value& t : goldens().at("texts").as_array())
        texts.push_back(t.as_string());
    texts.emplace_back("🙂🙃 emoji after emoji, 🇫🇷 flags, 𝄞 and 𠜎𠜱 four-byte characters");
    texts.emplace_back("龘靐齉 rare CJK that byte tokens split, ꧁꧂ and ஸ்ரீ");
    texts.emplace_back("  two spaces first, then text\nand a line");
    std::size_t pieces = 0;
    for (const std::string& text : texts) {
        CAPTURE(text);
        const std::vector<std::int32_t> ids = tok.encode(text).ids;
        for (const bool skip : {true, false}) {
            anvil::token_stream stream(tok, skip);
            std::string joined;
            for (const std::int32_t id : ids) {
                const std::string piece = stream.push(id);
                CHECK(valid_utf8(piece));
                pieces += piece.empty() ? 0 : 1;
                joined += piece;
            }
            joined += stream.finish();
            CHECK(joined == tok.decode(ids, skip));
        }
    }
    CHECK(pieces > 100);
}

const char* const metaspace_json = R"({"model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true,
  "vocab": {"<unk>": 0, "▁": 1, "a": 2, "b": 3, "▁a": 4, "ab": 5, "▁ab": 6, "c": 7},
  "merges": ["▁ a", "a b", "▁a b"]},
 "added_tokens": [{"id": 8, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": true}],
 "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
 "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}})";

json::value split_with(std::string_view regex, std::string_view behavior) {
    json::value document = json::parse(metaspace_json);
    json::object split;
    split["type"] = json::value("Split");
    json::object pattern;
    pattern["Regex"] = json::value(std::string(regex));
    split["pattern"] = json::value(std::move(pattern));
    split["behavior"] = json::value(std::string(behavior));
    split["invert"] = json::value(false);
    document.as_object()["pre_tokenizer"] = json::value(std::move(split));
    return document;
}

std::vector<std::string> split_words(std::string_view text, bool qwen) {
    std::vector<std::string> out;
    anvil::detail::split_llama3(
        text, qwen, [&](std::size_t b, std::size_t e) { out.emplace_back(text.substr(b, e - b)); });
    return out;
}

}  // namespace

TEST_CASE("llm tokenizers: Qwen3 (NFC, the Qwen2 split, byte-level BPE, added tokens) against the goldens") {
    check_goldens("qwen3");
    const anvil::tokenizer& tok = load("qwen3");
    CHECK(tok.token_to_id("<|im_start|>") == 151644);
    CHECK(tok.vocab_size() == 151669);
}

TEST_CASE("llm tokenizers: Mistral (Prepend + Replace, byte fallback, fuse_unk, Strip decoder) goldens") {
    check_goldens("mistral");
    const anvil::tokenizer& tok = load("mistral");
    CHECK(tok.encode("Hello world").ids == std::vector<std::int32_t>{1, 22557, 1526});
    CHECK(tok.encode("Hello", {.add_special_tokens = false}).ids == std::vector<std::int32_t>{22557});
}

TEST_CASE("llm tokenizers: Llama-3 (its split, ignore_merges) against the goldens" *
          doctest::skip(!have_llama3()) *
          doctest::description("needs ANVIL_TEST_SHARED_ASSETS_DIR/tokenizers/llama3/tokenizer.json, not "
                               "committed (Llama 3 Community License)")) {
    if (!have_llama3()) {
        MESSAGE(
            "skipped: Llama-3's tokenizer.json is not committed (Llama 3 licence); define "
            "ANVIL_TEST_SHARED_ASSETS_DIR to a folder holding tokenizers/llama3/tokenizer.json");
        return;
    }
    check_goldens("llama3");
    check_stream("llama3");
}

TEST_CASE("llm tokenizers: token_stream pieces are whole characters and add up to decode") {
    check_stream("qwen3");
    check_stream("mistral");

    // Byte-fallback tokens split a character: nothing comes out until it is whole.
    const anvil::tokenizer& mistral = load("mistral");
    const std::vector<std::int32_t> ids = mistral.encode("a 𠜎", {.add_special_tokens = false}).ids;
    anvil::token_stream stream(mistral);
    std::vector<std::string> pieces;
    for (const std::int32_t id : ids)
        pieces.push_back(stream.push(id));
    REQUIRE(ids.size() >= 5);  // ▁a ▁ <0xF0> <0xA0> <0x9C> <0x8E>
    CHECK(pieces[0] == "a");
    CHECK(pieces[1] == " ");
    CHECK(pieces[ids.size() - 2].empty());
    CHECK(pieces.back() == "𠜎");
    CHECK(stream.finish().empty());

    // finish() gives an incomplete character as U+FFFD.
    anvil::token_stream cut(mistral);
    std::string text;
    for (std::size_t i = 0; i + 1 < ids.size(); ++i)
        text += cut.push(ids[i]);
    text += cut.finish();
    CHECK(text == "a \uFFFD\uFFFD\uFFFD");
}

TEST_CASE("llm tokenizers: the Llama-3 and Qwen2 splits against Python's regex module") {
    CHECK(split_words("Hello  world\n\n  x 1234567 'S'LL", false) ==
          std::vector<std::string>{"Hello", " ", " world", "\n\n", " ", " x", " ", "123", "456", "7", " '",
                                   "S", "'LL"});
    CHECK(split_words("Hello  world\n\n  x 1234567 'S'LL", true) ==
          std::vector<std::string>{"Hello", " ", " world", "\n\n", " ", " x", " ", "1", "2", "3", "4", "5",
                                   "6", "7", " '", "S", "'LL"});
    CHECK(split_words("a\t\tb \r\n \n c...\n\n(yes) 'Ve \u017f'\u017f", false) ==
          std::vector<std::string>{"a", "\t", "\tb", " \r\n \n", " c", "...\n\n", "(yes", ")", " '", "Ve",
                                   " \u017f", "'\u017f"});
    CHECK(split_words("  ", false) == std::vector<std::string>{"  "});
    CHECK(split_words(" \n", false) == std::vector<std::string>{" \n"});
    CHECK(split_words("x  ", true) == std::vector<std::string>{"x", "  "});
    CHECK(split_words("", true).empty());
}

TEST_CASE("llm tokenizers: NFC against Python's unicodedata") {
    const auto nfc = [](std::u32string_view s) { return anvil::detail::nfc(s); };
    CHECK(nfc(U"e\u0301") == U"\u00e9");
    CHECK(nfc(U"\u1100\u1161\u11a8") == U"\uac01");  // Hangul L V T
    CHECK(nfc(U"\u1e0b\u0323") == U"\u1e0d\u0307");  // reordered, then composed with the other mark
    CHECK(nfc(U"\u0958") == U"\u0915\u093c");        // a composition exclusion stays decomposed
    CHECK(nfc(U"A\u030a\u0301") == U"\u01fa");       // composes twice
    CHECK(nfc(U"a\u0328\u0301\u0328") == U"\u0105\u0328\u0301");  // the second ogonek is blocked
    CHECK(nfc(U"\u0301a") == U"\u0301a");                         // a mark with no starter before it
    std::string text = "cafe\u0301 ok";
    anvil::detail::nfc_normalizer().normalize(text);
    CHECK(text == "caf\u00e9 ok");
}

TEST_CASE("llm tokenizers: Metaspace pre-tokenizer (prepend_scheme first) and decoder") {
    // Expected ids from tools/reference/llm_tokenizer_goldens.py's Tokenizer on the same document.
    const anvil::tokenizer tok = anvil::tokenizer::from_json(json::parse(metaspace_json), "metaspace.json");
    using ids = std::vector<std::int32_t>;
    CHECK(tok.encode("ab ab").ids == ids{6, 6});
    CHECK(tok.encode("ab  cab").ids == ids{6, 1, 1, 7, 5});
    CHECK(tok.encode("<s>ab ab").ids == ids{8, 5, 6});  // not at the start: no prepended ▁
    CHECK(tok.encode("xyz ab").ids == ids{1, 0, 6});    // fused unknowns
    CHECK(tok.encode(" ab").ids == ids{6});
    CHECK(tok.decode(ids{6, 1, 1, 7, 5}) == "ab  cab");
    CHECK(tok.decode(ids{8, 5, 6}) == "ab ab");
    CHECK(tok.decode(ids{1, 0, 6}) == "<unk> ab");
}

TEST_CASE("llm tokenizers: decoders Replace, ByteFallback, Fuse and Strip") {
    namespace d = anvil::detail;
    // As decoders/byte_fallback.rs: a run of byte tokens is valid UTF-8 as a whole or one U+FFFD per byte.
    std::vector<std::string> tokens{"▁Hi", "<0xE5>", "<0x8F>", "<0xAB>", "▁y", "<0xE5>", "<0x8F>", "▁x▁"};
    d::replace_decoder("▁", " ").decode(tokens);
    d::byte_fallback_decoder().decode(tokens);
    CHECK(tokens == std::vector<std::string>{" Hi", "叫", " y", "\uFFFD", "\uFFFD", " x "});
    std::vector<std::string> run{"<0xE5>", "<0x8F>", "<0xAB>", "<0xE5>", "<0x8f>"};
    d::byte_fallback_decoder().decode(run);
    CHECK(run == std::vector<std::string>(5, "\uFFFD"));
    d::fuse_decoder().decode(tokens);
    d::strip_decoder(" ", 1, 1).decode(tokens);
    CHECK(tokens == std::vector<std::string>{"Hi叫 y\uFFFD\uFFFD x"});
    std::vector<std::string> spaces{"  a  ", " "};
    d::strip_decoder(" ", 1, 3).decode(spaces);
    CHECK(spaces == std::vector<std::string>{" a", ""});
}

TEST_CASE("llm tokenizers: unsupported components and bad files are clear errors") {
    using doctest::Contains;
    const auto from = [](const json::value& document) {
        (void)anvil::tokenizer::from_json(document, "t.json");
    };
    const std::string other_regex = R"(\p{L}+|\s+)";
    CHECK_THROWS_AS(from(split_with(other_regex, "Isolated")), anvil::unsupported_error);
    CHECK_THROWS_WITH(from(split_with(other_regex, "Isolated")),
                      Contains("t.json: pre_tokenizer: Split regex '\\p{L}+|\\s+' is not supported"));
    CHECK_THROWS_WITH(
        from(split_with(anvil::detail::qwen2_split_regex, "MergedWithPrevious")),
        Contains("Split behavior 'MergedWithPrevious' is not supported yet (Isolated, Removed)"));
    CHECK_NOTHROW(from(split_with(anvil::detail::llama3_split_regex, "Isolated")));

    json::value nfkc = json::parse(metaspace_json);
    json::object normalizer;
    normalizer["type"] = json::value("NFKC");
    nfkc.as_object()["normalizer"] = json::value(std::move(normalizer));
    CHECK_THROWS_AS(from(nfkc), anvil::unsupported_error);
    CHECK_THROWS_WITH(from(nfkc), Contains("normalizer type 'NFKC' is not supported yet"));

    json::value unknown = json::parse(metaspace_json);
    unknown.as_object()["decoder"].as_object()["type"] = json::value("Sparkle");
    CHECK_THROWS_AS(from(unknown), anvil::format_error);
    CHECK_THROWS_WITH(from(unknown), Contains("t.json: decoder.type: unknown decoder type 'Sparkle'"));

    json::value no_bytes = json::parse(metaspace_json);
    no_bytes.as_object()["model"].as_object()["byte_fallback"] = json::value(true);
    CHECK_THROWS_AS(from(no_bytes), anvil::format_error);
    CHECK_THROWS_WITH(from(no_bytes),
                      Contains("model.byte_fallback: true, but the vocabulary has no byte token "
                               "'<0x00>'"));

    json::value bad_merge = json::parse(metaspace_json);
    bad_merge.as_object()["model"].as_object()["merges"].as_array().push_back(json::value("a zz"));
    CHECK_THROWS_AS(from(bad_merge), anvil::format_error);
    CHECK_THROWS_WITH(from(bad_merge), Contains("model.merges[3]: token 'zz' is not in the vocabulary"));

    json::value bad_scheme = json::parse(metaspace_json);
    bad_scheme.as_object()["pre_tokenizer"].as_object()["prepend_scheme"] = json::value("sometimes");
    CHECK_THROWS_WITH(from(bad_scheme),
                      Contains("pre_tokenizer.prepend_scheme: expected \"always\", \"first\" or "
                               "\"never\", got \"sometimes\""));

    // A stream over a bad id fails as decode does.
    anvil::token_stream stream(anvil::tokenizer::from_json(json::parse(metaspace_json), "t.json"));
    CHECK_THROWS_WITH((void)stream.push(99), Contains("token id 99 is out of range"));
}

}  // namespace test_llm_tokenizers
