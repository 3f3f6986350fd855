#!/usr/bin/env bash
# Runs anvil's whole test suite, installing what is missing first (Debian 12):
#   0. the README's demo command, run exactly as written there (beside stage 1's build);
#   1. GCC 12, warnings as errors: unit tests over include/, the command line, the amalgamation check, the
#      compile-time checks, and the consumer projects (find_package, add_subdirectory, FetchContent, Meson
#      subproject, the single header);
#   2. Clang 14, warnings as errors, AddressSanitizer + UndefinedBehaviorSanitizer: the unit tests over
#      include/, the simulator's tests and the command line;
#   3. Meson: a subset of the unit tests over include/, built and run by `meson test`;
#   4. aarch64: the CPU kernels' tests cross-compiled for arm64 (Apple Silicon's NEON kernels), run under qemu;
#   5. the libFuzzer targets, ANVIL_FUZZ_SECONDS each (default 5, a smoke run; campaigns: set it).
# The unit tests, the tool, the examples and the benchmarks build against anvil::compiled (one implementation
# unit per tree, anvil/compilation.hpp); header-only mode is built by the README demo, the strict-warnings unit,
# the definitions' self-containment units, the consumers and the fuzzers. ccache is used when present.
# Build trees go to build/ (ANVIL_BUILD_ROOT overrides). Prints each stage's time at the end. Exits non-zero
# when anything fails.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_root=${ANVIL_BUILD_ROOT:-$root/build}
fuzz_seconds=${ANVIL_FUZZ_SECONDS:-5}
jobs=$(nproc)

# Stage times, printed at the end.
stage_names=()
stage_seconds=()
stage_started=$SECONDS
stage() {
    if ((${#stage_names[@]})); then stage_seconds+=($((SECONDS - stage_started))); fi
    stage_names+=("$1")
    stage_started=$SECONDS
    echo "== $1"
}

stage "packages: install what is missing"
packages=(g++ clang clang-format libclang-rt-14-dev cmake ninja-build meson pkg-config git python3 python3-numpy doctest-dev libstb-dev protobuf-compiler libonnx-testdata
          g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    echo "== installing: ${missing[*]}"
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || { echo "test.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
        sudo=(sudo)
    fi
    "${sudo[@]}" apt-get update -q
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

passed=0
failed=0
# Adds the counts of ctest's output (the file $1, from the tree $2) to the totals.
count_ctest() {
    local log=$1 dir=$2
    local line
    line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -n 1)
    if [[ -z $line ]]; then
        echo "test.sh: ctest in $dir printed no summary" >&2
        failed=$((failed + 1))
        return
    fi
    local total fails
    total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
    fails=$(sed -E 's/.* ([0-9]+) tests failed.*/\1/' <<<"$line")
    passed=$((passed + total - fails))
    failed=$((failed + fails))
}
# Runs ctest in a build tree and adds its counts to the totals.
run_ctest() {
    local dir=$1
    shift
    local log
    log=$(mktemp)
    set +e
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" "$@" 2>&1 | tee "$log"
    set -e
    count_ctest "$log" "$dir"
    rm -f "$log"
}

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
configure() {
    local dir=$1
    shift
    cmake -S "$root" -B "$dir" -G Ninja -DANVIL_WARNINGS_AS_ERRORS=ON "${launcher[@]}" "$@" >/dev/null
}

# The README's demo command builds one header-only file, which left a core idle for its 100 s: it runs in the
# background, beside the GCC tree's build, and its result is read after that build.
demo_command=$(awk '/^```sh$/ { inside = 1; next } /^```$/ { if (inside) exit } inside' "$root/README.md")
demo_log=$(mktemp)
demo_started=$SECONDS
(cd "$root" && bash -euo pipefail -c "$demo_command" >"$demo_log" 2>&1; echo "demo_status=$?" >>"$demo_log") &
demo_pid=$!

# Optimised as users build it, without debug info: -g cost 45% of the library's compile time (g++ 12 on
# src/anvil.cpp: 131 s against 90 s), and CI reads no debugger sessions. The sanitizer tree keeps line
# tables, so its reports still name file and line.
optimised=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG")
with_line_tables=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -gline-tables-only -DNDEBUG")

stage "gcc: build (the README's demo command builds beside it) and test (warnings are errors)"
# The test programs' own code (assertions, graph building) at -O1: their unity batches took 193 s at -O2 and
# 130 s at -O1 here, and ran no slower (the library they exercise stays -O2).
configure "$build_root/gcc" -DCMAKE_CXX_COMPILER=g++ "${optimised[@]}" -DANVIL_BUILD_BENCH=ON \
    -DANVIL_TEST_CXX_FLAGS=-O1
cmake --build "$build_root/gcc" -j "$jobs"
set +e
wait "$demo_pid"
set -e
echo "== README: the demo command, exactly as written there ($((SECONDS - demo_started)) s, beside the GCC build)"
cat "$demo_log"
# A user's first build of anvil is this one: it must not only work but print no compiler warning (g++ -O3
# once warned about a kernel's lanes here while every -O2 tree stayed quiet).
if ! grep -q '^demo_status=0$' "$demo_log"; then
    echo "test.sh: the README's demo command failed: $demo_command" >&2
    failed=$((failed + 1))
elif grep -q 'warning:' "$demo_log"; then
    echo "test.sh: the README's demo command printed compiler warnings: $demo_command" >&2
    failed=$((failed + 1))
else
    passed=$((passed + 1))
fi
rm -f "$demo_log"
run_ctest "$build_root/gcc"

stage "clang: build and test with AddressSanitizer and UndefinedBehaviorSanitizer (warnings are errors)"
# The single header, the compile-only checks, the checks of the sources alone (label `source`: formatting,
# generated files; 8 s here) and the examples were covered by GCC above; this tree runs the library's code under
# the sanitizers, optimised as users build it (the sanitizers see the code the optimiser keeps; Debug ran the
# tests three times slower). The header-only quickstart alone took 3 minutes to build here.
# The test programs' own code (assertions, graph building) is compiled -O0: their largest unity batch took
# 155 s at -O2, 132 s at -O1 and 53 s at -O0 under the sanitizers; the tests then ran 35 s longer (194 s
# against 159 s), the library they exercise staying -O2. The simulator's rule variants that only change what
# it refuses (m5, fail_compile_op, fail_eval_op) run in the GCC tree; here the load-failure path does.
# Three whole-model runs are left to the GCC tree too: Whisper's greedy decoding for each language and task,
# its long-audio windows, and its Core ML route (52 s here under the sanitizers). They repeat, at 1500 audio
# positions, code the sanitizers see in this tree's other Whisper, decoder and Core ML export cases. The thread
# pool's 20,000-call wake-up stress (30 s here under the sanitizers) is a race hunt the GCC tree runs; every
# other test drives the pool here. Of the load-failure variants this tree runs fail_load_op (a load refused for
# good, and the CPU fallback); the transient-failure retries (inject_load_failures, 40 s here) run in GCC's.
# The M1 (h13) profile's reruns of the Neural Engine cases and of the LLM cases run in GCC's tree only too: they
# drive the same lowering, partitioning and simulator code as this tree's default-profile runs, with another
# capability record deciding what is refused (unit.include.h13 and .h13.llm took 19 s and 9 s of GCC's test
# time); the VJP cases under h13 stay here (under a second each).
sanitizer_skips="whisper: greedy ids*,whisper: long audio*,whisper: encoder and decoder through the Core ML route*"
sanitizer_skips+=",thread_pool: 20000 tiny calls in a row lose no wake-up"
configure "$build_root/clang-sanitize" -DCMAKE_CXX_COMPILER=clang++ "${with_line_tables[@]}" \
    -DANVIL_SANITIZE=address,undefined -DANVIL_TEST_COMPILE_CHECKS=OFF \
    -DANVIL_TEST_CXX_FLAGS=-O0 "-DANVIL_TEST_EXCLUDE=$sanitizer_skips" \
    -DANVIL_BUILD_EXAMPLES=OFF
cmake --build "$build_root/clang-sanitize" -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_ctest "$build_root/clang-sanitize" -LE 'consumer|source' \
    -E '^unit\.include\.(m5|fail_compile_op|fail_eval_op|inject_load_failures|h13|h13\.llm)$'

stage "meson: build and test (the aarch64 stage's cross build and tests run beside it)"
# Meson's build is mostly one unit, src/anvil.cpp (60 s of a core here at -O0), beside 18 s of smaller ones,
# which left the other core idle for most of the stage: the aarch64 stage's work (below) runs in the background
# here, as the README demo does beside the GCC tree's build.
aarch64_log=$(mktemp)
(
    # Every user of the private route is on Apple Silicon, and every segment that falls back runs on the NEON
    # kernels, which no x86 tree compiles: g++-aarch64-linux-gnu builds the kernels' tests (tests/cross: the GEMM
    # in every weight format, the int8 products, attention, norms, convolution, the executor, each against its
    # naive reference) and ctest runs them under qemu-user. Speed under emulation means nothing; the numbers do.
    set +e
    configure "$build_root/aarch64" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" "${optimised[@]}" \
        -DANVIL_TEST_CXX_FLAGS=-O1 -DANVIL_BUILD_COMPILED=OFF -DANVIL_BUILD_TOOLS=OFF -DANVIL_BUILD_EXAMPLES=OFF \
        -DANVIL_BUILD_ANE_SIM=OFF && cmake --build "$build_root/aarch64" -j "$jobs"
    status=$?
    echo "aarch64_build_status=$status"
    if ((status == 0)); then ctest --test-dir "$build_root/aarch64" --output-on-failure -j "$jobs"; fi
) >"$aarch64_log" 2>&1 &
aarch64_pid=$!
if [[ ! -f $build_root/meson/build.ninja ]]; then
    # A subset of the unit tests: the CMake trees above build and run all of them. Without debug info (Meson's
    # default buildtype, debug, adds -g; plain adds nothing, -O0 as before): nothing reads it, and it cost 10% of
    # this stage's compile (86 s against 78 s of CPU here).
    CXX=g++ meson setup "$build_root/meson" "$root" --buildtype=plain -Dwerror=true \
        -Dtest_subset=expr,graph,program,json,safetensors,tokenizer >/dev/null
fi
meson_log=$(mktemp)
set +e
meson test -C "$build_root/meson" --num-processes "$jobs" --print-errorlogs 2>&1 | tee "$meson_log"
meson_status=${PIPESTATUS[0]}
set -e
meson_ok=$(sed -nE 's/^Ok: +([0-9]+).*/\1/p' "$meson_log")
meson_failed=$(sed -nE 's/^(Fail|Timeout|Unexpected Pass): +([0-9]+).*/\2/p' "$meson_log" | awk '{ sum += $1 } END { print sum + 0 }')
rm -f "$meson_log"
passed=$((passed + ${meson_ok:-0}))
failed=$((failed + ${meson_failed:-0}))
if ((meson_status != 0 && ${meson_failed:-0} == 0)); then failed=$((failed + 1)); fi

stage "aarch64: the CPU kernels' tests cross-compiled for arm64, run under qemu beside Meson"
wait "$aarch64_pid" || true
cat "$aarch64_log"
if ! grep -q '^aarch64_build_status=0$' "$aarch64_log"; then
    echo "test.sh: the aarch64 cross build failed" >&2
    failed=$((failed + 1))
else
    count_ctest "$aarch64_log" "$build_root/aarch64"
    # How many ran, from doctest's summaries (ctest keeps every test's output in LastTest.log).
    kernel_counts=$(awk '/^\[doctest\] test cases:/ { cases += $4 } /^\[doctest\] assertions:/ { assertions += $3 }
        END { printf "%d test cases, %d assertions", cases, assertions }' \
        "$build_root/aarch64/Testing/Temporary/LastTest.log")
    echo "== aarch64: $kernel_counts ran under qemu"
    stage_names[-1]+=" ($kernel_counts)"
fi
rm -f "$aarch64_log"

stage "fuzz: each target for ${fuzz_seconds}s"
configure "$build_root/fuzz" -DCMAKE_CXX_COMPILER=clang++ "${with_line_tables[@]}" \
    -DANVIL_BUILD_TESTS=OFF -DANVIL_BUILD_TOOLS=OFF -DANVIL_BUILD_EXAMPLES=OFF -DANVIL_BUILD_ANE_SIM=OFF -DANVIL_BUILD_FUZZERS=ON \
    -DANVIL_FUZZ_SECONDS="$fuzz_seconds"
cmake --build "$build_root/fuzz" -j "$jobs"
run_ctest "$build_root/fuzz" -L fuzz -j 3

stage_seconds+=($((SECONDS - stage_started)))
echo
for i in "${!stage_names[@]}"; do
    printf 'anvil: %4d s  %s\n' "${stage_seconds[$i]}" "${stage_names[$i]}"
done
echo "anvil: $passed passed, $failed failed"
((failed == 0))
