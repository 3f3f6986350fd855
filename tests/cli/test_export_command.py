#!/usr/bin/env python3
"""Drives `anvil export` on the committed random-weight fixtures: a sentence encoder of each family, a ResNet
and a ViT become .mlpackage folders, each checked by tests/coreml/check_mlpackage.py (protoc against the
schema subset from COREML.md's field numbers, the weight file's records, the manifest); the interface the
JSON summary reports (names, dtypes, shapes); the metadata taken from a model card; the same model giving the
same bytes twice; ViT-B/16- and CLIP ViT-B/16-shaped folders (16 x 16 patch convs); decoder LMs with their KV
caches as states (llama, GPT-2, Qwen3), protoc-checked with the states' descriptions; CLIP's two towers (two
functions, or one with --tower) and Whisper's encoder and stateful decoder; --compress (constexpr ops, the weight file shrunk); --rescale-fp16 (the shifts in the report and the
metadata); and the refusals (a wrong
--compress, a wrong --out, a context past the model's positions), each
one line with exit status 1 or 2. The packages' numbers are tests/test_coreml_export.cpp's (run through the simulator's Core ML).

usage: test_export_command.py PATH_TO_ANVIL
Exits 77 (skipped) when protoc is missing, as check_mlpackage.py does.
"""
import json
import re
import pathlib
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cli_support  # noqa: E402
from cli_support import DATA, anvil, check, check_error, failures  # noqa: E402

cli_support.ANVIL = sys.argv[1]
CHECKER = pathlib.Path(__file__).resolve().parent.parent / "coreml" / "check_mlpackage.py"


def export(folder, out, *extra):
    result = anvil("export", "--model", folder, "--format", "mlpackage", "--out", out, "--json", *extra)
    check(result.returncode == 0, f"export {folder.name}: exit 0 ({result.stderr.strip()[-300:]})")
    return json.loads(result.stdout) if result.returncode == 0 else {"inputs": [], "outputs": []}


def protoc_check(package) -> None:
    result = subprocess.run([sys.executable, CHECKER, package], capture_output=True, text=True, timeout=120)
    check(result.returncode == 0, f"{package.name}: check_mlpackage.py accepts it ({result.stderr.strip()})")


def ports(report, key):
    return [(p["name"], p["dtype"], p["shape"]) for p in report[key]]


def main() -> int:
    if shutil.which("protoc") is None:
        print("cli.export: protoc is not installed (Debian: protobuf-compiler); skipped", file=sys.stderr)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        text = DATA / "text_encoders"
        for name, dim in (("bert_sentence", 36), ("roberta_sentence", 36), ("mpnet_sentence", 36),
                          ("distilbert_sentence", 36)):
            config = json.loads((text / name / "config.json").read_text())
            dim = config.get("hidden_size", config.get("dim", dim))
            package = tmp / f"{name}.mlpackage"
            report = export(text / name, package, "--sequence-length", "16")
            check(ports(report, "inputs") == [("input_ids", "int32", [1, 16]), ("attention_mask", "fp16", [1, 16])],
                  f"export {name}: inputs input_ids int32 and attention_mask fp16, [1, 16] ({report['inputs']})")
            check(ports(report, "outputs") == [("embedding", "fp16", [1, dim])],
                  f"export {name}: output embedding [1, {dim}] ({report['outputs']})")
            protoc_check(package)

        cross = tmp / "bert_cross.mlpackage"
        report = export(text / "bert_cross", cross, "--sequence-length", "24")
        labels = len(json.loads((text / "bert_cross" / "config.json").read_text()).get("id2label", {"0": ""}))
        check(ports(report, "inputs") == [("input_ids", "int32", [1, 24]), ("token_type_ids", "int32", [1, 24]),
                                          ("attention_mask", "fp16", [1, 24])]
              and ports(report, "outputs") == [("logits", "fp16", [1, labels])],
              f"export bert_cross: input_ids, token_type_ids, attention_mask -> logits [1, {labels}] ({report})")
        protoc_check(cross)

        resnet = tmp / "resnet.mlpackage"
        report = export(DATA / "resnet" / "hf_basic", resnet, "--image-size", "32x48")
        classes = len(json.loads((DATA / "resnet" / "hf_basic" / "config.json").read_text())["id2label"])
        check(ports(report, "inputs") == [("pixels", "fp16", [1, 3, 32, 48])]
              and ports(report, "outputs") == [("logits", "fp16", [1, classes])],
              f"export resnet: pixels [1, 3, 32, 48] -> logits [1, {classes}] ({report})")
        protoc_check(resnet)
        vit = tmp / "vit.mlpackage"
        report = export(DATA / "vit" / "vit", vit, "--ios18")
        protoc_check(vit)
        spec = (vit / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes()
        check(spec[:2] == b"\x08\x09", "export --ios18: specification version 9")

        # Shaped like google/vit-base-patch16-224 and CLIP ViT-B/16: 224 x 224 images in 16 x 16 patches, a conv
        # with kernel = stride = 16 that a kernel-size rule once refused; written whole.
        report = export(DATA / "vit" / "vit_b16", tmp / "vit_b16.mlpackage")
        check(ports(report, "inputs") == [("pixels", "fp16", [1, 3, 224, 224])]
              and ports(report, "outputs") == [("logits", "fp16", [1, 7])],
              f"export vit_b16: pixels [1, 3, 224, 224] -> logits [1, 7] ({report})")
        protoc_check(tmp / "vit_b16.mlpackage")
        report = export(DATA / "clip" / "clip_b16", tmp / "clip_b16.mlpackage")
        functions = {f["name"]: f for f in report.get("functions", [])}
        check(sorted(functions) == ["image", "text"]
              and ports(functions["image"], "inputs") == [("pixels", "fp16", [1, 3, 224, 224])],
              f"export clip_b16: an image function taking pixels [1, 3, 224, 224], and a text one ({report})")
        protoc_check(tmp / "clip_b16.mlpackage")

        # Metadata from a model card; the same model twice gives the same bytes.
        card = tmp / "carded"
        shutil.copytree(text / "bert_sentence", card)
        (card / "README.md").write_text("---\nlicense: apache-2.0\ntags:\n- sentence-transformers\n---\n\n"
                                        "# A tiny encoder\n\nMaps sentences to a 36 dimensional space.\n")
        config = json.loads((card / "config.json").read_text())
        config["_name_or_path"] = "example-org/tiny-encoder"
        (card / "config.json").write_text(json.dumps(config))
        first = export(card, tmp / "a.mlpackage")
        second = export(card, tmp / "b.mlpackage")
        check(first.get("license") == "apache-2.0" and first.get("author") == "example-org"
              and first.get("description") == "Maps sentences to a 36 dimensional space.",
              f"export: licence, author and description from the model card and config.json ({first})")
        model = (tmp / "a.mlpackage" / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes()
        check(b"apache-2.0" in model and b"example-org" in model, "export: the metadata is in model.mlmodel")
        check(first.get("digest") == second.get("digest") and model ==
              (tmp / "b.mlpackage" / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes(),
              "export: the same folder gives the same package")
        given = export(card, tmp / "c.mlpackage", "--license", "mit", "--author", "Someone")
        check(given.get("license") == "mit" and given.get("author") == "Someone", "export: --license, --author")

        # Decoder LMs: the KV caches become states (spec 9), the app passes the new tokens only.
        for name, tokens, context in (("llama", 1, 32), ("gpt2", 4, 16), ("qwen3", 2, 24)):
            config = json.loads((DATA / "decoder_lms" / name / "config.json").read_text())
            vocab = config["vocab_size"]
            layers = config.get("num_hidden_layers", config.get("n_layer"))
            heads = config.get("num_attention_heads", config.get("n_head"))
            hidden = config.get("hidden_size", config.get("n_embd"))
            kv = config.get("num_key_value_heads", heads)
            head_dim = config.get("head_dim", hidden // heads)
            package = tmp / f"{name}.mlpackage"
            report = export(DATA / "decoder_lms" / name, package, "--sequence-length", str(tokens),
                            "--context", str(context))
            check(ports(report, "inputs") == [("ids", "int32", [1, tokens]), ("positions", "int32", [1, tokens]),
                                              ("mask", "fp16", [1, 1, tokens, context + tokens]),
                                              ("cache_write", "fp16", [1, 1, context, tokens])],
                  f"export {name}: ids, positions, mask, cache_write ({report['inputs']})")
            check(ports(report, "outputs") == [("logits", "fp16", [1, tokens, vocab])],
                  f"export {name}: logits [1, {tokens}, {vocab}] ({report['outputs']})")
            want = [(f"{kind}{i}", "fp16", [1, kv, context, head_dim]) for i in range(layers) for kind in "kv"]
            check(sorted(ports(report, "states")) == sorted(want), f"export {name}: states {want} ({report['states']})")
            protoc_check(package)
            spec = (package / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes()
            check(spec[:2] == b"\x08\x09", f"export {name}: a stateful model is specification version 9")
        # --prefill: a prefill and a decode function in one package, the weights stored once.
        single = export(DATA / "decoder_lms" / "llama", tmp / "single.mlpackage", "--context", "32")
        both = export(DATA / "decoder_lms" / "llama", tmp / "both.mlpackage", "--context", "32", "--prefill", "8")
        names = [f["name"] for f in both.get("functions", [])]
        check(names == ["prefill", "decode"], f"export --prefill: functions prefill and decode ({names})")
        if names == ["prefill", "decode"]:
            check(ports(both["functions"][0], "inputs")[0] == ("ids", "int32", [1, 8])
                  and ports(both["functions"][1], "inputs")[0] == ("ids", "int32", [1, 1]),
                  "export --prefill: prefill takes 8 tokens, decode 1")
            check(sorted(ports(both["functions"][0], "states")) == sorted(ports(both["functions"][1], "states")),
                  "export --prefill: both functions declare the same states")
        check(both.get("weight_bytes", 0) < single.get("weight_bytes", 0) * 1.05,
              f"export --prefill: the weights are stored once ({both.get('weight_bytes')} bytes against "
              f"{single.get('weight_bytes')} for one function)")
        protoc_check(tmp / "both.mlpackage")
        # --context 16,32: a ladder, prefill and decode per cache length in one package, the weights stored once.
        ladder = export(DATA / "decoder_lms" / "llama", tmp / "ladder.mlpackage", "--context", "16,32", "--prefill", "8")
        names = [f["name"] for f in ladder.get("functions", [])]
        check(names == ["prefill_16", "decode_16", "prefill_32", "decode_32"],
              f"export --context 16,32: prefill and decode per rung ({names})")
        if len(names) == 4:
            for function, context in zip(ladder["functions"], (16, 16, 32, 32)):
                slots = {shape[2] for _, _, shape in ports(function, "states")}
                check(slots == {context}, f"export ladder: {function['name']} holds {context} cache slots ({slots})")
                check(ports(function, "inputs")[2][2][3] == context + (8 if function["name"].startswith("p") else 1),
                      f"export ladder: {function['name']}'s mask covers {context} slots and its new tokens")
        check(ladder.get("weight_bytes", 0) < single.get("weight_bytes", 0) * 1.05,
              f"export ladder: the weights are stored once ({ladder.get('weight_bytes')} bytes against "
              f"{single.get('weight_bytes')} for one function)")
        protoc_check(tmp / "ladder.mlpackage")
        check_error(anvil("export", "--model", DATA / "decoder_lms" / "gpt2", "--out", tmp / "lm.mlpackage",
                          "--context", "32,16"), 2, "anvil: usage:", "increasing",
                    what="export a ladder that is not increasing")
        check_error(anvil("export", "--model", DATA / "decoder_lms" / "gpt2", "--out", tmp / "lm.mlpackage",
                          "--context", "16,x"), 2, "anvil: usage:", "--context", what="export a malformed ladder")
        check_error(anvil("export", "--model", DATA / "decoder_lms" / "gpt2", "--out", tmp / "lm.mlpackage",
                          "--context", "16,32", "--prefill", "24"), 2, "anvil: usage:", "--prefill",
                    what="export a prefill longer than the ladder's shortest context")
        check_error(anvil("export", "--model", DATA / "decoder_lms" / "gpt2", "--out", tmp / "lm.mlpackage",
                          "--context", "16", "--prefill", "17"), 2, "anvil: usage:", "--prefill",
                    what="export a prefill longer than the context")
        check_error(anvil("export", "--model", DATA / "decoder_lms" / "gpt2", "--out", tmp / "lm.mlpackage",
                          "--context", "100000"), 2, "anvil: usage:", "--context",
                    what="export a decoder LM past its positions")
        check_error(anvil("export", "--model", DATA / "decoder_lms" / "gpt2", "--out", tmp / "lm.mlpackage",
                          "--context", "8", "--sequence-length", "9"), 2, "anvil: usage:", "--sequence-length",
                    what="export a decoder LM taking more tokens than its cache holds")
        # --rescale-fp16: the package stores the rescaled weights (tools/reference/fp16_rescale.py's Llama, built
        # to overflow fp16), says so in its metadata, and the report has the reference's shifts.
        overflow = DATA / "fp16_rescale" / "llama_overflow"
        expected = json.loads((overflow / "expected.json").read_text())
        calibration = ",".join(str(i) for i in expected["calibration_ids"])
        report = export(overflow, tmp / "rescaled.mlpackage", "--context", "16", "--rescale-fp16", "--calibrate-ids",
                        calibration)
        shifts = [p.get("shift") for p in report.get("fp16_rescale", {}).get("pairs", [])]
        check(shifts == [p["shift"] for p in expected["pairs"]], f"export --rescale-fp16: the reference's shifts ({shifts})")
        check(report.get("fp16_rescale", {}).get("overflow_after") == [],
              "export --rescale-fp16: no fp16 overflow on the calibration ids after rescaling")
        protoc_check(tmp / "rescaled.mlpackage")
        spec = (tmp / "rescaled.mlpackage" / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes()
        check(b"anvil.fp16_rescale" in spec and b"model.layers.0.mlp.up_proj x 2^-4" in spec,
              "export --rescale-fp16: the shifts in the metadata")
        check_error(anvil("export", "--model", overflow, "--out", tmp / "x.mlpackage", "--rescale-fp16"), 2,
                    "anvil: usage:", "--calibrate-ids", what="export --rescale-fp16 without a calibration")
        check_error(anvil("export", "--model", text / "bert_sentence", "--out", tmp / "x.mlpackage", "--rescale-fp16",
                          "--calibrate-ids", "1,2"), 2, "anvil: usage:", "decoder LMs",
                    what="export --rescale-fp16 of a sentence encoder")

        # CLIP: an image and a text function (iOS 18), or one tower alone (iOS 16); Whisper: an encoder and a
        # decoder whose caches are states, the cross-attention ones read only.
        clip_folder = DATA / "clip" / "clip"
        config = json.loads((clip_folder / "config.json").read_text())
        projection, positions = config["projection_dim"], config["text_config"]["max_position_embeddings"]
        size = config["vision_config"]["image_size"]
        report = export(clip_folder, tmp / "clip.mlpackage")
        functions = {f["name"]: f for f in report.get("functions", [])}
        check(sorted(functions) == ["image", "text"], f"export clip: functions image and text ({sorted(functions)})")
        if sorted(functions) == ["image", "text"]:
            check(ports(functions["image"], "inputs") == [("pixels", "fp16", [1, 3, size, size])]
                  and ports(functions["image"], "outputs") == [("image_embeds", "fp16", [1, projection])],
                  f"export clip: image takes pixels and returns image_embeds ({functions['image']})")
            check(ports(functions["text"], "inputs") == [("input_ids", "int32", [1, positions]),
                                                         ("pooled", "fp16", [1, positions])]
                  and ports(functions["text"], "outputs") == [("text_embeds", "fp16", [1, projection])],
                  f"export clip: text takes input_ids and pooled and returns text_embeds ({functions['text']})")
        protoc_check(tmp / "clip.mlpackage")
        spec = (tmp / "clip.mlpackage" / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes()
        check(spec[:2] == b"\x08\x09" and b"anvil.logit_scale" in spec,
              "export clip: two functions are specification version 9, logit_scale in the metadata")
        report = export(clip_folder, tmp / "clip_text.mlpackage", "--tower", "text", "--sequence-length", "8")
        check(ports(report, "inputs") == [("input_ids", "int32", [1, 8]), ("pooled", "fp16", [1, 8])]
              and len(report.get("functions", [])) == 1, f"export clip --tower text: one function ({report})")
        spec = (tmp / "clip_text.mlpackage" / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes()
        check(spec[:2] == b"\x08\x07", "export clip --tower text: specification version 7 (iOS 16)")
        protoc_check(tmp / "clip_text.mlpackage")
        check_error(anvil("export", "--model", clip_folder, "--out", tmp / "x.mlpackage", "--tower", "audio"), 2,
                    "anvil: usage:", "--tower", what="export clip --tower audio")
        check_error(anvil("export", "--model", text / "bert_sentence", "--out", tmp / "x.mlpackage", "--tower",
                          "text"), 2, "anvil: usage:", "CLIP", what="export --tower on a sentence encoder")

        whisper_folder = DATA / "whisper" / "whisper_en"
        config = json.loads((whisper_folder / "config.json").read_text())
        heads, layers = config["decoder_attention_heads"], config["decoder_layers"]
        head_dim, mels = config["d_model"] // heads, config["num_mel_bins"]
        report = export(whisper_folder, tmp / "whisper.mlpackage", "--context", "32")
        functions = {f["name"]: f for f in report.get("functions", [])}
        check(sorted(functions) == ["decoder", "encoder"], f"export whisper: encoder and decoder ({sorted(functions)})")
        if sorted(functions) == ["decoder", "encoder"]:
            cross = [(f"x{kind}{i}", "fp16", [1, heads, 1500, head_dim]) for i in range(layers) for kind in "kv"]
            own = [(f"{kind}{i}", "fp16", [1, heads, 32, head_dim]) for i in range(layers) for kind in "kv"]
            check(ports(functions["encoder"], "inputs") == [("input_features", "fp16", [1, mels, 3000])]
                  and ports(functions["encoder"], "outputs") == cross,
                  f"export whisper: the encoder returns the cross keys and values ({functions['encoder']})")
            check(ports(report, "inputs") == [("ids", "int32", [1, 1]), ("positions", "int32", [1, 1]),
                                              ("mask", "fp16", [1, 1, 1, 33]), ("cache_write", "fp16", [1, 1, 32, 1])]
                  and ports(report, "outputs") == [("logits", "fp16", [1, 1, config["vocab_size"]])],
                  f"export whisper: the decoder (the default) takes one token ({report['inputs']})")
            check(sorted(ports(report, "states")) == sorted(own + cross),
                  f"export whisper: the decoder's states ({report['states']})")
        protoc_check(tmp / "whisper.mlpackage")
        spec = (tmp / "whisper.mlpackage" / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes()
        check(b"anvil.suppress_tokens" in spec and b"anvil.decoder_start_token_id" in spec,
              "export whisper: generation's ids in the metadata")
        check_error(anvil("export", "--model", whisper_folder, "--out", tmp / "x.mlpackage", "--context", "49"), 2,
                    "anvil: usage:", "--context", what="export whisper past its decoder positions")

        # --compress: the weights of every linear and convolution as constexpr ops, only their compressed bytes
        # in the weight file (a ResNet: its convolutions are nearly all its weights; a decoder LM).
        for folder, name, extra, plain in ((DATA / "resnet" / "hf_basic", "resnet", ("--image-size", "32x48"), None),
                                           (DATA / "decoder_lms" / "llama", "llama", ("--context", "32"), single)):
            if plain is None:
                plain = export(folder, tmp / f"{name}_fp16.mlpackage", *extra)
            for how, bits in (("int8", 8), ("lut4", 4), ("lut6", 6), ("lut4g32", 4)):
                if how == "lut4g32" and name == "resnet":
                    extra = (*extra, "--ios18")
                # int8: iOS 16's constexpr_affine_dequantize, iOS 18's constexpr_blockwise_shift_scale (a decoder
                # LM is always iOS 18).
                ios18 = name == "llama" or "--ios18" in extra
                ops = ({"constexpr_blockwise_shift_scale"} if ios18 else {"constexpr_affine_dequantize"}) \
                    if how == "int8" else {"constexpr_lut_to_dense"}
                package = tmp / f"{name}_{how}.mlpackage"
                report = export(folder, package, *extra, "--compress", how)
                ratio = report.get("weight_bytes", 0) / max(1, plain.get("weight_bytes", 1))
                check(report.get("compression") == how, f"export {name} --compress {how}: reported ({report.get('compression')})")
                # fp16 holds 16 bits a weight; what is left uncompressed (norms, biases, embeddings) and the
                # scales and palettes keep the ratio above bits / 16.
                check(bits / 16 - 0.02 < ratio < bits / 16 + 0.25,
                      f"export {name} --compress {how}: weight file {report.get('weight_bytes')} bytes, "
                      f"{ratio:.3f} of fp16's {plain.get('weight_bytes')}")
                protoc_check(package)
                decoded = subprocess.run(["protoc", f"-I{CHECKER.parent.parent / 'data' / 'coreml'}",
                                          "--decode=CoreML.Specification.Model", "model_subset.proto"],
                                         stdin=(package / "Data" / "com.apple.CoreML" / "model.mlmodel").open("rb"),
                                         capture_output=True, text=True)
                types = set(re.findall(r'type: "(constexpr_[a-z_]+)"', decoded.stdout))
                check(types == ops, f"export {name} --compress {how}: ops {sorted(types)} (expected {sorted(ops)})")
        check_error(anvil("export", "--model", text / "bert_sentence", "--out", tmp / "x.mlpackage", "--compress",
                          "int4"), 2, "anvil: usage:", "--compress", what="export --compress int4")
        check_error(anvil("export", "--model", text / "bert_sentence", "--out", tmp / "x.mlpackage", "--compress",
                          "lut4g32"), 2, "anvil: usage:", "--ios18", what="export --compress lut4g32 without --ios18")
        check_error(anvil("export", "--model", text / "bert_sentence", "--out", tmp / "x.zip"), 2, "anvil: usage:",
                    ".mlpackage", what="export --out without .mlpackage")
        check_error(anvil("export", "--model", text / "bert_sentence", "--out", tmp / "x.mlpackage",
                          "--sequence-length", "100000"), 2, "anvil: usage:", "--sequence-length",
                    what="export --sequence-length past the model's limit")
        check_error(anvil("export", "--model", tmp / "missing", "--out", tmp / "x.mlpackage"), 1, "anvil: error:",
                    "missing", what="export a folder that is not there")
        check(not (tmp / "x.mlpackage").exists(), "export: nothing written when it fails")
    print(f"cli.export: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
