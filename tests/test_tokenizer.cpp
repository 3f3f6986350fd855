// Tokenizers: BERT WordPiece and byte-level BPE (GPT-2, RoBERTa) against golden ids from independent
// references: the manifest's BERT golden, tiktoken's r50k_base cases in TestPlans.txt, and
// tools/reference/tokenizer_goldens.py (ports of transformers' BERT tokenizer and openai's GPT-2 encoder.py)
// for the rest; tokenizer.json against the vocab-file path; errors and the malformed corpus (the Unicode
// tables are test_unicode.cpp's, a white-box test).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include "malformed_corpus.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace test_tokenizer {

namespace fs = std::filesystem;
namespace json = anvil::json;

namespace {

const fs::path data_dir = ANVIL_TEST_DATA_DIR;
const fs::path tokenizers_dir = data_dir / "tokenizers";

const json::value& goldens() {
    static const json::value document = json::parse_file(tokenizers_dir / "goldens.json");
    return document;
}

std::vector<std::int32_t> ints(const json::value& array) {
    std::vector<std::int32_t> out;
    for (const json::value& v : array.as_array())
        out.push_back(static_cast<std::int32_t>(v.as_int()));
    return out;
}
std::vector<std::int32_t> ints(const std::vector<std::uint8_t>& bytes) {
    return {bytes.begin(), bytes.end()};
}

const anvil::tokenizer& bert() {
    static const anvil::tokenizer t = anvil::tokenizer::load(tokenizers_dir / "bert-base-uncased");
    return t;
}
const anvil::tokenizer& gpt2() {
    static const anvil::tokenizer t = anvil::tokenizer::load(tokenizers_dir / "gpt2");
    return t;
}

// Encodes a golden case (text, optional pair and max_length) and checks ids, type ids, the special tokens
// mask and the decoded text where the case has them.
void check_case(const anvil::tokenizer& tok, const json::value& c) {
    const std::string& text = c.at("text").as_string();
    CAPTURE(text);
    anvil::encode_options options;
    if (const json::value* n = c.find("max_length"))
        options.max_length = static_cast<std::size_t>(n->as_int());
    const json::value* pair = c.find("pair");
    const anvil::encoding e =
        pair ? tok.encode_pair(text, pair->as_string(), options) : tok.encode(text, options);
    CHECK(e.ids == ints(c.at("ids")));
    if (const json::value* types = c.find("type_ids")) CHECK(e.type_ids == ints(*types));
    if (const json::value* mask = c.find("special_tokens_mask"))
        CHECK(ints(e.special_tokens_mask) == ints(*mask));
    if (options.max_length) CHECK(e.ids.size() <= options.max_length);
    if (const json::value* decoded = c.find("decoded")) CHECK(tok.decode(e.ids) == decoded->as_string());
}

struct plan_case {
    std::string sample;
    std::vector<std::int32_t> ids;
};

// tiktoken's TestPlans.txt: blocks of "EncodingName: ...", "Sample: ...", "Encoded: [..]" lines.
std::vector<plan_case> r50k_cases() {
    std::ifstream in(tokenizers_dir / "gpt2" / "TestPlans.txt", std::ios::binary);
    REQUIRE(in);
    std::vector<plan_case> cases;
    std::string line, encoding_name;
    std::optional<std::string> sample;
    while (std::getline(in, line)) {
        if (line.starts_with("EncodingName: ")) {
            encoding_name = line.substr(14);
        } else if (line.starts_with("Sample: ")) {
            sample = line.substr(8);
        } else if (line.starts_with("Encoded: [") && encoding_name == "r50k_base") {
            REQUIRE(sample);
            plan_case c{*sample, {}};
            std::istringstream numbers(line.substr(10));
            for (std::string number; std::getline(numbers, number, ',');)
                if (number.find_first_of("0123456789") != std::string::npos)
                    c.ids.push_back(static_cast<std::int32_t>(std::stol(number)));
            cases.push_back(std::move(c));
            sample.reset();
        }
    }
    return cases;
}

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

json::value added_token(std::string content, std::int64_t id, bool lstrip = false) {
    json::object t;
    t["id"] = id;
    t["content"] = std::move(content);
    t["single_word"] = false;
    t["lstrip"] = lstrip;
    t["rstrip"] = false;
    t["normalized"] = false;
    t["special"] = true;
    return t;
}
json::value typed(std::string type) {
    json::object o;
    o["type"] = std::move(type);
    return o;
}

// What Hugging Face's convert_slow_tokenizer writes for bert-base-uncased, with the vocabulary of vocab.txt.
json::value bert_tokenizer_json() {
    json::object vocab;
    std::istringstream lines(read_text(tokenizers_dir / "bert-base-uncased" / "vocab.txt"));
    std::int64_t id = 0;
    for (std::string line; std::getline(lines, line);)
        vocab[line] = id++;
    json::object doc;
    doc["added_tokens"] =
        json::array{added_token("[PAD]", 0), added_token("[UNK]", 100), added_token("[CLS]", 101),
                    added_token("[SEP]", 102), added_token("[MASK]", 103)};
    json::object normalizer = typed("BertNormalizer").as_object();
    normalizer["clean_text"] = true;
    normalizer["handle_chinese_chars"] = true;
    normalizer["strip_accents"] = nullptr;
    normalizer["lowercase"] = true;
    doc["normalizer"] = std::move(normalizer);
    doc["pre_tokenizer"] = typed("BertPreTokenizer");
    json::object processor = typed("BertProcessing").as_object();
    processor["sep"] = json::array{"[SEP]", 102};
    processor["cls"] = json::array{"[CLS]", 101};
    doc["post_processor"] = std::move(processor);
    doc["decoder"] = typed("WordPiece");
    json::object model = typed("WordPiece").as_object();
    model["unk_token"] = "[UNK]";
    model["continuing_subword_prefix"] = "##";
    model["max_input_chars_per_word"] = 100;
    model["vocab"] = std::move(vocab);
    doc["model"] = std::move(model);
    return doc;
}

json::value gpt2_tokenizer_json(bool add_prefix_space) {
    json::object doc;
    doc["added_tokens"] = json::array{added_token("<|endoftext|>", 50256)};
    json::object pre = typed("ByteLevel").as_object();
    pre["add_prefix_space"] = add_prefix_space;
    pre["trim_offsets"] = true;
    pre["use_regex"] = true;
    doc["pre_tokenizer"] = std::move(pre);
    doc["post_processor"] = typed("ByteLevel");
    doc["decoder"] = typed("ByteLevel");
    json::object model = typed("BPE").as_object();
    model["dropout"] = nullptr;
    model["unk_token"] = nullptr;
    model["vocab"] = json::parse_file(tokenizers_dir / "gpt2" / "vocab.json");
    json::array merges;
    std::istringstream lines(read_text(tokenizers_dir / "gpt2" / "merges.txt"));
    for (std::string line; std::getline(lines, line);) {
        if (line.empty() || line.starts_with("#version")) continue;
        const auto space = line.find(' ');
        merges.push_back(json::array{line.substr(0, space), line.substr(space + 1)});  // the newer pair form
    }
    model["merges"] = std::move(merges);
    doc["model"] = std::move(model);
    return doc;
}

template <class Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const anvil::error& e) {
        return e.what();
    }
    return "(no error)";
}

json::value with_member(json::value doc, const std::string& key, json::value v) {
    doc.as_object()[key] = std::move(v);
    return doc;
}

json::value tiny_wordpiece_json() {
    return json::parse_file(data_dir / "tokenizer_json" / "wordpiece_tiny.json");
}

}  // namespace

TEST_CASE("tokenizer: BERT uncased, the manifest golden and the reference's sentences") {
    const anvil::encoding e = bert().encode("i like strawberries");
    CHECK(e.ids == std::vector<std::int32_t>{101, 1045, 2066, 13137, 20968, 102});
    CHECK(e.type_ids == std::vector<std::int32_t>(6, 0));
    CHECK(ints(e.special_tokens_mask) == std::vector<std::int32_t>{1, 0, 0, 0, 0, 1});
    const json::array& cases = goldens().at("bert").as_array();
    CHECK(cases.size() >= 30);
    for (const json::value& c : cases)
        check_case(bert(), c);
}

TEST_CASE("tokenizer: BERT pairs, truncation and no special tokens") {
    for (const char* group : {"bert_pairs", "bert_truncation"})
        for (const json::value& c : goldens().at(group).as_array())
            check_case(bert(), c);
    anvil::encode_options plain;
    plain.add_special_tokens = false;
    for (const json::value& c : goldens().at("bert_no_special").as_array()) {
        const anvil::encoding e = bert().encode(c.at("text").as_string(), plain);
        CHECK(e.ids == ints(c.at("ids")));
        CHECK(ints(e.special_tokens_mask) == std::vector<std::int32_t>(e.ids.size(), 0));
    }
    const anvil::encoding pair = bert().encode_pair("hello", "world", plain);
    CHECK(pair.ids == std::vector<std::int32_t>{7592, 2088});
    CHECK(pair.type_ids == std::vector<std::int32_t>{0, 1});
    CHECK(bert().decode(bert().encode("Hello [MASK] world").ids, false) == "[CLS] hello [MASK] world [SEP]");
}

TEST_CASE("tokenizer: GPT-2, all 64 r50k_base cases of tiktoken's TestPlans.txt") {
    const std::vector<plan_case> cases = r50k_cases();
    REQUIRE(cases.size() == 64);
    for (const plan_case& c : cases) {
        CAPTURE(c.sample);
        const anvil::encoding e = gpt2().encode(c.sample);
        CHECK(e.ids == c.ids);
        CHECK(e.type_ids == std::vector<std::int32_t>(c.ids.size(), 0));
        CHECK(gpt2().decode(e.ids) == c.sample);
    }
}

TEST_CASE("tokenizer: GPT-2 Unicode-heavy text, prefix space, and invalid UTF-8 when decoding") {
    for (const json::value& c : goldens().at("gpt2").as_array()) {
        check_case(gpt2(), c);
        const std::string& text = c.at("text").as_string();
        CHECK(gpt2().decode(gpt2().encode(text).ids, false) == text);
    }
    const anvil::tokenizer prefixed =
        anvil::tokenizer::from_json(gpt2_tokenizer_json(true), "gpt2-prefix.json");
    for (const json::value& c : goldens().at("gpt2_prefix_space").as_array())
        check_case(prefixed, c);
    for (const json::value& c : goldens().at("gpt2_byte_decodes").as_array()) {
        const std::vector<std::int32_t> ids = ints(c.at("ids"));
        CHECK(gpt2().decode(ids) == c.at("text").as_string());
    }
    // <|endoftext|> is special: split out of the text, left out when decoding unless asked for.
    const std::vector<std::int32_t> ids = gpt2().encode("a<|endoftext|>b").ids;
    CHECK(ids == std::vector<std::int32_t>{64, 50256, 65});
    CHECK(gpt2().decode(ids) == "ab");
    CHECK(gpt2().decode(ids, false) == "a<|endoftext|>b");
}

TEST_CASE("tokenizer: RoBERTa processing, from tokenizer.json and from vocab.json + merges.txt") {
    const anvil::tokenizer from_json =
        anvil::tokenizer::load(data_dir / "tokenizer_json" / "roberta_tiny.json");
    const anvil::tokenizer from_folder = anvil::tokenizer::load(tokenizers_dir / "roberta_tiny");
    for (const json::value& c : goldens().at("roberta_tiny").as_array()) {
        check_case(from_json, c);
        check_case(from_folder, c);
    }
    CHECK(from_json.pad_id() == 1);
    CHECK(from_folder.pad_id() == 1);
    CHECK(from_folder.vocab_size() == from_json.vocab_size());
    CHECK(from_folder.token_to_id("<mask>") == from_json.vocab_size() - 1);
}

TEST_CASE("tokenizer: WordPiece tokenizer.json with TemplateProcessing and added tokens") {
    const anvil::tokenizer tok = anvil::tokenizer::load(data_dir / "tokenizer_json" / "wordpiece_tiny.json");
    for (const json::value& c : goldens().at("wordpiece_tiny").as_array())
        check_case(tok, c);
    CHECK(tok.pad_id() == 0);
    CHECK(tok.model_max_length() == 0);
}

TEST_CASE("tokenizer: tokenizer.json built from the real vocabularies matches the vocab-file path") {
    const anvil::tokenizer bert_json = anvil::tokenizer::from_json(bert_tokenizer_json(), "bert.json");
    const anvil::tokenizer gpt2_json = anvil::tokenizer::from_json(gpt2_tokenizer_json(false), "gpt2.json");
    for (const char* group : {"bert", "bert_pairs", "bert_truncation"}) {
        for (const json::value& c : goldens().at(group).as_array()) {
            check_case(bert_json, c);
            const std::string& text = c.at("text").as_string();
            CHECK(bert_json.encode(text).ids == bert().encode(text).ids);
        }
    }
    for (const json::value& c : goldens().at("gpt2").as_array())
        check_case(gpt2_json, c);
    for (const plan_case& c : r50k_cases())
        CHECK(gpt2_json.encode(c.sample).ids == c.ids);
    CHECK(bert_json.vocab_size() == bert().vocab_size());
    CHECK(gpt2_json.vocab_size() == gpt2().vocab_size());
}

TEST_CASE("tokenizer: vocabulary queries and tokenizer_config.json") {
    CHECK(bert().vocab_size() == 30522);
    CHECK(gpt2().vocab_size() == 50257);
    CHECK(bert().token_to_id("[CLS]") == 101);
    CHECK(bert().token_to_id("##ing") == 2075);
    CHECK_FALSE(bert().token_to_id("not-a-token").has_value());
    CHECK(bert().id_to_token(13137) == "straw");
    CHECK(gpt2().id_to_token(50256) == "<|endoftext|>");
    CHECK(bert().pad_id() == 0);
    CHECK(gpt2().pad_id() == 0);
    CHECK(bert().model_max_length() == 0);

    const fs::path folder = fs::temp_directory_path() / "anvil_test_tokenizer_config";
    fs::remove_all(folder);
    fs::create_directories(folder);
    fs::copy_file(tokenizers_dir / "roberta_tiny" / "vocab.json", folder / "vocab.json");
    fs::copy_file(tokenizers_dir / "roberta_tiny" / "merges.txt", folder / "merges.txt");
    std::ofstream(folder / "tokenizer_config.json")
        << R"({"model_max_length": 512, "add_prefix_space": true, "pad_token": {"content": "<unk>"}})";
    const anvil::tokenizer configured = anvil::tokenizer::load(folder);
    CHECK(configured.model_max_length() == 512);
    CHECK(configured.pad_id() == 3);
    // add_prefix_space: "hello" encodes as " hello" does without it.
    const anvil::tokenizer plain = anvil::tokenizer::load(tokenizers_dir / "roberta_tiny");
    CHECK(configured.encode("hello").ids == plain.encode(" hello").ids);
    std::ofstream(folder / "tokenizer_config.json")
        << R"({"model_max_length": 1000000000000000019884624838656})";
    CHECK(anvil::tokenizer::load(folder).model_max_length() == 0);
    std::ofstream(folder / "tokenizer_config.json") << R"({"do_lower_case": "no"})";
    CHECK(error_of([&] {
              (void)anvil::tokenizer::load(folder);
          }).find("tokenizer_config.json: do_lower_case: expected a boolean, got a string") !=
          std::string::npos);
    fs::remove_all(folder);
}

TEST_CASE("tokenizer: errors name what is wrong") {
    using doctest::Contains;
    CHECK_THROWS_AS((void)anvil::tokenizer::load(data_dir / "no_such_tokenizer"), anvil::io_error);
    CHECK_THROWS_WITH((void)anvil::tokenizer::load(data_dir / "no_such_tokenizer"),
                      Contains("no_such_tokenizer: no such file or directory"));
    CHECK_THROWS_WITH((void)anvil::tokenizer::load(data_dir / "malformed"),
                      Contains("no tokenizer.json, vocab.txt or vocab.json + merges.txt"));

    // Invalid UTF-8 input names the byte.
    CHECK_THROWS_AS((void)bert().encode("abc\xff"), anvil::format_error);
    CHECK_THROWS_WITH((void)bert().encode("abc\xff"), Contains("input text: invalid UTF-8 at byte 3 (0xFF)"));
    CHECK_THROWS_WITH((void)gpt2().encode_pair("fine", "x\xe4\xbd"),
                      Contains("at byte 1 (0xE4): sequence truncated"));
    CHECK_THROWS_WITH((void)gpt2().encode("\xed\xa0\x80"), Contains("UTF-16 surrogate"));
    CHECK_THROWS_WITH((void)gpt2().encode("\xc0\xaf"), Contains("overlong"));

    // Ids out of range.
    CHECK_THROWS_WITH((void)bert().id_to_token(30522), Contains("token id 30522 is out of range"));
    CHECK_THROWS_WITH((void)bert().id_to_token(-1), Contains("token id -1 is out of range"));
    const std::vector<std::int32_t> bad{101, 99999};
    CHECK_THROWS_WITH((void)bert().decode(bad), Contains("token id 99999 is out of range"));
    anvil::encode_options tiny;
    tiny.max_length = 2;
    CHECK_THROWS_WITH((void)bert().encode_pair("a", "b", tiny),
                      Contains("leaves no room for the 3 special tokens"));
    CHECK_THROWS_WITH((void)anvil::tokenizer{}.encode("x"), Contains("default-constructed"));

    // Components Hugging Face has and anvil does not yet.
    json::value unigram = tiny_wordpiece_json();
    unigram.as_object()["model"] = typed("Unigram");
    CHECK_THROWS_AS((void)anvil::tokenizer::from_json(unigram, "t.json"), anvil::unsupported_error);
    CHECK_THROWS_WITH((void)anvil::tokenizer::from_json(unigram, "t.json"),
                      Contains("t.json: model type 'Unigram' is not supported yet (WordPiece, BPE)"));
    CHECK_THROWS_WITH((void)anvil::tokenizer::from_json(
                          with_member(tiny_wordpiece_json(), "pre_tokenizer", typed("Whitespace")), "t.json"),
                      Contains("pre_tokenizer type 'Whitespace' is not supported yet"));
    CHECK_THROWS_WITH((void)anvil::tokenizer::from_json(
                          with_member(tiny_wordpiece_json(), "normalizer", typed("NFKC")), "t.json"),
                      Contains("normalizer type 'NFKC' is not supported yet"));
    CHECK_THROWS_WITH((void)anvil::tokenizer::from_json(
                          with_member(tiny_wordpiece_json(), "decoder", typed("CTC")), "t.json"),
                      Contains("decoder type 'CTC' is not supported yet"));

    check_malformed_corpus("tokenizer", 20, [](const fs::path& path) { (void)anvil::tokenizer::load(path); });
}

TEST_CASE("tokenizer: encoding thousands of sentences is fast") {
    std::vector<std::string> sentences;
    for (const json::value& c : goldens().at("bert").as_array())
        sentences.push_back(c.at("text").as_string());
    for (const plan_case& c : r50k_cases())
        sentences.push_back(c.sample);
    const auto start = std::chrono::steady_clock::now();
    std::size_t total = 0;
    for (int round = 0; round < 20; ++round)
        for (const std::string& s : sentences)
            total += bert().encode(s).ids.size() + gpt2().encode(s).ids.size();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE(20 * sentences.size() * 2, " encodings (", total, " ids) in ", seconds, " s");
    CHECK(total > 0);
    CHECK(seconds < 20.0);  // ~0.1 s at -O1; a quadratic path would show here
}

}  // namespace test_tokenizer
