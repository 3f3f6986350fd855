#!/usr/bin/python3
"""PyTorch reference for anvil's fp16 rescaling (include/anvil/models/llm/fp16_rescale.hpp): a small random-weight
Llama whose activations overflow fp16 while its fp32 logits are ordinary, and what calibration must find on it.

The model is decoder_lms.py's plain-PyTorch LlamaForCausalLM (a port of modeling_llama.py: RMSNorm, rotate_half
RoPE, GQA, SwiGLU), 2 layers, hidden 32, intermediate 64, 4 heads over 2 key-value heads, tied embeddings, and
decoder_lms.py's tokenizer (vocab 320, copied from tests/data/decoder_lms/llama/). Weights are
hf_format.randomize's (N(0, 1/fan_in), embeddings N(0, 1)), with o_proj and down_proj x16 so each block adds O(10)
to the residual stream. Then the model is disguised: per pair of
projections the producer's weights are multiplied by 2^k and the consumer's by 2^-k — exact in float32, so the
fp32 model computes the same logits as the undisguised one, but its values overflow fp16:

  layer 0: v_proj x 2^15, o_proj x 2^-15; up_proj x 2^16, down_proj x 2^-16   (both overflow fp16)
  layer 1: up_proj x 2^12, down_proj x 2^-12; attention as drawn              (MLP within fp16, past 2^14)

On 16 seeded calibration ids (< 317) the generator measures, in float64 with forward hooks on nn.Linear, per layer
and pair: the largest |x| of the producer's output and of the consumer's input (peak) and of the consumer's output
(output_peak); the expected shift is the smallest s >= 0 with peak / 2^s <= 2^14 (anvil's default limit), asserted
to be at least 0.02 (in log2) away from a boundary so float32 cannot choose otherwise. It also runs an fp16
emulation (decoder_lms.py's ROUND hook: weights and every op's output rounded to float16) of the model as stored
(its logits are not finite), of the model rescaled by the expected shifts, and of the undisguised model (both
finite; their largest relative logit errors against float64 are recorded: what fp16 costs this model anyway).

Writes tests/data/fp16_rescale/llama_overflow/ (or under --out DIR): config.json, model.safetensors (f32; the tied
lm_head not stored), tokenizer.json, logits.npy (float32 [16, 320]: the calibration ids' logits, one forward in
float64) and expected.json (calibration_ids, limit, pairs, fp16_emulation, notes).

Rerun (deterministic, seeded): /usr/bin/python3 tools/reference/fp16_rescale.py
Standard library + numpy + torch.
"""
import argparse
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_lms as lm  # noqa: E402
import hf_format  # noqa: E402

SEED = 17
LIMIT = 2.0 ** 14
CALIBRATION_TOKENS = 16
OUTPUT_GAIN = 16.0  # o_proj and down_proj: each block adds O(10) to the residual stream
# (layer, producer, consumer, k): producer x 2^k, consumer x 2^-k.
DISGUISE = [(0, "self_attn.v_proj", "self_attn.o_proj", 15), (0, "mlp.up_proj", "mlp.down_proj", 16),
            (1, "mlp.up_proj", "mlp.down_proj", 12)]
PAIRS = [("attention", "self_attn.v_proj", "self_attn.o_proj"), ("mlp", "mlp.up_proj", "mlp.down_proj")]

CONFIG = lm.llama_config("llama", hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=True, architectures=["LlamaForCausalLM"], torch_dtype="float32")


def build_model():
    torch.manual_seed(0)
    model = lm.LlamaForCausalLM(CONFIG).double()
    hf_format.randomize(model, hf_format.seeded_generator(SEED), torch.float32)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(OUTPUT_GAIN)
            layer.mlp.down_proj.weight.mul_(OUTPUT_GAIN)
        for index, producer, consumer, k in DISGUISE:
            layer = model.model.layers[index]
            layer.get_submodule(producer).weight.mul_(2.0 ** k)
            layer.get_submodule(consumer).weight.mul_(2.0 ** -k)
        for p in model.parameters():  # what the checkpoint stores
            p.copy_(p.to(torch.float32).to(torch.float64))
    return model


def forward(model, ids):
    with torch.no_grad():
        return model(ids, list(range(len(ids))), [len(ids)] * len(ids))


def measure(model, ids):
    """Per layer and pair: max |x| of the producer's output and the consumer's input, and of the consumer's
    output, over one forward of ids."""
    seen = {}
    handles = []
    for index, layer in enumerate(model.model.layers):
        for _, producer, consumer in PAIRS:
            for name, module in ((producer, layer.get_submodule(producer)), (consumer, layer.get_submodule(consumer))):
                def hook(module, inputs, output, key=(index, name)):
                    seen[key] = (float(inputs[0].abs().max()), float(output.abs().max()))
                handles.append(module.register_forward_hook(hook))
    logits = forward(model, ids)
    for h in handles:
        h.remove()
    pairs = []
    for index in range(len(model.model.layers)):
        for kind, producer, consumer in PAIRS:
            peak = max(seen[(index, producer)][1], seen[(index, consumer)][0])
            ratio = math.log2(peak / LIMIT)
            shift = max(0, math.ceil(ratio))
            if ratio > 0:
                assert abs(ratio - round(ratio)) > 0.02, (index, kind, ratio)
            pairs.append({"layer": index, "pair": kind, "producer": f"model.layers.{index}.{producer}",
                          "consumer": f"model.layers.{index}.{consumer}", "peak": peak,
                          "output_peak": seen[(index, consumer)][1], "shift": shift})
    return logits, pairs


def fp16_logits(model, ids, shifts=None):
    """decoder_lms.py's float16 emulation: weights and every op's output rounded to float16, on the model as
    stored or rescaled by `shifts` (producer x 2^-s, consumer x 2^s)."""
    emulated = lm.copy.deepcopy(model)
    with torch.no_grad():
        for pair in shifts or []:
            layer = emulated.model.layers[pair["layer"]]
            kind = [p for p in PAIRS if p[0] == pair["pair"]][0]
            layer.get_submodule(kind[1]).weight.mul_(2.0 ** -pair["shift"])
            layer.get_submodule(kind[2]).weight.mul_(2.0 ** pair["shift"])
        for p in emulated.parameters():
            p.copy_(p.half().double())
    lm.ROUND[0] = lambda x: x.half().double()
    try:
        return forward(emulated, ids)
    finally:
        lm.ROUND[0] = lambda x: x


def relative_error(got, want):
    return float(((got - want).abs() / want.abs().clamp(min=1.0)).max())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "data", "fp16_rescale"))
    args = parser.parse_args()
    ids = torch.randint(0, lm.FIRST_SPECIAL, (CALIBRATION_TOKENS,), generator=hf_format.seeded_generator(2024)).tolist()
    model = build_model()
    logits, pairs = measure(model, ids)
    assert torch.isfinite(logits).all()
    assert max(p["peak"] for p in pairs) > 65504.0, "the stored model must overflow fp16"
    assert all(p["output_peak"] < 1000.0 for p in pairs), "what no shift moves must stay well inside fp16"
    before = fp16_logits(model, ids)
    assert not torch.isfinite(before).all(), "the fp16 emulation of the stored model must overflow"
    after = fp16_logits(model, ids, pairs)
    assert torch.isfinite(after).all()
    after_error = relative_error(after, logits)
    undisguised = [{"layer": i, "pair": "attention" if "attn" in producer else "mlp", "shift": k}
                   for i, producer, _, k in DISGUISE]
    undisguised_error = relative_error(fp16_logits(model, ids, undisguised), logits)

    folder = hf_format.make_output_dir(os.path.join(os.path.normpath(args.out), "llama_overflow"))
    hf_format.write_json(os.path.join(folder, "config.json"), CONFIG)
    tensors = {name: p.to(torch.float32) for name, p in model.state_dict().items() if name != "lm_head.weight"}
    hf_format.write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
    # decoder_lms.py's tokenizer, as its fixtures hold it (building it anew needs python3-regex).
    shutil.copyfile(os.path.join(here, "..", "..", "tests", "data", "decoder_lms", "llama", "tokenizer.json"),
                    os.path.join(folder, "tokenizer.json"))
    hf_format.save_npy(os.path.join(folder, "logits.npy"), logits.numpy())
    for p in pairs:
        p["peak"] = round(p["peak"], 3)
        p["output_peak"] = round(p["output_peak"], 3)
    hf_format.write_json(os.path.join(folder, "expected.json"), {
        "calibration_ids": ids, "limit": LIMIT, "pairs": pairs,
        "fp16_emulation": {"stored_logits_finite": False, "rescaled_max_relative_error": round(after_error, 6),
                           "undisguised_max_relative_error": round(undisguised_error, 6)},
        "notes": ["Reference: tools/reference/fp16_rescale.py, float64 on the stored f32 weights; logits.npy is one "
                  "forward of calibration_ids (positions 0..15).",
                  "peak: max |x| of the producer's output and the consumer's input; output_peak: the consumer's "
                  "output; shift: the smallest s >= 0 with peak / 2^s <= limit.",
                  "Disguise (exact in f32): " + ", ".join(f"layer {i} {p} x 2^{k}, {c} x 2^-{k}"
                                                         for i, p, c, k in DISGUISE) + "."]})
    for p in pairs:
        print(f"layer {p['layer']} {p['pair']}: peak {p['peak']:.1f}, output peak {p['output_peak']:.2f}, "
              f"shift {p['shift']}")
    print(f"fp16 emulation: stored model not finite; rescaled max relative error {after_error:.3g} "
          f"(undisguised {undisguised_error:.3g})")


if __name__ == "__main__":
    main()
