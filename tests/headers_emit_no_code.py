#!/usr/bin/env python3
"""Including anvil's headers must emit no code: in header-only mode every definition is inline, so a file
that includes them and calls nothing has no anvil symbol in its object file.

What this catches: a polymorphic class whose virtual functions are defined in its -inl.hpp file but declared
in the class without ANVIL_INLINE. The Itanium ABI then takes the first such function as the class's key
function, and because its definition is inline, every file that includes the header emits the vtable and,
through it, every virtual function: code generation that each user file pays (it made an empty file with
<anvil/anvil.hpp> 24% slower to compile at -O2).

Usage: headers_emit_no_code.py NM OBJECT...  (the objects of the header-only self-containment units)
"""
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    nm, objects = sys.argv[1], sys.argv[2:]
    failures = 0
    for obj in objects:
        listing = subprocess.run([nm, "-C", "--defined-only", obj], check=True, capture_output=True,
                                 text=True).stdout
        emitted = []
        for line in listing.splitlines():
            parts = line.split(" ", 2)
            if len(parts) != 3:
                continue
            _, kind, name = parts
            # Code and data anvil defines (text, weak functions, vtables, unique globals), or any symbol in
            # anvil's namespace; the standard library's own read-only constants are not anvil's to remove.
            if "anvil::" in name or "anvil" in name.split("(")[0] or kind in "TtWwVvuBbDd":
                emitted.append(f"{kind} {name}")
        if emitted:
            failures += 1
            print(f"FAIL {obj}: {len(emitted)} symbols emitted by including the headers, e.g.")
            for symbol in emitted[:12]:
                print(f"       {symbol}")
            print("     (a vtable here: declare the class's out-of-line virtual functions ANVIL_INLINE)")
        else:
            print(f"ok   {obj}: no code emitted")
    print(f"headers_emit_no_code: {failures} of {len(objects)} objects emit code")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
