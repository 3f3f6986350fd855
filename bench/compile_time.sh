#!/usr/bin/env bash
# What including anvil costs a translation unit, measured in one run, at -O0 and -O2:
#   std            the standard headers the anvil headers include (in the mode measured), nothing else;
#   separate       a file including <anvil/anvil.hpp> with ANVIL_SEPARATE_COMPILATION (declarations and
#                  templates only: what a file linking anvil::compiled pays);
#   header-only    the same file in the default mode;
#   baseline       (with --baseline REF) the same file, header-only, over git REF's include/ — "today";
#   quickstart     examples/quickstart.cpp, header-only and separate.
# Each time is the best of --repeat runs (default 3). Ratios are against std measured in the same run.
# Usage: bench/compile_time.sh [--baseline REF] [--repeat N] [--cxx g++]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cxx=g++
repeat=3
baseline=""
while (($#)); do
    case $1 in
        --baseline) baseline=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        --cxx) cxx=$2; shift 2 ;;
        *) echo "compile_time.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo '#include <anvil/anvil.hpp>' >"$work/anvil.cpp"

# The standard (and system) headers that the anvil headers a file sees in this mode include directly.
std_headers() {  # include_dir [flag...]
    local include_dir=$1
    shift
    "$cxx" -std=c++20 "$@" -I"$include_dir" -E -H "$work/anvil.cpp" -o /dev/null 2>&1 |
        sed -nE 's/^\.+ (.*anvil\/.*\.hpp)$/\1/p' | sort -u |
        xargs grep -h -E '^\s*#\s*include\s*<' | grep -v -E 'anvil/|arm_neon|sys/sysctl|stb_image' | sort -u
}

calc() { python3 -c "print($1)"; }

best() {  # command... ; prints the best wall time of $repeat runs, in seconds
    local best_time="" t
    for ((i = 0; i < repeat; i++)); do
        local start end
        start=$(date +%s.%N)
        "$@" >/dev/null
        end=$(date +%s.%N)
        t=$(calc "$end - $start")
        if [[ -z $best_time ]] || [[ $(calc "int($t < $best_time)") == 1 ]]; then best_time=$t; fi
    done
    printf '%.2f' "$best_time"
}

if [[ -n $baseline ]]; then
    mkdir -p "$work/baseline"
    git -C "$root" archive "$baseline" include | tar -x -C "$work/baseline"
fi

printf '%-5s %-34s %8s %8s\n' opt what seconds "x std"
for opt in -O0 -O2; do
    std_headers "$root/include" -DANVIL_SEPARATE_COMPILATION >"$work/std_separate.cpp"
    std_headers "$root/include" >"$work/std_header_only.cpp"
    base_flags=(-std=c++20 "$opt" -c -o "$work/out.o")
    std_sep=$(best "$cxx" "${base_flags[@]}" "$work/std_separate.cpp")
    std_all=$(best "$cxx" "${base_flags[@]}" "$work/std_header_only.cpp")
    separate=$(best "$cxx" "${base_flags[@]}" -DANVIL_SEPARATE_COMPILATION -I"$root/include" "$work/anvil.cpp")
    header_only=$(best "$cxx" "${base_flags[@]}" -I"$root/include" "$work/anvil.cpp")
    row() { printf '%-5s %-34s %8s %8.2f\n' "$opt" "$1" "$2" "$(calc "$2 / $3")"; }
    row "std (separate mode's)" "$std_sep" "$std_sep"
    row "anvil.hpp, separate" "$separate" "$std_sep"
    row "std (header-only mode's)" "$std_all" "$std_all"
    row "anvil.hpp, header-only" "$header_only" "$std_all"
    if [[ -n $baseline ]]; then
        base=$(best "$cxx" "${base_flags[@]}" -I"$work/baseline/include" "$work/anvil.cpp")
        row "anvil.hpp, header-only, $baseline" "$base" "$std_all"
        printf '%-5s %-34s %8s %8.2f\n' "$opt" "header-only / $baseline" "" "$(calc "$header_only / $base")"
    fi
    quick_sep=$(best "$cxx" "${base_flags[@]}" -DANVIL_SEPARATE_COMPILATION -I"$root/include" "$root/examples/quickstart.cpp")
    quick_all=$(best "$cxx" "${base_flags[@]}" -I"$root/include" "$root/examples/quickstart.cpp")
    row "quickstart.cpp, separate" "$quick_sep" "$std_sep"
    row "quickstart.cpp, header-only" "$quick_all" "$std_all"
done
