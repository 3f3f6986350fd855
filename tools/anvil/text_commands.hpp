// `anvil embed`, `anvil rerank` and `anvil tokenize`: sentence embeddings, cross-encoder scores and token ids
// from a Hugging Face model folder, from text or from token ids given on the command line.
#pragma once

#include "arguments.hpp"
#include "clip_commands.hpp"
#include "model_commands.hpp"

#include <anvil/anvil.hpp>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace anvil::cli {

inline constexpr const char* embed_usage =
    "usage: anvil embed --model DIR (TEXT... | --ids LIST...) [--type-ids LIST...]\n"
    "                   [--pooling mean|cls|max|none] [--no-normalize] [--backend cpu|ane|coreml|auto]\n"
    "                   [--strict-device] [--compress KIND] [--adapter DIR] [--out F.npy] [--json]\n"
    "\n"
    "Sentence embeddings from a BERT, RoBERTa, XLM-R, MPNet or DistilBERT encoder (a sentence-transformers\n"
    "folder: pooling from 1_Pooling/config.json, L2 normalisation when modules.json has Normalize).\n"
    "LIST is comma-separated token ids including the special tokens; --ids repeats for a batch.\n"
    "--pooling none gives the hidden states of one text, [S, D]. --out writes the float32 result as .npy.\n"
    "--adapter DIR applies a PEFT LoRA adapter (adapter_config.json, adapter_model.safetensors,\nas `anvil "
    "train --lora` or PEFT's save_pretrained write it) to the folder's weights.\n";

inline constexpr const char* rerank_usage =
    "usage: anvil rerank --model DIR (--query Q PASSAGE... | --ids LIST [--type-ids LIST] ...)\n"
    "                    [--backend cpu|ane|coreml|auto] [--strict-device] [--compress KIND]\n"
    "                    [--adapter DIR] [--out F.npy] [--json]\n"
    "\n"
    "Scores each (query, passage) pair with a cross-encoder (BERT, RoBERTa/XLM-R or DistilBERT sequence\n"
    "classification): the score is the head's first logit. Prints the passages best first; --json and --out\n"
    "give the scores in input order. With --ids, a model with token types (BERT) needs one --type-ids list\n"
    "per pair; one without (DistilBERT, MPNet, RoBERTa) takes --ids alone.\n"
    "--adapter DIR applies a PEFT LoRA adapter (adapter_config.json, adapter_model.safetensors,\nas `anvil "
    "train --lora` or PEFT's save_pretrained write it) to the folder's weights.\n";

inline constexpr const char* tokenize_usage =
    "usage: anvil tokenize --model DIR TEXT... [--pair TEXT] [--no-special] [--json]\n"
    "\n"
    "Token ids as Hugging Face's tokenizer(text) gives them (special tokens included unless --no-special),\n"
    "from tokenizer.json, vocab.txt or vocab.json + merges.txt. With --pair, each TEXT is encoded with it "
    "as\n"
    "the second sequence (token type ids 1).\n";

namespace detail_text {

inline std::string id_list_text(const std::vector<std::int32_t>& ids) {
    std::string out = "[";
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i != 0) out += ", ";
        out += std::to_string(ids[i]);
    }
    return out + "]";
}

inline json::value json_ints(const std::vector<std::int32_t>& values) {
    json::array out;
    for (const auto v : values)
        out.emplace_back(static_cast<std::int64_t>(v));
    return json::value(std::move(out));
}

// [N, D] (or [S, D]) as a list of rows.
inline json::value json_rows(const host_tensor& t) {
    const auto values = t.to_f32();
    const auto& shape = t.shape();
    const auto columns = static_cast<std::size_t>(shape[shape.rank() - 1]);
    json::array rows;
    for (std::size_t start = 0; start < values.size(); start += columns) {
        json::array row;
        for (std::size_t i = 0; i < columns; ++i)
            row.push_back(json_number(values[start + i]));
        rows.emplace_back(std::move(row));
    }
    return json::value(std::move(rows));
}

inline models::pooling parse_pooling(const std::string& name) {
    if (name == "mean") return models::pooling::mean;
    if (name == "cls") return models::pooling::cls;
    if (name == "max") return models::pooling::max;
    if (name == "none") return models::pooling::none;
    throw usage_error(detail::message("embed: --pooling must be mean, cls, max or none, got '", name, "'"));
}

}  // namespace detail_text

inline int run_embed(const std::vector<std::string_view>& argv, const char* argv0) {
    const arguments args("embed", argv,
                         {{"model", true},
                          {"ids", true},
                          {"type-ids", true},
                          {"pooling", true},
                          {"no-normalize", false},
                          {"image", true},
                          {"pixels", true},
                          {"backend", true},
                          {"compress", true},
                          {"strict-device", false},
                          {"adapter", true},
                          {"out", true},
                          {"json", false},
                          {"help", false}});
    if (args.flag("help")) {
        if (const auto model = args.value("model"); model && detail_clip::is_clip_folder(*model))
            return run_clip_embed(args, argv0);
        std::fputs(embed_usage, stdout);
        std::fputs("\n", stdout);
        std::fputs(clip_embed_usage, stdout);
        return 0;
    }
    const std::string folder = model_folder(args, "embed");
    if (detail_clip::is_clip_folder(folder)) return run_clip_embed(args, argv0);
    if (args.value("pixels") || !args.values("image").empty()) {
        throw usage_error(detail::message("embed: --image and --pixels are for CLIP models; ", folder,
                                          "/config.json does not say model_type \"clip\""));
    }
    const auto ids = parse_id_lists(args, "ids");
    const auto type_ids = parse_id_lists(args, "type-ids");
    const auto& texts = args.positional();
    if (ids.empty() == texts.empty())
        throw usage_error("embed: give either TEXT... or --ids LIST... (one of them, not both)");
    if (!type_ids.empty() && type_ids.size() != ids.size())
        throw usage_error(detail::message("embed: ", type_ids.size(), " --type-ids lists for ", ids.size(),
                                          " --ids lists (one each, or none)"));
    models::encode_options options;
    if (const auto pooling = args.value("pooling")) options.pool = detail_text::parse_pooling(*pooling);
    if (args.flag("no-normalize")) options.normalize = false;
    const std::size_t count = texts.empty() ? ids.size() : texts.size();
    if (options.pool == models::pooling::none && count != 1)
        throw usage_error("embed: --pooling none gives the hidden states of one text; give exactly one");

    const progress shown;
    shown.say("loading " + folder);
    auto encoder = models::sentence_encoder::load(folder, backend_options(args, "embed", argv0));
    shown.say("encoding");
    const host_tensor result = texts.empty() ? encoder.encode_ids(ids, type_ids, options)
                                             : encoder.encode(std::span<const std::string>(texts), options);
    if (const auto out = args.value("out")) write_npy(*out, result);
    if (args.flag("json")) {
        json::object report;
        report["model"] = folder;
        report["placement"] = placement_json();
        report["shape"] = detail_text::json_ints(
            {static_cast<std::int32_t>(result.shape()[0]), static_cast<std::int32_t>(result.shape()[1])});
        report[options.pool == models::pooling::none ? "hidden_states" : "embeddings"] =
            detail_text::json_rows(result);
        std::printf("%s\n", json::dump(json::value(std::move(report))).c_str());
        return 0;
    }
    const auto values = result.to_f32();
    const auto rows = result.shape()[0];
    const auto columns = static_cast<std::size_t>(result.shape()[1]);
    for (std::int64_t r = 0; r < rows; ++r) {
        std::printf("%lld [%zu]", static_cast<long long>(r), columns);
        for (std::size_t c = 0; c < std::min<std::size_t>(columns, 6); ++c)
            std::printf(" %.6f", static_cast<double>(values[static_cast<std::size_t>(r) * columns + c]));
        std::printf("%s\n", columns > 6 ? " ..." : "");
    }
    return 0;
}

inline int run_rerank(const std::vector<std::string_view>& argv, const char* argv0) {
    const arguments args("rerank", argv,
                         {{"model", true},
                          {"query", true},
                          {"ids", true},
                          {"type-ids", true},
                          {"backend", true},
                          {"compress", true},
                          {"strict-device", false},
                          {"adapter", true},
                          {"out", true},
                          {"json", false},
                          {"help", false}});
    if (args.flag("help")) {
        std::fputs(rerank_usage, stdout);
        return 0;
    }
    const std::string folder = model_folder(args, "rerank");
    const auto ids = parse_id_lists(args, "ids");
    const auto type_ids = parse_id_lists(args, "type-ids");
    const auto query = args.value("query");
    const auto& passages = args.positional();
    if (query.has_value() == !ids.empty())
        throw usage_error("rerank: give either --query Q PASSAGE... or --ids LIST [--type-ids LIST] ...");
    if (query && passages.empty()) throw usage_error("rerank: --query needs at least one PASSAGE");
    if (!query && !passages.empty())
        throw usage_error("rerank: PASSAGE arguments go with --query, not with --ids");
    if (!ids.empty() && !type_ids.empty() && type_ids.size() != ids.size())
        throw usage_error(
            detail::message("rerank: ", type_ids.size(), " --type-ids lists for ", ids.size(),
                            " --ids lists (one each, or none for a model without token types)"));

    const progress shown;
    shown.say("loading " + folder);
    auto model = models::cross_encoder::load(folder, backend_options(args, "rerank", argv0));
    // A model with token types (BERT's two segments) needs them to score a pair; one without (DistilBERT,
    // MPNet, or RoBERTa's single type) takes --ids alone.
    const auto& config = model.config();
    if (!ids.empty() && type_ids.empty() && config.table().token_types && config.type_vocab_size > 1) {
        throw usage_error(
            detail::message("rerank: ", folder, " has token types (type_vocab_size ", config.type_vocab_size,
                            "): give one --type-ids list per --ids list (a pair needs its token types)"));
    }
    shown.say("scoring");
    std::vector<float> scores;
    if (query) {
        std::vector<std::pair<std::string, std::string>> pairs;
        for (const auto& passage : passages)
            pairs.emplace_back(*query, passage);
        scores = model.predict(pairs);
    } else {
        scores = model.predict_ids(ids, type_ids);
    }
    if (const auto out = args.value("out")) {
        const std::vector<std::int64_t> shape{static_cast<std::int64_t>(scores.size())};
        npy::write(*out, dtype::f32, shape, scores.data());
    }
    std::vector<std::size_t> order(scores.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
    if (args.flag("json")) {
        json::object report;
        report["model"] = folder;
        report["placement"] = placement_json();
        json::array score_list;
        for (const float s : scores)
            score_list.push_back(json_number(s));
        report["scores"] = json::value(std::move(score_list));
        json::array ranking;
        for (const auto i : order)
            ranking.emplace_back(static_cast<std::int64_t>(i));
        report["ranking"] = json::value(std::move(ranking));
        std::printf("%s\n", json::dump(json::value(std::move(report))).c_str());
        return 0;
    }
    for (const auto i : order) {
        const std::string what = query ? passages[i] : detail_text::id_list_text(ids[i]);
        std::printf("%10.6f  %s\n", static_cast<double>(scores[i]), what.c_str());
    }
    return 0;
}

inline int run_tokenize(const std::vector<std::string_view>& argv) {
    const arguments args(
        "tokenize", argv,
        {{"model", true}, {"pair", true}, {"no-special", false}, {"json", false}, {"help", false}});
    if (args.flag("help")) {
        std::fputs(tokenize_usage, stdout);
        return 0;
    }
    const std::string folder = model_folder(args, "tokenize");
    if (args.positional().empty()) throw usage_error("tokenize: give at least one TEXT");
    const auto text_tokenizer = tokenizer::load(folder);
    anvil::encode_options options;
    options.add_special_tokens = !args.flag("no-special");
    const auto pair = args.value("pair");
    json::array results;
    for (const auto& text : args.positional()) {
        const encoding e =
            pair ? text_tokenizer.encode_pair(text, *pair, options) : text_tokenizer.encode(text, options);
        if (!args.flag("json")) {
            std::printf("%s\n", detail_text::id_list_text(e.ids).c_str());
            continue;
        }
        json::object item;
        item["text"] = text;
        item["ids"] = detail_text::json_ints(e.ids);
        item["type_ids"] = detail_text::json_ints(e.type_ids);
        json::array tokens;
        for (const auto id : e.ids)
            tokens.emplace_back(text_tokenizer.id_to_token(id));
        item["tokens"] = json::value(std::move(tokens));
        results.emplace_back(std::move(item));
    }
    if (args.flag("json")) std::printf("%s\n", json::dump(json::value(std::move(results))).c_str());
    return 0;
}

}  // namespace anvil::cli
