#!/usr/bin/python3
"""Fixtures shaped like the most common ViT and CLIP checkpoints — google/vit-base-patch16-224 and CLIP ViT-B/16:
224 x 224 images cut into 16 x 16 patches by a Conv2d with kernel = stride = 16 — with tiny hidden sizes and few
layers so the folders stay small, for the patch-conv lowering (tests/test_vit.cpp, tests/test_clip.cpp,
tests/test_coreml_export.cpp, tests/cli/test_export_command.py).

The models are the plain-PyTorch ports of transformers' modeling_vit.py and modeling_clip.py in vit_fixtures.py
and clip_fixtures.py (independent of anvil), with the same seeded random weights (hf_format.randomize).

The pixels are not stored (a [2, 3, 224, 224] float32 array is 1.2 MB): image n, channel c, row y, column x holds
    k / 32 - 1,  k = ((x * 31 + y * 17 + c * 7 + n * 13) * (x + 2 * y + 3)) mod 64
exact in fp16 and fp32, which the tests compute the same way (patch16_pixels in tests/model_test_support.hpp).

Writes
  tests/data/vit/vit_b16/    ViTForImageClassification: image 224, patch 16 (196 patches), hidden 12, 2 heads,
                             intermediate 24, 2 layers, 7 labels; f16 weights; ViTImageProcessor config (mean =
                             std = 0.5, 224 x 224, as google/vit-base-patch16-224's); logits.npy [2, 7]
  tests/data/clip/clip_b16/  CLIPModel: vision image 224, patch 16, hidden 12, 2 heads, intermediate 24, 2 layers;
                             text hidden 8, 2 heads, intermediate 16, 1 layer, 16 positions, the tokenizer of
                             tests/data/clip/clip (copied); quick_gelu, eps 1e-5; projection_dim 8; f16 weights;
                             texts.json, input_ids.npy [4, 16], text_features / image_features / text_embeds /
                             image_embeds / logits_per_image .npy
All outputs are computed in float64 on exactly the stored (f16-rounded) weights and the pixels above, then saved as
f32; a float32 forward must agree with the float64 one to 1e-4.

Rerun (deterministic, seeded; a few seconds):  /usr/bin/python3 tools/reference/patch16_fixtures.py
(needs python3-regex, as clip_fixtures.py does)
"""

import copy
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clip_fixtures  # noqa: E402
import vit_fixtures  # noqa: E402
from hf_format import make_output_dir, randomize, save_npy, seeded_generator, state_dict_as, write_json, \
    write_safetensors  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data")


def pixels(batch, size):
    """The images [batch, 3, size, size] of the module docstring."""
    n, c, y, x = torch.meshgrid(torch.arange(batch), torch.arange(3), torch.arange(size), torch.arange(size),
                                indexing="ij")
    k = ((x * 31 + y * 17 + c * 7 + n * 13) * (x + 2 * y + 3)) % 64
    return k.double() / 32 - 1


def check_f32(model, inputs, expected, name):
    with torch.no_grad():
        single = copy.deepcopy(model).float()(*[t.float() if t.is_floating_point() else t for t in inputs])
    if isinstance(expected, dict):
        worst = max(float((single[k].double() - expected[k]).abs().max()) for k in expected)
    else:
        worst = float((single.double() - expected).abs().max())
    assert worst < 1e-4, (name, worst)
    return worst


def write_vit():
    out = make_output_dir(os.path.join(DATA, "vit", "vit_b16"))
    config = vit_fixtures.config_for("vit", "ViTForImageClassification", image_size=224, patch_size=16,
                                     hidden_size=12, num_attention_heads=2, intermediate_size=24, encoder_stride=16)
    model = vit_fixtures.ViTForImageClassification(config).double().eval()
    randomize(model, seeded_generator(1400), torch.float16)
    images = pixels(2, 224)
    with torch.no_grad():
        logits = model(images)
    worst = check_f32(model, [images], logits, "vit_b16")
    serialized = dict(config)
    serialized.pop("num_labels")
    write_json(os.path.join(out, "config.json"), serialized)
    write_safetensors(os.path.join(out, "model.safetensors"), state_dict_as(model, torch.float16))
    write_json(os.path.join(out, "preprocessor_config.json"), {
        "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "ViTImageProcessor", "resample": 2,
        "rescale_factor": 0.00392156862745098, "size": {"height": 224, "width": 224}})
    save_npy(os.path.join(out, "logits.npy"), logits.numpy())
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"vit_b16: {size} bytes, f32 vs f64 {worst:.2e}, logits {logits.numpy().round(4).tolist()}")


def write_clip():
    source = os.path.join(DATA, "clip", "clip")
    out = make_output_dir(os.path.join(DATA, "clip", "clip_b16"))
    with open(os.path.join(source, "tokenizer.json"), encoding="utf-8") as file:
        document = json.load(file)
    tokenizer = clip_fixtures.HfClipTokenizer(document)
    vocab = document["model"]["vocab"]
    bos_id, eos_id = vocab[clip_fixtures.BOS], vocab[clip_fixtures.EOS]
    config = clip_fixtures.clip_config(
        text={"vocab_size": len(vocab), "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
              "num_attention_heads": 2, "max_position_embeddings": clip_fixtures.MAX_LENGTH,
              "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5, "bos_token_id": bos_id, "eos_token_id": eos_id},
        vision={"image_size": 224, "patch_size": 16, "hidden_size": 12, "intermediate_size": 24,
                "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5},
        projection_dim=8, torch_dtype="float16")
    model = clip_fixtures.CLIPModel(config).double().eval()
    generator = seeded_generator(2300)
    randomize(model, generator, torch.float16)
    with torch.no_grad():
        model.vision_model.embeddings.class_embedding.copy_(torch.randn(12, generator=generator).half().double())
        model.logit_scale.copy_((2.6592 + 0.05 * torch.randn((), generator=generator)).half().double())
    texts = clip_fixtures.FIXTURE_TEXTS
    ids = torch.tensor([clip_fixtures.pad_ids(tokenizer.encode(text, max_length=clip_fixtures.MAX_LENGTH), eos_id)
                        for text in texts], dtype=torch.long)
    images = pixels(2, 224)
    with torch.no_grad():
        expected = model(ids, images)
    for key in ("text_hidden", "image_hidden"):  # not stored: the features and embeddings pin both towers
        expected.pop(key)
    worst = check_f32(model, [ids, images], expected, "clip_b16")
    stored = state_dict_as(model, torch.float16)
    write_safetensors(os.path.join(out, "model.safetensors"), stored)
    write_json(os.path.join(out, "config.json"), config)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(source, name), os.path.join(out, name))
    write_json(os.path.join(out, "preprocessor_config.json"), clip_fixtures.preprocessor_config(224))
    write_json(os.path.join(out, "texts.json"), texts)
    save_npy(os.path.join(out, "input_ids.npy"), ids.numpy())
    for key, value in expected.items():
        save_npy(os.path.join(out, f"{key}.npy"), value.numpy())
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"clip_b16: {len(stored)} tensors, {size} bytes, f32 vs f64 {worst:.2e}, BOS {bos_id} EOS {eos_id}, "
          f"logits_per_image {expected['logits_per_image'].numpy().round(4).tolist()}")


def main():
    write_vit()
    write_clip()


if __name__ == "__main__":
    main()
