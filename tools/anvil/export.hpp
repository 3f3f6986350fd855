// `anvil export`: a Hugging Face model folder as a Core ML package (.mlpackage) an iOS or macOS app adds in
// Xcode, with no Python and no coremltools. The recipe builds its graph at one fixed shape (a sentence
// encoder at --sequence-length tokens, pooled and normalised in the graph; an image classifier at its image
// size), and export_mlpackage writes it (backend/coreml/export.hpp); the metadata Xcode shows comes from the
// folder's model card and config.json.
#pragma once

#include "arguments.hpp"
#include "lm_commands.hpp"
#include "model_commands.hpp"

#include <anvil/anvil.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace anvil::cli {

inline constexpr const char* export_usage =
    "usage: anvil export --model DIR --format mlpackage --out X.mlpackage [--sequence-length N]\n"
    "                    [--context T[,T2...]] [--prefill P] [--image-size HxW] [--tower text|image]\n"
    "                    [--ios18] [--rescale-fp16 (--calibrate-ids LIST | --calibrate-text TEXT)]\n"
    "                    [--compress int8|lut4|lut4g32|lut6] [--description TEXT]\n"
    "                    [--author TEXT] [--license TEXT] [--adapter DIR] [--json]\n"
    "\n"
    "Writes the model as a Core ML package an app adds in Xcode (no Python, no coremltools). A sentence\n"
    "encoder (BERT, RoBERTa, XLM-R, MPNet, DistilBERT) takes int32 input_ids and an fp16 attention_mask\n"
    "(1 for a token, 0 for padding on the right), each [1, N] (N: --sequence-length, default the smaller of\n"
    "128 and the model's limit), and returns its sentence embedding [1, D], pooled and normalised as the\n"
    "folder says. An image classifier (ResNet, ViT, DeiT) takes fp16 pixels\n"
    "[1, 3, H, W], preprocessed as the folder's preprocessor_config.json says, and returns logits\n"
    "[1, classes]; a ResNet at --image-size (default 224x224), a ViT at its config's size. A cross-encoder\n"
    "(...ForSequenceClassification) takes its pair's input_ids, token_type_ids (where the model has them)\n"
    "and attention_mask, [1, N], and returns the logits [1, labels].\n"
    "A decoder LM (...ForCausalLM, GPT-2) keeps its KV caches as states (MLState, macOS 15 / iOS 18):\n"
    "each prediction takes N new tokens (--sequence-length, default 1) as int32 ids and positions [1,\n"
    "N], an fp16 additive mask [1, 1, N, T + N] over the T cache slots (--context, default the smaller\n"
    "of 512 and the model's limit) then the new tokens (0 where a token sees a slot, -1e4 where not: not\n"
    "-65504, which overflows to -inf once added to a score below -16), and an fp16 cache_write [1, 1, T,\n"
    "N] (1 at slot t, token n: where token n's keys go), and returns logits [1, N, vocab]; the caches\n"
    "k<i>/v<i> stay in the state. --prefill P adds a function `prefill` taking P tokens per prediction\n"
    "beside `decode` (the default, N tokens): one package, the weights stored once, one MLState for both\n"
    "(MLModelConfiguration.functionName picks the function). --context T1,T2,... (increasing) is a\n"
    "ladder: functions decode_<T> (and prefill_<T>) per cache length, the weights stored once, the default\n"
    "decode at the longest. A short context attends over fewer slots; when a conversation outgrows its\n"
    "rung, make a state from the next rung's function and copy each k<i>/v<i> [1, kv_heads, T, head_dim]\n"
    "buffer's T slots of every head into it (getMultiArrayForStateNamed:handler:); slots past the old T\n"
    "stay zero and masked. The package needs macOS 13 / iOS 16\n"
    "(--ios18, and every decoder LM: macOS 15 / iOS 18). Author, licence and description come from the\n"
    "model card (README.md) and config.json unless given.\n"
    "--compress stores the weights of every linear and convolution (256 elements or more; a tied\n"
    "embedding stays fp16) compressed, and Core ML decompresses them when it loads the model: int8, one\n"
    "scale per output channel (constexpr_affine_dequantize; with --ios18 constexpr_blockwise_shift_scale);\n"
    "lut4 and lut6, a palette of 16 or 64 values per tensor found by k-means (constexpr_lut_to_dense);\n"
    "lut4g32, a 16-value palette per group of 32 output channels (needs --ios18).\n"
    "--rescale-fp16 (decoder LMs) calibrates on --calibrate-ids LIST or --calibrate-text TEXT and stores\n"
    "the weights with a power of two per layer and pair of projections folded in, so fp16 activations stay\n"
    "under 2^14 (anvil.fp16_rescale in the metadata says which; the report goes to stderr, or --json).\n"
    "CLIP (CLIPModel) gives two functions, `image` (the default) and `text` (macOS 15 / iOS 18), or one\n"
    "with --tower: `image` takes fp16 pixels [1, 3, S, S] (preprocessed as the metadata says) and returns\n"
    "image_embeds [1, D]; `text` takes int32 input_ids [1, N] (N: --sequence-length, default the model's\n"
    "max_position_embeddings; any id after the EOS) and fp16 pooled [1, N] (1 at the first EOS, 0\n"
    "elsewhere) and returns text_embeds [1, D]. Both are L2-normalised, so logits_per_image is\n"
    "exp(anvil.logit_scale) times their dot product.\n"
    "Whisper (WhisperForConditionalGeneration; macOS 15 / iOS 18) gives two functions. `encoder` takes\n"
    "fp16 input_features [1, n_mels, 3000] (one 30 s window's log-mel) and returns each decoder layer's\n"
    "cross-attention keys and values xk<i>, xv<i> [1, heads, 1500, head_dim]. `decoder` (the default)\n"
    "takes one token: int32 ids and positions [1, 1], an fp16 additive mask [1, 1, 1, T + 1] over the T\n"
    "cache slots (--context, default max_target_positions) then the token, and cache_write [1, 1, T, 1];\n"
    "it returns logits [1, 1, vocab]. Its states are the caches k<i>/v<i>, which each step updates, and\n"
    "xk<i>/xv<i>, which it only reads: copy the encoder's outputs into them once per window\n"
    "(getMultiArrayForStateNamed:handler:). The metadata holds the start, end, no-timestamps, language\n"
    "and task ids and the suppressed tokens generation needs.\n"
    "--adapter DIR writes the model with a PEFT LoRA adapter applied (W + lora_alpha / r B A merged into\n"
    "the weights, its modules_to_save in place of the base's), as `anvil embed/rerank/classify --adapter`\n"
    "run it.\n";

namespace export_detail {

// The YAML front matter of a Hugging Face model card: `key: value` lines between two `---` lines.
inline std::string card_field(const std::string& card, std::string_view key) {
    std::istringstream lines(card);
    std::string line;
    if (!std::getline(lines, line) || line.rfind("---", 0) != 0) return {};
    while (std::getline(lines, line) && line.rfind("---", 0) != 0) {
        if (line.rfind(std::string(key) + ":", 0) != 0) continue;
        std::string value = line.substr(key.size() + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '"' || value.front() == '\''))
            value.erase(value.begin());
        while (!value.empty() &&
               (value.back() == ' ' || value.back() == '"' || value.back() == '\'' || value.back() == '\r'))
            value.pop_back();
        return value;
    }
    return {};
}

// The model card's first paragraph of prose (after the front matter, headings and badges skipped).
inline std::string card_summary(const std::string& card) {
    std::istringstream lines(card);
    std::string line, paragraph;
    bool front = false, first = true;
    while (std::getline(lines, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (first && line.rfind("---", 0) == 0) {
            front = true;
            first = false;
            continue;
        }
        first = false;
        if (front) {
            if (line.rfind("---", 0) == 0) front = false;
            continue;
        }
        const bool prose = !line.empty() && line[0] != '#' && line[0] != '!' && line[0] != '<' &&
                           line[0] != '`' && line[0] != '|' && line[0] != '[';
        if (prose) {
            paragraph += (paragraph.empty() ? "" : " ") + line;
        } else if (!paragraph.empty()) {
            break;
        }
    }
    if (paragraph.size() > 400) paragraph = paragraph.substr(0, 397) + "...";
    return paragraph;
}

inline std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// `text` as an integer in [1, 2^20], or 0 when it is not one.
inline std::int64_t positive_value(const std::string& text) {
    char* end = nullptr;
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end != text.c_str() + text.size() || value < 1 || value > 1 << 20) return 0;
    return value;
}

inline std::int64_t positive(const arguments& args, const char* name, std::int64_t fallback) {
    const auto text = args.value(name);
    if (!text) return fallback;
    const std::int64_t value = positive_value(*text);
    if (value == 0)
        throw usage_error(
            detail::message("export: --", name, " must be a positive integer, got '", *text, "'"));
    return value;
}

// --context T or a ladder T1,T2,... (increasing): the cache lengths of the package's functions.
inline std::vector<std::int64_t> contexts(const arguments& args, std::int64_t fallback) {
    const auto text = args.value("context");
    if (!text) return {fallback};
    std::vector<std::int64_t> rungs;
    std::size_t at = 0;
    while (true) {
        const std::size_t comma = std::min(text->find(',', at), text->size());
        const std::int64_t value = positive_value(text->substr(at, comma - at));
        if (value == 0 || (!rungs.empty() && value <= rungs.back())) {
            throw usage_error(detail::message(
                "export: --context must be a positive integer or an increasing list (256,512,1024), got '",
                *text, "'"));
        }
        rungs.push_back(value);
        if (comma == text->size()) break;
        at = comma + 1;
    }
    return rungs;
}

inline image_size parse_size(const arguments& args) {
    const auto text = args.value("image-size");
    if (!text) return {224, 224};
    const std::size_t x = text->find('x');
    char* end = nullptr;
    const long long h = std::strtoll(text->c_str(), &end, 10);
    const bool h_ok = x != std::string::npos && end == text->c_str() + x;
    const long long w = h_ok ? std::strtoll(text->c_str() + x + 1, &end, 10) : 0;
    if (!h_ok || end != text->c_str() + text->size() || h < 1 || w < 1 || h > 8192 || w > 8192)
        throw usage_error(detail::message("export: --image-size must be HxW (224x224), got '", *text, "'"));
    return {h, w};
}

// What an app applies to an image before the model reads it, for the metadata.
inline std::string preprocessing_text(const image_preprocessing& pre) {
    const std::string resize =
        pre.cover_height > 0
            ? detail::message("resize to cover ", pre.cover_height, "x", pre.cover_width, ", aspect kept")
            : detail::message("resize shortest edge ", pre.resize_shortest_edge, " (or ", pre.resize_height,
                              "x", pre.resize_width, ")");
    return detail::message(resize, ", crop ", pre.crop_height, "x", pre.crop_width, ", mean ", pre.mean[0],
                           ",", pre.mean[1], ",", pre.mean[2], ", std ", pre.std[0], ",", pre.std[1], ",",
                           pre.std[2]);
}

// Token ids as "1,2,3" for the metadata.
inline std::string id_list(std::span<const std::int32_t> ids) {
    std::string text;
    for (const std::int32_t id : ids)
        text += detail::message(text.empty() ? "" : ",", id);
    return text;
}

}  // namespace export_detail

inline int run_export(const std::vector<std::string_view>& argv) {
    std::vector<option_spec> spec{
        {"model", true},    {"format", true},      {"out", true},        {"sequence-length", true},
        {"context", true},  {"prefill", true},     {"image-size", true}, {"tower", true},
        {"ios18", false},   {"description", true}, {"author", true},     {"license", true},
        {"compress", true}, {"json", false},       {"help", false},      {"adapter", true}};
    detail_lm::add_rescale_options(spec);
    const arguments args("export", argv, spec);
    if (args.flag("help")) {
        std::fputs(export_usage, stdout);
        return 0;
    }
    // An export has no ids of its own: the calibration must be named.
    const auto rescale = detail_lm::calibration(args, "export", {}, std::nullopt);
    if (rescale && rescale->ids.empty() && rescale->text.empty())
        throw usage_error("export: --rescale-fp16 needs --calibrate-ids LIST or --calibrate-text TEXT");
    const std::filesystem::path folder = model_folder(args, "export");
    const std::string format = args.value("format").value_or("mlpackage");
    if (format != "mlpackage")
        throw usage_error(detail::message("export: --format must be mlpackage, got '", format, "'"));
    const auto out = args.value("out");
    if (!out) throw usage_error("export: --out X.mlpackage is required");
    if (std::filesystem::path(*out).extension() != ".mlpackage")
        throw usage_error(detail::message("export: --out must end in .mlpackage, got '", *out, "'"));
    weight_compression compression = weight_compression::none;
    if (const auto text = args.value("compress")) {
        const auto parsed = parse_weight_compression(*text);
        if (!parsed || *parsed == weight_compression::none)
            throw usage_error(
                detail::message("export: --compress must be int8, lut4, lut4g32 or lut6, got '", *text, "'"));
        compression = *parsed;
    }
    if (!std::filesystem::is_directory(folder))
        throw io_error(detail::message("export: '", folder.string(), "' is not a model folder"));

    // What the folder is.
    std::string model_type, architecture, name_or_path;
    bool has_config = std::filesystem::exists(folder / "config.json");
    if (has_config) {
        const json::value config = models::config_reader::read_file(folder / "config.json");
        const models::config_reader reader(config, (folder / "config.json").string());
        model_type = reader.string("model_type", "");
        name_or_path = reader.string("_name_or_path", "");
        if (const json::value* list = reader.find("architectures"); list != nullptr && list->is_array() &&
                                                                    !list->as_array().empty() &&
                                                                    list->as_array()[0].is_string())
            architecture = list->as_array()[0].as_string();
        if (architecture.empty()) architecture = reader.string("architecture", "");
    }
    const auto ends_with = [&](std::string_view suffix) {
        return architecture.size() >= suffix.size() &&
               architecture.compare(architecture.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const bool decoder = ends_with("ForCausalLM") || ends_with("LMHeadModel");
    const bool cross = ends_with("ForSequenceClassification") && model_type != "vit" && model_type != "deit";
    const bool image = !has_config || model_type == "vit" || model_type == "deit" || model_type == "resnet" ||
                       models::recipe_detail::is_timm_resnet(architecture);
    if (rescale && !decoder)
        throw usage_error(detail::message("export: --rescale-fp16 is for decoder LMs, not ",
                                          architecture.empty() ? folder.string() : architecture));
    std::optional<models::fp16_rescale_report> rescaled;

    mlpackage_options options;
    options.ios18 = args.flag("ios18");
    options.weights = compression;
    graph g;
    std::vector<value> outputs;
    std::vector<mlpackage_function> functions;  // a multi-function package (--prefill, a context ladder)
    std::string kind;
    models::load_options load;
    load.compile.target = device::cpu;  // nothing is compiled; the weights are read and checked
    if (const auto adapter = args.value("adapter")) load.adapter = *adapter;
    const auto tower = args.value("tower");
    if (tower && model_type != "clip")
        throw usage_error("export: --tower is for CLIP folders (model_type clip)");
    if (tower && *tower != "text" && *tower != "image")
        throw usage_error(detail::message("export: --tower must be text or image, got '", *tower, "'"));
    if (model_type == "whisper") {
        const auto speech = models::whisper::load(folder, load);
        const models::whisper_config& c = speech.config();
        const std::int64_t context = export_detail::positive(args, "context", c.max_target_positions);
        if (context > c.max_target_positions) {
            throw usage_error(detail::message("export: --context ", context, " is more than the model's ",
                                              c.max_target_positions, " decoder positions"));
        }
        functions = {speech.export_encoder_function(), speech.export_decoder_function(context)};
        options.default_function = "decoder";
        options.ios18 = true;  // the decoder's states, and two functions
        kind = detail::message("whisper speech-to-text, ", c.mel_bins, " mel bins, ", context,
                               " decoder cache slots; functions encoder and decoder");
        options.user_defined.emplace_back("anvil.context", std::to_string(context));
        options.user_defined.emplace_back("anvil.decoder_start_token_id",
                                          std::to_string(c.decoder_start_token_id));
        options.user_defined.emplace_back("anvil.eos_token_id", std::to_string(c.eos_token_id));
        if (c.no_timestamps_token_id)
            options.user_defined.emplace_back("anvil.no_timestamps_token_id",
                                              std::to_string(*c.no_timestamps_token_id));
        options.user_defined.emplace_back("anvil.suppress_tokens", export_detail::id_list(c.suppress_tokens));
        options.user_defined.emplace_back("anvil.begin_suppress_tokens",
                                          export_detail::id_list(c.begin_suppress_tokens));
        std::string languages, tasks;
        for (const auto& [name, id] : c.language_ids)
            languages += detail::message(languages.empty() ? "" : ",", name, "=", id);
        for (const auto& [name, id] : c.task_ids)
            tasks += detail::message(tasks.empty() ? "" : ",", name, "=", id);
        if (!languages.empty()) options.user_defined.emplace_back("anvil.languages", languages);
        if (!tasks.empty()) options.user_defined.emplace_back("anvil.tasks", tasks);
    } else if (model_type == "clip") {
        const auto pair = models::clip::load(folder, load);
        const models::clip_config& c = pair.config();
        const std::int64_t length = export_detail::positive(args, "sequence-length", c.text.max_positions);
        if (length > c.text.max_positions) {
            throw usage_error(detail::message("export: --sequence-length ", length,
                                              " is more than the model's ", c.text.max_positions, " tokens"));
        }
        std::vector<mlpackage_function> towers;
        if (!tower || *tower == "image") towers.push_back(pair.export_image_function());
        if (!tower || *tower == "text") towers.push_back(pair.export_text_function(length));
        if (towers.size() == 1) {
            outputs = towers.front().outputs;
            options.output_names = towers.front().output_names;
        } else {
            functions = std::move(towers);
            options.default_function = "image";
            options.ios18 = true;  // two functions
        }
        kind = detail::message("clip, ", tower ? *tower + " tower" : std::string("image and text towers"),
                               ", ", c.projection_dim, " dimensions");
        options.user_defined.emplace_back("anvil.logit_scale", detail::message(pair.logit_scale()));
        if (!tower || *tower == "image")
            options.user_defined.emplace_back("anvil.preprocessing",
                                              export_detail::preprocessing_text(pair.preprocessing()));
        if (!tower || *tower == "text") {
            options.user_defined.emplace_back("anvil.sequence_length", std::to_string(length));
            options.user_defined.emplace_back("anvil.eos_token_id", std::to_string(c.text.eos_token_id));
            options.user_defined.emplace_back(
                "anvil.pooled", c.text.legacy_pooling() ? "1 at the first largest id (a legacy config)"
                                                        : "1 at the first eos_token_id");
        }
    } else if (decoder) {
        models::causal_lm_options lm_options;
        lm_options.load = load;
        lm_options.fp16_rescale = rescale;
        const auto lm = models::causal_lm::load(folder, lm_options);
        const models::decoder_config& c = lm.config();
        rescaled = lm.fp16_rescale();
        if (rescaled) {  // what the package's weights carry, in its metadata
            std::string shifts;
            for (const models::fp16_pair_scale& pair : rescaled->pairs) {
                if (pair.shift == 0) continue;
                shifts += detail::message(shifts.empty() ? "" : ", ", pair.producer, " x 2^-", pair.shift,
                                          " / ", pair.consumer, " x 2^", pair.shift);
            }
            options.user_defined.emplace_back("anvil.fp16_rescale", shifts.empty() ? "none needed" : shifts);
        }
        const std::vector<std::int64_t> rungs =
            export_detail::contexts(args, std::min<std::int64_t>(512, c.max_position_embeddings));
        const std::int64_t shortest = rungs.front(), longest = rungs.back();
        if (longest > c.max_position_embeddings) {
            throw usage_error(detail::message("export: --context ", longest, " is more than the model's ",
                                              c.max_position_embeddings, " positions"));
        }
        const std::int64_t tokens = export_detail::positive(args, "sequence-length", 1);
        if (tokens > shortest)
            throw usage_error(
                detail::message("export: --sequence-length ", tokens, " is more than --context ", shortest));
        const std::int64_t prefill = args.value("prefill") ? export_detail::positive(args, "prefill", 1) : 0;
        if (prefill > shortest)
            throw usage_error(
                detail::message("export: --prefill ", prefill, " is more than --context ", shortest));
        if (prefill == tokens)
            throw usage_error(detail::message("export: --prefill ", prefill,
                                              " is the decode function's token count (--sequence-length)"));
        options.ios18 = true;  // states are spec 9
        kind = detail::message(c.model_type, " decoder LM, ", tokens, " token(s) per prediction, ", longest,
                               " cache slots in ", 2 * c.layers, " states");
        std::string context_list;
        for (const std::int64_t rung : rungs)
            context_list += detail::message(context_list.empty() ? "" : ",", rung);
        if (rungs.size() > 1 || prefill > 0) {
            // Each function: the stateful step at its token count and cache length in a graph of its own, the
            // caches as states; a ladder names them by their cache length. The writer stores each weight
            // once.
            for (const std::int64_t rung : rungs) {
                const std::string suffix = rungs.size() > 1 ? detail::message("_", rung) : std::string();
                if (prefill > 0) functions.push_back(lm.export_function("prefill" + suffix, prefill, rung));
                functions.push_back(lm.export_function("decode" + suffix, tokens, rung));
            }
            options.default_function = functions.back().name;  // decode at the longest context
            if (prefill > 0) options.user_defined.emplace_back("anvil.prefill", std::to_string(prefill));
            kind += detail::message(
                "; functions ", prefill > 0 ? "prefill (" + std::to_string(prefill) + " tokens) and " : "",
                "decode", rungs.size() > 1 ? " at contexts " + context_list : "");
        } else {
            mlpackage_function only = lm.export_function("main", tokens, longest);
            outputs = only.outputs;
            options.output_names = only.output_names;
            options.states = only.states;
        }

        options.user_defined.emplace_back("anvil.sequence_length", std::to_string(tokens));
        options.user_defined.emplace_back("anvil.context", context_list);
    } else if (image) {
        const auto classifier = models::image_classifier::load(folder, load);
        const image_size size =
            classifier.architecture() == "resnet" ? export_detail::parse_size(args) : classifier.input_size();
        outputs = classifier.build_graph(g, size);
        options.output_names = {"logits"};
        kind = detail::message(classifier.architecture(), " image classifier, ", classifier.labels().size(),
                               " classes, ", size.height, "x", size.width, " pixels");
        options.user_defined.emplace_back("anvil.preprocessing",
                                          export_detail::preprocessing_text(classifier.preprocessing()));
        std::string labels;
        for (const auto& label : classifier.labels())
            labels += (labels.empty() ? "" : "\n") + label;
        options.user_defined.emplace_back("anvil.labels", labels);
    } else if (cross) {
        const auto scorer = models::cross_encoder::load(folder, load);
        const std::int64_t limit = scorer.encoder().max_tokens();
        const std::int64_t length =
            export_detail::positive(args, "sequence-length", std::min<std::int64_t>(128, limit));
        if (length > limit) {
            throw usage_error(detail::message("export: --sequence-length ", length,
                                              " is more than the model's ", limit, " tokens"));
        }
        outputs = {scorer.build_graph(g, length)};
        options.output_names = {"logits"};
        kind = detail::message(model_type, " cross-encoder, ", length, " tokens, ", scorer.labels().size(),
                               " labels");
        options.user_defined.emplace_back("anvil.sequence_length", std::to_string(length));
        std::string labels;
        for (const auto& label : scorer.labels())
            labels += (labels.empty() ? "" : "\n") + label;
        options.user_defined.emplace_back("anvil.labels", labels);
    } else {
        const auto encoder = models::sentence_encoder::load(folder, load);
        const std::int64_t length = export_detail::positive(
            args, "sequence-length", std::min<std::int64_t>(128, encoder.encoder().max_tokens()));
        if (length > encoder.encoder().max_tokens()) {
            throw usage_error(detail::message("export: --sequence-length ", length,
                                              " is more than the model's ", encoder.encoder().max_tokens(),
                                              " tokens"));
        }
        outputs = {encoder.build_graph(g, length)};
        options.output_names = {"embedding"};
        kind = detail::message(model_type, " sentence encoder, ", length, " tokens, ", encoder.dimension(),
                               " dimensions");
        options.user_defined.emplace_back("anvil.sequence_length", std::to_string(length));
    }

    if (compression == weight_compression::lut4g32 && !options.ios18)
        throw usage_error(
            "export: --compress lut4g32 needs --ios18 (a palette per group of channels is Core ML spec 9, "
            "macOS 15 / iOS 18)");
    if (compression != weight_compression::none)
        options.user_defined.emplace_back("anvil.compression",
                                          std::string(weight_compression_name(compression)));

    // Metadata: the command line, else the model card, else config.json.
    const std::string card =
        std::filesystem::exists(folder / "README.md") ? export_detail::read_text(folder / "README.md") : "";
    options.license = args.value("license").value_or(export_detail::card_field(card, "license"));
    std::string author = name_or_path.find('/') != std::string::npos
                             ? name_or_path.substr(0, name_or_path.find('/'))
                             : std::string();
    options.author = args.value("author").value_or(author);
    std::string summary = export_detail::card_summary(card);
    if (summary.empty())
        summary = detail::message(architecture.empty() ? model_type : architecture, " (", kind, ")");
    options.description = args.value("description").value_or(summary);
    options.version = version_string;
    options.user_defined.emplace_back("anvil.model", kind);
    if (!name_or_path.empty()) options.user_defined.emplace_back("anvil.source", name_or_path);

    const mlpackage_summary written = functions.empty() ? export_mlpackage(outputs, *out, options)
                                                        : export_mlpackage(functions, *out, options);
    const auto port_text = [](const mlpackage_port& p) {
        std::string shape;
        for (const std::int64_t d : p.shape)
            shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        return detail::message(p.name, " ", p.dtype, " [", shape, "]");
    };
    for (const auto& warning : written.warnings)
        std::fprintf(stderr, "anvil: warning: %s\n", warning.c_str());
    if (args.flag("json")) {
        json::object document;
        document["package"] = json::value(*out);
        document["model"] = json::value(kind);
        const auto ports = [](const std::vector<mlpackage_port>& list) {
            json::array items;
            for (const auto& p : list) {
                json::object item;
                item["name"] = json::value(p.name);
                item["dtype"] = json::value(p.dtype);
                json::array shape;
                for (const std::int64_t d : p.shape)
                    shape.emplace_back(d);
                item["shape"] = json::value(std::move(shape));
                items.emplace_back(std::move(item));
            }
            return json::value(std::move(items));
        };
        document["inputs"] = ports(written.inputs);
        document["outputs"] = ports(written.outputs);
        document["states"] = ports(written.states);
        json::array listed;
        for (const auto& f : written.functions) {
            json::object item;
            item["name"] = json::value(f.name);
            item["inputs"] = ports(f.inputs);
            item["outputs"] = ports(f.outputs);
            item["states"] = ports(f.states);
            listed.emplace_back(std::move(item));
        }
        document["functions"] = json::value(std::move(listed));
        document["operations"] = json::value(static_cast<std::int64_t>(written.operations));
        document["weight_bytes"] = json::value(static_cast<std::int64_t>(written.weight_bytes));
        document["compression"] = json::value(std::string(weight_compression_name(compression)));
        if (rescaled) document["fp16_rescale"] = detail_lm::json_rescale(*rescaled);
        document["digest"] = json::value(written.digest);
        document["author"] = json::value(options.author);
        document["license"] = json::value(options.license);
        document["description"] = json::value(options.description);
        std::printf("%s\n", json::dump(json::value(std::move(document)), 2).c_str());
        return 0;
    }
    if (rescaled) std::fputs(rescaled->to_string().c_str(), stderr);
    std::printf("wrote %s (%s)\n", out->c_str(), kind.c_str());
    for (const auto& f : written.functions) {
        if (written.functions.size() > 1) std::printf("  function %s\n", f.name.c_str());
        for (const auto& p : f.inputs)
            std::printf("  input  %s\n", port_text(p).c_str());
        for (const auto& p : f.outputs)
            std::printf("  output %s\n", port_text(p).c_str());
        const bool alike = std::all_of(f.states.begin(), f.states.end(), [&](const mlpackage_port& p) {
            return p.shape == f.states.front().shape;
        });
        if (!f.states.empty() && alike) {
            std::printf("  %zu states (MLState), each %s\n", f.states.size(),
                        port_text(f.states.front()).c_str());
        } else {
            for (const auto& p : f.states)
                std::printf("  state  %s\n", port_text(p).c_str());
        }
    }
    std::printf("  %zu MIL ops, %zu weight bytes\n", written.operations, written.weight_bytes);
    return 0;
}

}  // namespace anvil::cli
