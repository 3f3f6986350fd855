#!/usr/bin/env python3
"""Builds and runs tests/consumers/consumer.cpp the way a user would bring anvil in.

usage: run.py KIND[.compiled] ANVIL_SOURCE_DIR WORK_DIR CXX [BUILD_TREE]
KIND is find_package (install anvil to a prefix, then find_package), add_subdirectory, fetchcontent (git clone
of the commit under test), meson (anvil as a Meson subproject) or single (the single header, compiled by hand).
Header-only by default; `.compiled` links anvil::compiled (Meson: anvil_compiled_dep) instead, and for single
it means one file defining ANVIL_IMPLEMENTATION and one defining ANVIL_SEPARATE_COMPILATION (header-only, the
one file's object must define nothing but inline symbols, which a program's other files would define again).
Exits 77 (ctest's skip) with a reason only when the way in cannot exist here: fetchcontent outside a git
checkout.
find_package.compiled with BUILD_TREE installs that configured and built anvil tree (`cmake --install`, as a
user packaging their build does) instead of configuring and compiling the library once more (62 s here).
"""
import os
import pathlib
import shutil
import subprocess
import sys

SKIP = 77


def run(*command: str, cwd: pathlib.Path | None = None) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=cwd, check=True)


def strong_definitions(obj: pathlib.Path) -> list[str]:
    """The external symbols `obj` defines other than weakly (inline) or `main`: every other file of a header-only
    program defines them too, so such a program does not link."""
    listing = subprocess.run(["nm", "-C", "--defined-only", "--extern-only", str(obj)], check=True,
                             capture_output=True, text=True).stdout
    strong = []
    for line in listing.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "TDBRGSC" and parts[2] != "main":
            strong.append(f"{parts[1]} {parts[2]}")
    return strong


def cmake_consumer(source: pathlib.Path, build: pathlib.Path, cxx: str, *defines: str) -> pathlib.Path:
    run("cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DCMAKE_CXX_COMPILER={cxx}", *defines)
    run("cmake", "--build", str(build))
    return build / "consumer"


def main() -> int:
    kind, root, work, cxx = sys.argv[1], pathlib.Path(sys.argv[2]).resolve(), pathlib.Path(sys.argv[3]), sys.argv[4]
    kind, _, mode = kind.partition(".")
    compiled = mode == "compiled"
    link = [f"-DANVIL_CONSUMER_LINK={'anvil::compiled' if compiled else 'anvil::anvil'}"]
    shutil.rmtree(work, ignore_errors=True)
    consumers = work / "consumers"
    shutil.copytree(root / "tests" / "consumers", consumers)
    env_off = ["-DANVIL_BUILD_TESTS=OFF", "-DANVIL_BUILD_EXAMPLES=OFF", "-DANVIL_BUILD_TOOLS=OFF",
               "-DANVIL_BUILD_ANE_SIM=OFF"]

    if kind == "find_package":
        prefix = work / "prefix"
        if compiled and len(sys.argv) > 5:
            run("cmake", "--install", sys.argv[5], "--prefix", str(prefix))
        else:
            # Header-only installs headers alone; .compiled builds and installs the library too.
            run("cmake", "-S", str(root), "-B", str(work / "anvil-build"), "-G", "Ninja", *env_off,
                f"-DCMAKE_CXX_COMPILER={cxx}", f"-DCMAKE_INSTALL_PREFIX={prefix}",
                f"-DANVIL_BUILD_COMPILED={'ON' if compiled else 'OFF'}")
            run("cmake", "--build", str(work / "anvil-build"))
            run("cmake", "--install", str(work / "anvil-build"))
        exe = cmake_consumer(consumers / "find_package", work / "build", cxx, f"-DCMAKE_PREFIX_PATH={prefix}", *link)
    elif kind == "add_subdirectory":
        exe = cmake_consumer(consumers / "add_subdirectory", work / "build", cxx, f"-DANVIL_SOURCE_DIR={root}",
                             *link)
    elif kind == "fetchcontent":
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode != 0:
            print(f"skipped: {root} is not a git checkout, so there is no commit for FetchContent to fetch")
            return SKIP
        exe = cmake_consumer(consumers / "fetchcontent", work / "build", cxx,
                             f"-DANVIL_GIT_REPOSITORY={root}", f"-DANVIL_GIT_TAG={head.stdout.strip()}", *link)
    elif kind == "meson":
        project = consumers / "meson"
        (project / "subprojects").mkdir()
        os.symlink(root, project / "subprojects" / "anvil")
        env = dict(os.environ, CXX=cxx)
        print("+ meson setup", flush=True)
        # buildtype plain: no flags, as the CMake consumers build (Meson's default, debug, adds -g, which cost
        # 13% of the library's compile at -O0 here, for nothing this test reads).
        subprocess.run(["meson", "setup", str(work / "build"), str(project), "--buildtype=plain",
                        f"-Dcompiled={str(compiled).lower()}"],
                       env=env, check=True)
        run("meson", "compile", "-C", str(work / "build"))
        exe = work / "build" / "consumer"
    elif kind == "single":
        build = work / "build"
        build.mkdir(parents=True)
        flags = ["-std=c++20", f"-I{root / 'single_include'}"] + (["-DANVIL_SEPARATE_COMPILATION"] if compiled else [])
        run(cxx, *flags, "-c", str(consumers / "consumer.cpp"), "-o", str(build / "consumer.o"))
        objects = [str(build / "consumer.o")]
        if compiled:
            # The program's second file, stb-style: the one that defines ANVIL_IMPLEMENTATION.
            (build / "second.cpp").write_text("#define ANVIL_IMPLEMENTATION\n#include <anvil/anvil.hpp>\n",
                                              encoding="utf-8")
            run(cxx, "-std=c++20", f"-I{root / 'single_include'}", "-c", str(build / "second.cpp"), "-o",
                str(build / "second.o"))
            objects.append(str(build / "second.o"))
        else:
            # A header-only program of several files links only if the header defines nothing but inline (weak)
            # symbols, as every file defines the same ones: checked on this file's object. A second file that
            # included the header again found exactly these and cost CI 20 s of compiling.
            strong = strong_definitions(build / "consumer.o")
            if strong:
                print(f"run.py: the single header defines {len(strong)} symbols that are not inline, so a second "
                      "file including it would not link, e.g.:\n  " + "\n  ".join(strong[:12]), file=sys.stderr)
                return 1
        exe = build / "consumer"
        run(cxx, *objects, "-o", str(exe), "-pthread", "-ldl")
    else:
        print(f"run.py: unknown consumer kind '{kind}'", file=sys.stderr)
        return 2

    run(str(exe))
    return 0


if __name__ == "__main__":
    sys.exit(main())
