#!/usr/bin/env python3
"""Checks that an ANVIL_PUBLIC_APIS_ONLY build leaves nothing of the private AppleNeuralEngine.framework in the
binary: App Review's static analysis rejects apps that reference non-public APIs (App Store Review Guidelines
2.5.1), so the framework's path, its classes and its private selectors must not appear in the object file.
The same check of the ordinary build must find them (it can fail), and the public Core ML names must be in
both (the route an app ships). The framework's path is compiled on Apple platforms only, inside the same
`#if !ANVIL_PUBLIC_APIS_ONLY` (objc_runtime.hpp), so a Linux object cannot show it.

usage: check_public_apis.py PUBLIC_ONLY_OBJECT ORDINARY_OBJECT
"""
import pathlib
import sys

PRIVATE = [b"AppleNeuralEngine", b"_ANEInMemoryModel", b"_ANEModel", b"_ANERequest",
           b"_ANEIOSurfaceObject", b"_ANEDeviceInfo", b"modelWithMILText:", b"evaluateWithQoS:", b"compileWithQoS:",
           b"loadWithQoS:", b"requestWithInputs:"]
PUBLIC = [b"CoreML.framework", b"MLModel", b"compileModelAtURL:error:", b"MLComputePlan"]


def main() -> int:
    public_only = pathlib.Path(sys.argv[1]).read_bytes()
    ordinary = pathlib.Path(sys.argv[2]).read_bytes()
    failures = 0
    for name in PRIVATE:
        if name in public_only:
            print(f"check_public_apis: the ANVIL_PUBLIC_APIS_ONLY build still holds '{name.decode()}'")
            failures += 1
        if name not in ordinary:
            print(f"check_public_apis: the ordinary build lacks '{name.decode()}': this check would not see it")
            failures += 1
    for name in PUBLIC:
        if name not in public_only:
            print(f"check_public_apis: the ANVIL_PUBLIC_APIS_ONLY build lacks the public '{name.decode()}'")
            failures += 1
    print(f"check_public_apis: {len(PRIVATE)} private names absent, {len(PUBLIC)} public names present"
          if failures == 0 else f"check_public_apis: {failures} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
