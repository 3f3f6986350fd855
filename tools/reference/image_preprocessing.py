"""Expected outputs for anvil's image preprocessing (tests/test_image.cpp), computed with torchvision.

What it writes, into tests/data/images/preprocessing/:
  <photo>.npy           f32 [5, 3, 32, 32]: the six photos in tests/data/images through five transforms
                        (CASES below: Resize(40) + CenterCrop(32) bilinear and bicubic with antialias, the same
                        without antialias, and a ViT-style exact Resize((32, 32)) with mean = std = 0.5)
  chelsea_imagenet.npy  f32 [3, 224, 224]: torchvision's ImageNet eval transform (Resize(256), CenterCrop(224),
                        Normalize) on chelsea.png
  chelsea_timm_*.npy    timm's eval transform for a non-square input_size on chelsea.png (timm_eval_cases)
  synthetic_input.npy   i32 [7, 11, 3]: a seeded random 8-bit RGB image (height 7, width 11)
  synthetic_<case>.npy  f32 [3, H, W]: SYNTHETIC_CASES on it (upsampling, padding crops, nearest, non-AA)
  metadata.json         image sizes; the decoders compared (stb_image vs PIL: max / mean abs difference in
                        levels, sum of all bytes, a few pixels from PIL); the transforms of every case

Both sides start from identical pixels: each photo is decoded with stb_image (Debian's libstb.so, through ctypes,
stbi_load_from_memory with 3 channels) as anvil does, then made a float tensor [3, H, W] in [0, 1] (ToTensor's
img.float() / 255) and run through torchvision.transforms on tensors (Resize antialias=True or False,
CenterCrop, Normalize).

Rerun (deterministic; needs apt-get install libstb-dev): /usr/bin/python3 tools/reference/image_preprocessing.py
"""

import ctypes
import ctypes.util
import json
import math
import os
import sys

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image
from torchvision.transforms import InterpolationMode as IM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_format import save_npy, write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = os.path.join(ROOT, "tests", "data", "images")
OUT = os.path.join(IMAGES, "preprocessing")
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "dog.jpg", "eagle.jpg", "giraffe.jpg"]
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
HALF = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])

# name, description (for metadata.json), transform
CASES = [
    ("bilinear", "Resize(40, BILINEAR, antialias=True), CenterCrop(32), Normalize(ImageNet)",
     T.Compose([T.Resize(40, IM.BILINEAR, antialias=True), T.CenterCrop(32), T.Normalize(*IMAGENET)])),
    ("bicubic", "Resize(40, BICUBIC, antialias=True), CenterCrop(32), Normalize(ImageNet)",
     T.Compose([T.Resize(40, IM.BICUBIC, antialias=True), T.CenterCrop(32), T.Normalize(*IMAGENET)])),
    ("vit_exact", "Resize((32, 32), BILINEAR, antialias=True), Normalize(0.5, 0.5)",
     T.Compose([T.Resize((32, 32), IM.BILINEAR, antialias=True), T.Normalize(*HALF)])),
    ("bilinear_no_antialias", "Resize(40, BILINEAR, antialias=False), CenterCrop(32), Normalize(ImageNet)",
     T.Compose([T.Resize(40, IM.BILINEAR, antialias=False), T.CenterCrop(32), T.Normalize(*IMAGENET)])),
    ("bicubic_no_antialias", "Resize(40, BICUBIC, antialias=False), CenterCrop(32), Normalize(ImageNet)",
     T.Compose([T.Resize(40, IM.BICUBIC, antialias=False), T.CenterCrop(32), T.Normalize(*IMAGENET)])),
]

# On the 7 x 11 synthetic image: no normalisation, so the values are the resized levels / 255.
SYNTHETIC_CASES = [
    ("up_bilinear_pad", "Resize(16, BILINEAR, antialias=True), CenterCrop((20, 22))",
     T.Compose([T.Resize(16, IM.BILINEAR, antialias=True), T.CenterCrop((20, 22))])),
    ("up_bicubic_pad", "Resize(16, BICUBIC, antialias=True), CenterCrop((20, 22))",
     T.Compose([T.Resize(16, IM.BICUBIC, antialias=True), T.CenterCrop((20, 22))])),
    ("up_nearest", "Resize(16, NEAREST), CenterCrop((20, 22))",
     T.Compose([T.Resize(16, IM.NEAREST), T.CenterCrop((20, 22))])),
    ("down_bilinear", "Resize((5, 4), BILINEAR, antialias=True)", T.Resize((5, 4), IM.BILINEAR, antialias=True)),
    ("down_bicubic", "Resize((5, 4), BICUBIC, antialias=True)", T.Resize((5, 4), IM.BICUBIC, antialias=True)),
    ("down_bicubic_no_antialias", "Resize((5, 4), BICUBIC, antialias=False)",
     T.Resize((5, 4), IM.BICUBIC, antialias=False)),
    ("down_nearest", "Resize((5, 4), NEAREST)", T.Resize((5, 4), IM.NEAREST)),
]


def load_stb():
    name = ctypes.util.find_library("stb") or "libstb.so.0"
    stb = ctypes.CDLL(name)
    stb.stbi_load_from_memory.restype = ctypes.POINTER(ctypes.c_ubyte)
    stb.stbi_load_from_memory.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                                          ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    stb.stbi_image_free.argtypes = [ctypes.c_void_p]
    stb.stbi_failure_reason.restype = ctypes.c_char_p
    return stb


def stb_decode(stb, data):
    """uint8 [H, W, 3], as anvil's decode_image gives it."""
    x, y, comp = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    pixels = stb.stbi_load_from_memory(data, len(data), ctypes.byref(x), ctypes.byref(y), ctypes.byref(comp), 3)
    if not pixels:
        raise RuntimeError("stb_image: " + stb.stbi_failure_reason().decode())
    try:
        array = np.ctypeslib.as_array(pixels, shape=(y.value, x.value, 3)).copy()
    finally:
        stb.stbi_image_free(pixels)
    return array


def to_tensor(pixels):
    """ToTensor: uint8 HWC -> float CHW / 255."""
    return torch.from_numpy(pixels).permute(2, 0, 1).contiguous().float().div(255)


def resize_keep_ratio(target):
    """timm's ResizeKeepRatio(target) as its eval transform builds it (longest = 0, no random scale or aspect,
    no interpolation given, so bilinear): the image scaled, aspect kept, to cover target (h, w), each side
    round(side / ratio) with ratio = min(h / target_h, w / target_w), Python's round."""
    def apply(x):
        height, width = x.shape[-2:]
        ratio = min(height / target[0], width / target[1])
        size = [round(height / ratio), round(width / ratio)]
        return T.functional.resize(x, size, IM.BILINEAR, antialias=True)
    return apply


def timm_eval_cases():
    """timm's transforms_imagenet_eval for a non-square input_size (timm/data/transforms_factory.py): each side's
    scale size is floor(side / crop_pct); crop_mode "center" resizes with ResizeKeepRatio(scale size), "squash"
    to the scale size exactly (with the configured interpolation); then CenterCrop(input size), Normalize.
    Configured: crop_pct 0.9, interpolation bicubic, ImageNet mean and std."""
    cases = []
    for height, width in [(112, 144), (144, 112)]:
        scale = (math.floor(height / 0.9), math.floor(width / 0.9))
        cases.append((f"{height}x{width}", T.Compose([resize_keep_ratio(scale), T.CenterCrop((height, width)),
                                                      T.Normalize(*IMAGENET)])))
    scale = (math.floor(112 / 0.9), math.floor(144 / 0.9))
    cases.append(("squash_112x144", T.Compose([T.Resize(scale, IM.BICUBIC, antialias=True), T.CenterCrop((112, 144)),
                                               T.Normalize(*IMAGENET)])))
    return cases


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    stb = load_stb()
    metadata = {"generator": "tools/reference/image_preprocessing.py",
                "torch": torch.__version__, "torchvision": torchvision.__version__,
                "pillow": Image.__version__,
                "cases": [[name, text] for name, text, _ in CASES],
                "synthetic_cases": [[name, text] for name, text, _ in SYNTHETIC_CASES],
                "photos": {}}
    for photo in PHOTOS:
        with open(os.path.join(IMAGES, photo), "rb") as file:
            data = file.read()
        pixels = stb_decode(stb, data)
        pil = np.asarray(Image.open(os.path.join(IMAGES, photo)).convert("RGB"))
        assert pil.shape == pixels.shape, (photo, pil.shape, pixels.shape)
        difference = np.abs(pil.astype(np.int32) - pixels.astype(np.int32))
        if photo.endswith(".png"):
            assert difference.max() == 0, photo + ": stb_image and PIL disagree on a PNG"
        height, width = pixels.shape[:2]
        probes = [[0, 0], [height // 2, width // 3], [height - 1, width - 1]]
        metadata["photos"][photo] = {
            "height": height, "width": width,
            "pil_byte_sum": int(pil.astype(np.int64).sum()),
            "stb_byte_sum": int(pixels.astype(np.int64).sum()),
            "pil_pixels": [[y, x] + [int(v) for v in pil[y, x]] for y, x in probes],
            "stb_vs_pil_max_abs_levels": int(difference.max()),
            "stb_vs_pil_mean_abs_levels": round(float(difference.mean()), 4),
        }
        x = to_tensor(pixels)
        save_npy(os.path.join(OUT, photo.rsplit(".", 1)[0] + ".npy"),
                 torch.stack([transform(x) for _, _, transform in CASES]).numpy())
        if photo == "chelsea.png":
            imagenet = T.Compose([T.Resize(256, IM.BILINEAR, antialias=True), T.CenterCrop(224),
                                  T.Normalize(*IMAGENET)])
            save_npy(os.path.join(OUT, "chelsea_imagenet.npy"), imagenet(x).numpy())
            for name, transform in timm_eval_cases():
                save_npy(os.path.join(OUT, "chelsea_timm_" + name + ".npy"), transform(x).numpy())

    generator = np.random.default_rng(20240611)
    synthetic = generator.integers(0, 256, size=(7, 11, 3), dtype=np.uint8)
    save_npy(os.path.join(OUT, "synthetic_input.npy"), synthetic.astype(np.int32))
    x = to_tensor(synthetic)
    for name, _, transform in SYNTHETIC_CASES:
        save_npy(os.path.join(OUT, "synthetic_" + name + ".npy"), transform(x).numpy())
    write_json(os.path.join(OUT, "metadata.json"), metadata)
    for photo, info in metadata["photos"].items():
        print(f"{photo}: {info['width']} x {info['height']}, stb vs PIL max {info['stb_vs_pil_max_abs_levels']} "
              f"mean {info['stb_vs_pil_mean_abs_levels']} levels")


if __name__ == "__main__":
    main()
