#!/usr/bin/env python3
"""ctest's entry to the ONNX conformance runner: skips (77) with the reason when the test data is absent,
else runs the runner against the expectations and passes its exit status on.

Usage: run.py RUNNER DATA_DIR EXPECTED_TSV ERRATA_TSV
"""
import pathlib
import subprocess
import sys


def main(argv):
    runner, data, expected, errata = argv[1], pathlib.Path(argv[2]), argv[3], argv[4]
    if not (data / "node").is_dir():
        print(f"onnx.conformance: SKIPPED: no ONNX backend test data at {data} "
              "(Debian: apt-get install libonnx-testdata; tools/test.sh installs it)")
        return 77
    result = subprocess.run([runner, str(data), "--expect", expected, "--errata", errata], stdout=subprocess.DEVNULL)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
