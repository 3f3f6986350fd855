#!/usr/bin/env python3
"""Builds and runs tests/consumers/consumer.cpp the way a user would bring anvil in.

usage: run.py KIND[.compiled] ANVIL_SOURCE_DIR WORK_DIR CXX [BUILD_TREE]
KIND is find_package (install anvil to a prefix, then find_package), add_subdirectory, fetchcontent (git clone
of the commit under test), meson (anvil as a Meson subproject) or single (the single header, compiled by hand).
Header-only by default; `.compiled` links anvil::compiled (Meson: anvil_compiled_dep) instead, and for single
it means one file defining ANVIL_IMPLEMENTATION and one defining ANVIL_SEPARATE_COMPILATION. Exits 77 (ctest's
skip) with a reason only when the way in cannot exist here: fetchcontent outside a git checkout.
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
        # Two files of the user's program, as a build with several files has them.
        build = work / "build"
        build.mkdir(parents=True)
        second = "#define ANVIL_IMPLEMENTATION\n" if compiled else ""
        (build / "second.cpp").write_text(second + "#include <anvil/anvil.hpp>\n", encoding="utf-8")
        flags = ["-std=c++20", f"-I{root / 'single_include'}"] + (["-DANVIL_SEPARATE_COMPILATION"] if compiled else [])
        run(cxx, *flags, "-c", str(consumers / "consumer.cpp"), "-o", str(build / "consumer.o"))
        run(cxx, "-std=c++20", f"-I{root / 'single_include'}", "-c", str(build / "second.cpp"), "-o",
            str(build / "second.o"))
        exe = build / "consumer"
        run(cxx, str(build / "consumer.o"), str(build / "second.o"), "-o", str(exe), "-pthread", "-ldl")
    else:
        print(f"run.py: unknown consumer kind '{kind}'", file=sys.stderr)
        return 2

    run(str(exe))
    return 0


if __name__ == "__main__":
    sys.exit(main())
