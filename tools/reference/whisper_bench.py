#!/usr/bin/python3
"""PyTorch baseline for anvil's Whisper benchmark: a whisper-base-sized WhisperForConditionalGeneration (d_model 512,
6 + 6 layers, 8 heads, ffn 2048, 80 mel bins, vocab 51865, max_target_positions 448) with seeded random weights,
float32, timed on the CPU with --threads threads. Not run by the tests.

The model is whisper_fixtures.py's plain-PyTorch port of modeling_whisper.py (HF module names, proj_out tied to
model.decoder.embed_tokens), weights from hf_format.randomize rounded to --dtype and the encoder's sinusoidal
positions, and random signs on model.decoder.layer_norm.weight (with the tied head a near-1 final norm makes greedy
search repeat the last prompt token forever; the other whisper_fixtures adjustments are not made). The greedy ids
are informative (random-weight margins are small; no robustness is checked). The input is the log-mel of
tests/data/audio/jfk.wav padded to 30 s (make_log_mel_fixtures.log_mel), [1, 80, 3000].

Timed, under torch.inference_mode(), best and median of --runs after --warmup passes:
  encoder   one 30 s window -> [1, 1500, 512]                                        encoder_ms_*
  decoder   cross-attention K/V of the 6 layers from the encoder output, once        cross_kv_ms_*
            the 4-token prompt [<|startoftranscript|>, <|en|>, <|transcribe|>,
            <|notimestamps|>] in one call                                            prefill_ms_*
            32 greedy steps, one token per call (self-attention KV cache; the
            generation config's SuppressTokensAtBegin / SuppressTokens applied,
            argmax)                                                                  decode_tokens_per_second_*,
                                                                                     decode_ms_per_token_*
Prints one JSON line (also the generated ids). With --out DIR it also writes the model as a Hugging Face folder
for a C++ benchmark to load the same weights: config.json, generation_config.json, model.safetensors (f32, or f16
with --dtype f16; no proj_out.weight: tied), input_features.npy (f32 [1, 80, 3000]), expected.json (prompt and the
32 generated ids, as the timed loop produced them) and pytorch_timing.json (the printed line). The folder has no
tokenizer files (vocab-less: the special ids are whisper-base's, 50257 <|endoftext|> .. 50364 <|0.00|>). ~300 MB in
f32: not committed.

Threads: as bert_stack.py, via threads_first.pin() before torch loads (OPENBLAS_NUM_THREADS = OMP_NUM_THREADS =
--threads, default 2; OMP_WAIT_POLICY=PASSIVE; the build machines' OpenBLAS overrides dropped).

usage: /usr/bin/python3 tools/reference/whisper_bench.py [--threads 2] [--runs 5] [--warmup 1] [--out DIR]
       [--dtype f32|f16] [--seed 0]
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import threads_first  # noqa: E402

threads_first.pin("2")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import whisper_fixtures as wf  # noqa: E402
from hf_format import make_output_dir, randomize, save_npy, seeded_generator, state_dict_as, write_json, \
    write_safetensors  # noqa: E402

# whisper-base's special ids (multilingual vocabulary of 51865)
EOT, SOT, EN, TRANSLATE, TRANSCRIBE, STARTOFLM, STARTOFPREV, NOSPEECH, NOTIMESTAMPS = \
    50257, 50258, 50259, 50358, 50359, 50360, 50361, 50362, 50363
PROMPT = [SOT, EN, TRANSCRIBE, NOTIMESTAMPS]
STEPS = 32

CONFIG = {
    "activation_dropout": 0.0, "activation_function": "gelu", "apply_spec_augment": False,
    "architectures": ["WhisperForConditionalGeneration"], "attention_dropout": 0.0,
    "begin_suppress_tokens": [220, EOT], "bos_token_id": EOT, "d_model": 512, "decoder_attention_heads": 8,
    "decoder_ffn_dim": 2048, "decoder_layerdrop": 0.0, "decoder_layers": 6, "decoder_start_token_id": SOT,
    "dropout": 0.0, "encoder_attention_heads": 8, "encoder_ffn_dim": 2048, "encoder_layerdrop": 0.0,
    "encoder_layers": 6, "eos_token_id": EOT, "init_std": 0.02, "is_encoder_decoder": True, "max_length": 448,
    "max_source_positions": 1500, "max_target_positions": 448, "model_type": "whisper", "num_hidden_layers": 6,
    "num_mel_bins": 80, "pad_token_id": EOT, "scale_embedding": False, "tie_word_embeddings": True,
    "use_cache": True, "vocab_size": 51865,
}

GENERATION = {
    "begin_suppress_tokens": [220, EOT], "bos_token_id": EOT, "decoder_start_token_id": SOT, "eos_token_id": EOT,
    "forced_decoder_ids": [[1, EN], [2, TRANSCRIBE], [3, NOTIMESTAMPS]], "is_multilingual": True,
    "lang_to_id": {"<|en|>": EN}, "max_initial_timestamp_index": 50, "max_length": 448,
    "no_timestamps_token_id": NOTIMESTAMPS, "pad_token_id": EOT, "prev_sot_token_id": STARTOFPREV,
    "return_timestamps": False, "suppress_tokens": [SOT, TRANSLATE, TRANSCRIBE, STARTOFLM, STARTOFPREV, NOSPEECH],
    "task_to_id": {"transcribe": TRANSCRIBE, "translate": TRANSLATE},
}


def build(stored_dtype, seed):
    model = wf.WhisperForConditionalGeneration(CONFIG).eval()
    randomize(model, seeded_generator(seed), stored_dtype)
    extra = seeded_generator(seed + 1)
    with torch.no_grad():
        positions = model.model.encoder.embed_positions.weight
        positions.copy_(wf.sinusoids(*positions.shape).to(stored_dtype).float())
        norm = model.model.decoder.layer_norm.weight  # random signs, or the tied head repeats the last token
        norm.copy_((norm * torch.where(torch.rand(norm.shape, generator=extra) < 0.5, -1.0, 1.0)).to(stored_dtype))
    return model


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def summary(values, scale=1000.0):
    return round(min(values) * scale, 3), round(statistics.median(values) * scale, 3)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["f32", "f16"], default="f32", help="the stored weights' dtype")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    stored = {"f32": torch.float32, "f16": torch.float16}[args.dtype]
    model = build(stored, args.seed)
    samples = wf.log_mel_fixtures.read_wav("jfk.wav")
    features = torch.from_numpy(wf.log_mel_fixtures.log_mel(samples, 80).astype(np.float32))[None]
    encoder, decoder = model.model.encoder, model.model.decoder
    rules = wf.Rules(GENERATION, False)

    encoder_s, cross_s, prefill_s, decode_s = [], [], [], []
    generated = None
    with torch.inference_mode():
        for run in range(args.warmup + args.runs):
            hidden, seconds = timed(lambda: encoder(features))
            cache, cross = timed(lambda: wf.DecoderCache(decoder, hidden))
            logits, prefill = timed(lambda: decoder(torch.tensor([PROMPT]), cache=cache)[0, -1])
            start = time.perf_counter()
            tokens = []
            for _ in range(STEPS):
                scores = rules(PROMPT + tokens, len(PROMPT), logits, set())
                tokens.append(int(torch.argmax(scores)))
                logits = decoder(torch.tensor([[tokens[-1]]]), cache=cache)[0, -1]
            decode = time.perf_counter() - start
            if run >= args.warmup:
                encoder_s.append(seconds)
                cross_s.append(cross)
                prefill_s.append(prefill)
                decode_s.append(decode)
            assert generated is None or generated == tokens
            generated = tokens
    encoder_best, encoder_median = summary(encoder_s)
    per_token = [d / STEPS for d in decode_s]
    result = {
        "encoder_ms_best": encoder_best, "encoder_ms_median": encoder_median,
        "cross_kv_ms_best": summary(cross_s)[0], "cross_kv_ms_median": summary(cross_s)[1],
        "prefill_ms_best": summary(prefill_s)[0], "prefill_ms_median": summary(prefill_s)[1],
        "decode_ms_per_token_best": summary(per_token)[0], "decode_ms_per_token_median": summary(per_token)[1],
        "decode_tokens_per_second_best": round(1.0 / min(per_token), 2),
        "decode_tokens_per_second_median": round(1.0 / statistics.median(per_token), 2),
        "steps": STEPS, "prompt": PROMPT, "generated": generated, "runs": args.runs, "warmup": args.warmup,
        "threads": args.threads, "dtype_stored": args.dtype, "torch": torch.__version__,
        "model": "whisper-base shape (d_model 512, 6+6 layers, 8 heads, ffn 2048, vocab 51865), random weights",
    }
    line = json.dumps(result)
    print(line)
    if args.out:
        out = make_output_dir(args.out)
        write_json(os.path.join(out, "config.json"), dict(CONFIG, torch_dtype={"f32": "float32",
                                                                                "f16": "float16"}[args.dtype]))
        write_json(os.path.join(out, "generation_config.json"), GENERATION)
        write_safetensors(os.path.join(out, "model.safetensors"), state_dict_as(model, stored))
        save_npy(os.path.join(out, "input_features.npy"), features.numpy())
        write_json(os.path.join(out, "expected.json"), {"prompt": PROMPT, "generated": generated,
                                                        "notes": "greedy, float32, the processors of "
                                                                 "generation_config.json; no tokenizer files"})
        with open(os.path.join(out, "pytorch_timing.json"), "w") as file:
            file.write(line + "\n")


if __name__ == "__main__":
    main()
