#!/usr/bin/python3
"""PyTorch timing baseline for CLIP image embedding: a ViT-B/32-sized CLIP vision tower + visual_projection (image
224, patch 32 (49 patches + the class token), hidden 768, 12 heads, intermediate 3072, 12 layers, projection 512,
quick_gelu, layer_norm_eps 1e-5) with seeded random weights, from clip_fixtures.py's plain-PyTorch port of
modeling_clip.py. Times get_image_features on a [--batch, 3, 224, 224] batch: float32, torch.inference_mode(),
--warmup passes, then best and median of --runs. Prints one JSON line:
  {"images_per_second_best", "images_per_second_median", "ms_best", "ms_median", "batch", "threads", "torch"}

With --out DIR it also writes the model as a Hugging Face CLIPModel folder, so anvil's benchmark can load the same
model: config.json (CLIPConfig layout), model.safetensors (--dtype f32 or f16; the timed model computes on the
stored values), preprocessor_config.json, plus a minimal text tower (1 layer, hidden 64, 2 heads, intermediate
256, vocabulary 1000, 77 positions, EOS 999) that CLIPModel needs but the benchmark does not time; pixels.npy
(the timed batch) and image_features.npy (PyTorch's output for it, f32), and pytorch_timing.json (the line above).
These are large (~350 MB in f32): generate them where needed, never commit them.

Threads: as bert_stack.py, before torch loads, OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are dropped and
OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set to --threads (default 2), OMP_WAIT_POLICY defaults to PASSIVE
(threads_first.py).

Run with Debian's interpreter (torch, numpy, python3-regex):
  /usr/bin/python3 tools/reference/clip_bench.py --threads 2 --batch 1 --runs 10 [--out /tmp/clip_b32 --dtype f16]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import threads_first  # noqa: E402

threads_first.pin(default="2")

import torch  # noqa: E402

import hf_format  # noqa: E402
from clip_fixtures import CLIPModel, clip_config, preprocessor_config  # noqa: E402

DTYPES = {"f32": (torch.float32, "float32"), "f16": (torch.float16, "float16")}


def bench_config(torch_dtype):
    return clip_config(
        text={"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 1,
              "num_attention_heads": 2, "max_position_embeddings": 77, "hidden_act": "quick_gelu",
              "layer_norm_eps": 1e-5, "bos_token_id": 998, "eos_token_id": 999},
        vision={"image_size": 224, "patch_size": 32, "hidden_size": 768, "intermediate_size": 3072,
                "num_hidden_layers": 12, "num_attention_heads": 12, "hidden_act": "quick_gelu",
                "layer_norm_eps": 1e-5},
        projection_dim=512, torch_dtype=torch_dtype)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the model folder, pixels and outputs here")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32", help="stored weights (with --out)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    stored_dtype, dtype_name = DTYPES[args.dtype]
    config = bench_config(dtype_name)
    model = CLIPModel(config).eval()
    generator = hf_format.seeded_generator(args.seed)
    hf_format.randomize(model, generator, stored_dtype)
    with torch.no_grad():
        model.logit_scale.fill_(config["logit_scale_init_value"])
        model.logit_scale.copy_(model.logit_scale.to(stored_dtype).float())
    size = config["vision_config"]["image_size"]
    pixels = torch.randn(args.batch, 3, size, size, generator=hf_format.seeded_generator(args.seed + 1))

    times = []
    with torch.inference_mode():
        for _ in range(args.warmup):
            features = model.get_image_features(pixels)
        for _ in range(args.runs):
            start = time.perf_counter()
            features = model.get_image_features(pixels)
            times.append(time.perf_counter() - start)
    best, median = min(times), statistics.median(times)
    timing = {"images_per_second_best": args.batch / best, "images_per_second_median": args.batch / median,
              "ms_best": best * 1e3, "ms_median": median * 1e3, "batch": args.batch, "threads": args.threads,
              "torch": torch.__version__}
    if args.out:
        out = hf_format.make_output_dir(args.out)
        hf_format.write_json(os.path.join(out, "config.json"), config)
        hf_format.write_json(os.path.join(out, "preprocessor_config.json"), preprocessor_config(size))
        hf_format.write_safetensors(os.path.join(out, "model.safetensors"),
                                    hf_format.state_dict_as(model, stored_dtype))
        hf_format.save_npy(os.path.join(out, "pixels.npy"), pixels.numpy())
        hf_format.save_npy(os.path.join(out, "image_features.npy"), features.numpy())
        hf_format.write_json(os.path.join(out, "pytorch_timing.json"), timing)
    print(json.dumps(timing))


if __name__ == "__main__":
    main()
