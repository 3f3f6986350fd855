"""`anvil cache`: the compiled-program cache a user sees and bounds, driven through the ANE simulator built beside
the binary with ANVIL_CACHE_DIR in a temporary folder.

Each compile is one `anvil run` of tests/data/onnx/tiny.onnx (x: [batch, 4] -> MatMul -> Relu) on the simulated
Neural Engine; each batch size is a program of its own, so a test makes as many cache entries as it likes.

Usage: test_cache_command.py PATH/TO/anvil
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cli_support  # noqa: E402
from cli_support import DATA, check, check_error, failures, write_npy_f32  # noqa: E402

TINY = (DATA / "onnx" / "tiny.onnx").resolve()


def main() -> int:
    cli_support.ANVIL = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        cache = tmp / "cache"
        env = {k: v for k, v in os.environ.items()
               if k not in ("ANVIL_ANE_SIM", "ANVIL_ANE_SIM_OPTIONS", "ANVIL_CACHE_MAX_BYTES")}
        env["ANVIL_CACHE_DIR"] = str(cache)

        def anvil(*args, extra=None):
            return subprocess.run([cli_support.ANVIL, *map(str, args)], capture_output=True, text=True,
                                  timeout=120, env=dict(env, **(extra or {})))

        def start(*args, extra=None):
            return subprocess.Popen([cli_support.ANVIL, *map(str, args)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=dict(env, **(extra or {})))

        def run_args(batch):
            x = tmp / f"x{batch}.npy"
            if not x.exists():
                write_npy_f32(x, [batch, 4], [0.25 * (i % 7) - 0.5 for i in range(batch * 4)])
            return ["run", "--model", TINY, "--input", f"x={x}", "--out-dir", tmp / f"out{batch}", "--backend", "ane",
                    "--json"]

        def compile_batch(batch, extra=None):
            """Runs tiny.onnx with `batch` rows on the simulator; whether its one ANE program was a cache hit."""
            result = anvil(*run_args(batch), extra=extra)
            if result.returncode != 0:
                check(False, f"run with batch {batch} on the simulator ({result.stderr.strip()[-300:]})")
                return None
            segments = [s for p in json.loads(result.stdout)["placement"]["programs"] for s in p["segments"]
                        if s["device"] == "ane"]
            check(len(segments) == 1, f"batch {batch}: one program on the Neural Engine ({segments})")
            return bool(segments and segments[0].get("cached"))

        def listing():
            result = anvil("cache", "list", "--json")
            if result.returncode != 0:
                check(False, f"cache list --json ({result.stderr.strip()})")
                return {"entries": [], "total_bytes": 0}
            return json.loads(result.stdout)

        def programs():
            return [e for e in listing()["entries"] if e["kind"] == "ane-program"]

        # Before anything was compiled the cache directory does not exist: one line, exit status 1.
        check_error(anvil("cache", "list"), 1, "anvil: error:", str(cache), "does not exist",
                    what="cache list on a missing cache directory")

        # A compile makes an entry with its manifest: model, kind, key parts, size, times.
        version = anvil("--version").stdout.split()[-1]
        check(compile_batch(1) is False, "the first run compiles")
        listed = listing()
        entries = listed["entries"]
        check(len(entries) == 1, f"one entry after one compile ({entries})")
        first = entries[0] if entries else {}
        fields = {"kind", "key", "path", "model", "anvil_version", "os_build", "chip", "record_digest", "bytes",
                  "created", "last_use", "problem"}
        check(set(first) == fields, f"list --json: an entry has the documented fields ({sorted(first)})")
        check(first.get("kind") == "ane-program" and first.get("model") == str(TINY)
              and first.get("anvil_version") == version and first.get("chip") == "h16g" and first.get("os_build")
              and first.get("bytes", 0) > 0 and first.get("problem") == "" and len(first.get("key", "")) == 64,
              f"the entry names its model, kind, anvil version, chip and OS build ({first})")
        check(listed["directory"] == str(cache) and listed["total_bytes"] == first.get("bytes"),
              "list --json: the directory and the total")
        check(first.get("last_use", "").endswith("Z") and first.get("created", "") <= first.get("last_use", ""),
              "times are UTC ISO 8601")
        text = anvil("cache")
        check(text.returncode == 0 and str(TINY) in text.stdout and "1 entry" in text.stdout
              and first.get("key", "?")[:16] in text.stdout, f"cache (list) prints the entry ({text.stdout!r})")

        # A second run is a hit, and its last use moves on.
        time.sleep(0.05)
        check(compile_batch(1) is True, "the second run is a cache hit")
        again = programs()
        check(len(again) == 1 and again[0]["last_use"] > first.get("last_use", "")
              and again[0]["created"] == first.get("created"), "a hit updates last use, not created")

        # prune --max-bytes keeps the most recently used.
        for batch in (2, 3):
            compile_batch(batch)
        ordered = programs()  # most recently used first: batch 3, batch 2, batch 1
        check(len(ordered) == 3, f"three programs after three shapes ({len(ordered)})")
        size = json.loads(anvil("cache", "size", "--json").stdout or "{}")
        check(set(size) == {"directory", "total_bytes", "program_bytes", "record_bytes", "entries", "models"}
              and size["entries"] == 3 and size["total_bytes"] == sum(e["bytes"] for e in ordered)
              and size["models"] == [{"model": str(TINY), "bytes": size["total_bytes"], "entries": 3}],
              f"size --json: the total and per model ({size})")
        keep = ordered[0]["bytes"] + ordered[1]["bytes"]
        result = anvil("cache", "prune", "--max-bytes", keep, "--json")
        pruned = json.loads(result.stdout) if result.returncode == 0 else {"removed": []}
        check([e["key"] for e in pruned["removed"]] == [ordered[2]["key"]] and pruned["remaining_bytes"] == keep
              and [e["key"] for e in programs()] == [e["key"] for e in ordered[:2]],
              f"prune --max-bytes removes the least recently used and keeps the most recent ({pruned})")

        # --stale: entries of another OS build or anvil version, and a malformed manifest, written here.
        root = cache / "ane"
        real = programs()[0]
        manifest = json.loads((root / (real["key"] + ".json")).read_text())
        fakes = {"a" * 64: dict(manifest, os_build="Other OS 1.0"), "b" * 64: dict(manifest, anvil_version="0.0.1"),
                 "c" * 64: None}
        for key, content in fakes.items():
            (root / key).mkdir()
            (root / key / "data").write_bytes(b"\0" * 100)
            (root / (key + ".json")).write_text("{not json" if content is None else json.dumps(dict(content, key=key)))
        (cache / "capabilities-Other_OS-h16g.json").write_text(json.dumps({"os_build": "Other OS", "chip": "h16g"}))
        result = anvil("cache", "list")
        check(result.returncode == 0 and "malformed cache manifest" in result.stderr and str(root / ("c" * 64))
              in result.stderr, f"a malformed manifest is a clear warning, not a failure ({result.stderr!r})")
        listed = listing()
        check(len(listed["entries"]) == 6 and any(e["problem"] for e in listed["entries"]),
              "list shows the foreign entries, the malformed one with its problem")
        result = anvil("cache", "prune", "--stale", "--json")
        pruned = json.loads(result.stdout) if result.returncode == 0 else {"removed": []}
        check(sorted(e["key"] for e in pruned["removed"]) == sorted(list(fakes) + ["capabilities-Other_OS-h16g.json"])
              and len(programs()) == 2 and not (root / ("a" * 64)).exists(),
              f"prune --stale removes other OS builds, other versions, malformed manifests and foreign records "
              f"({[e['key'][:8] for e in pruned['removed']]})")

        # The automatic cap: after every compile the cache holds at most ANVIL_CACHE_MAX_BYTES.
        cap = int(real["bytes"] * 2.5)
        for batch in (4, 5, 6, 7):
            compile_batch(batch, extra={"ANVIL_CACHE_MAX_BYTES": str(cap)})
            held = programs()
            check(sum(e["bytes"] for e in held) <= cap and held and held[0]["path"].endswith(held[0]["key"]),
                  f"after compiling batch {batch} under a cap of {cap} bytes: {sum(e['bytes'] for e in held)} held")
        result = anvil(*run_args(8), extra={"ANVIL_CACHE_MAX_BYTES": "lots"})
        check_error(result, 1, "anvil: error:", "ANVIL_CACHE_MAX_BYTES", "lots", what="a malformed cache cap")

        before = {d.name for d in root.iterdir()}
        # Clearing while another process compiles loses nothing: the compiling process holds its entry's lock
        # from the probe to the load, so the clear skips it, and the entry is finished and loads afterwards.
        # Cleared once its files are staged, while the (simulated) compile takes 1.5 s. A clear that ignored the
        # lock would remove them: the compile would be refused, a more conservative form of the program would
        # run instead, and the next run would compile again rather than hit.
        slow = start(*run_args(9), extra={"ANVIL_ANE_SIM_OPTIONS": "compile_delay_ms=1500"})
        deadline = time.monotonic() + 30
        while slow.poll() is None and time.monotonic() < deadline and not any(
                (d / "model.mil").exists() for d in root.iterdir() if d.is_dir() and d.name not in before):
            time.sleep(0.01)
        cleared = anvil("cache", "clear", "--json")
        still_compiling = slow.poll() is None
        out, err = slow.communicate(timeout=120)
        check(slow.returncode == 0 and still_compiling, f"the compile ran through the clear ({err.strip()[-300:]})")
        refused = json.loads(out)["placement"]["refused"] if slow.returncode == 0 else -1
        check(refused == 0, f"its staged files were not cleared from under it: the Neural Engine ran it ({refused})")
        check(cleared.returncode == 0 and json.loads(cleared.stdout)["removed"],
              "clear removed the other entries meanwhile")
        left = programs()
        check(len(left) == 1 and left[0]["bytes"] > 0, f"the entry compiled during the clear is there, finished ({left})")
        check(compile_batch(9) is True, "and it loads from the cache")

        # Capability records go only with clear --records.
        record = cache / "capabilities-this-h16g.json"
        record.write_text(json.dumps({"os_build": left[0]["os_build"] if left else "", "chip": "h16g"}))
        anvil("cache", "clear")
        check(record.exists() and not programs(), "clear keeps the capability records")
        result = anvil("cache", "clear", "--records")
        check(result.returncode == 0 and not record.exists() and "removed 1 entry" in result.stdout,
              f"clear --records removes them ({result.stdout!r})")

        # The Core ML route's compiled models are entries too (the simulator stands in for Core ML).
        result = anvil(*run_args(2)[:-3], "--backend", "coreml")
        coreml = [e for e in listing()["entries"] if e["kind"] == "coreml-model"]
        check(result.returncode == 0 and len(coreml) == 1 and coreml[0]["model"] == str(TINY)
              and coreml[0]["path"].endswith("coreml/" + coreml[0]["key"]) and coreml[0]["chip"] == "",
              f"a Core ML compiled model is listed with its model ({coreml}, {result.stderr.strip()[-200:]})")

        # --older-than DAYS: nothing here is a day old; everything is older than no time at all.
        result = anvil("cache", "prune", "--older-than", "1", "--json")
        check(result.returncode == 0 and json.loads(result.stdout)["removed"] == [] and listing()["entries"],
              "prune --older-than 1 keeps entries used today")
        result = anvil("cache", "prune", "--older-than", "0", "--json")
        check(result.returncode == 0 and len(json.loads(result.stdout)["removed"]) == 1 and not listing()["entries"],
              f"prune --older-than 0 removes them ({result.stderr.strip()})")

        # Bad input: one line, a non-zero exit.
        check_error(anvil("cache", "frobnicate"), 2, "anvil: usage:", "frobnicate", what="an unknown subcommand")
        check_error(anvil("cache", "prune", "--max-bytes", "12Q"), 2, "anvil: usage:", "12Q",
                    what="a malformed --max-bytes")
        check_error(anvil("cache", "prune", "--older-than", "-3"), 2, "anvil: usage:", "--older-than",
                    what="a negative --older-than")
        check_error(anvil("cache", "list", "--records"), 2, "anvil: usage:", "--records",
                    what="an option of another subcommand")
        check_error(anvil("cache", "size", "--dir", tmp / "nowhere"), 1, "anvil: error:", "nowhere",
                    what="a cache directory that does not exist")
        result = anvil("cache", "--help")
        check(result.returncode == 0 and "--max-bytes" in result.stdout and "\"last_use\"" in result.stdout
              and "\"models\"" in result.stdout, "cache --help documents the subcommands and the --json formats")
        check("cache [list|size|prune|clear]" in anvil("--help").stdout, "--help lists cache")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
