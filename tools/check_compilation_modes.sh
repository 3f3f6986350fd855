#!/usr/bin/env bash
# Links anvil in both compilation modes (compilation.hpp), to catch what only the linker sees:
#   header-only: two files that include the given headers (default: anvil/anvil.hpp), linked together — a
#                definition missing ANVIL_INLINE is defined twice;
#   separate:    the implementation unit (anvil/src.hpp) and a file that includes the headers with
#                ANVIL_SEPARATE_COMPILATION and takes the address of nothing in particular — plus, with
#                ANVIL_CHECK_CALLS=FILE.cpp, that file's calls, which must all resolve to the library.
# Usage: tools/check_compilation_modes.sh [header ...]     (CXX overrides g++; -O0 to keep it quick)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cxx=${CXX:-g++}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
headers=("$@")
((${#headers[@]})) || headers=(anvil/anvil.hpp)
includes=""
for header in "${headers[@]}"; do includes+="#include <${header}>"$'\n'; done
flags=(-std=c++20 -O0 -Wall -Wextra -Wpedantic -Wshadow -Werror -I"$root/include")

printf '%s' "$includes" >"$work/a.cpp"
printf '%s' "$includes" >"$work/b.cpp"
printf '%sint main() { return 0; }\n' "$includes" >"$work/main.cpp"
echo "check_compilation_modes: header-only (${headers[*]})"
for unit in a b main; do "$cxx" "${flags[@]}" -c "$work/$unit.cpp" -o "$work/$unit.o" & done
wait
"$cxx" "$work/a.o" "$work/b.o" "$work/main.o" -o "$work/header_only" -pthread -ldl

echo "check_compilation_modes: separate (anvil/src.hpp + ${headers[*]})"
printf '#include <anvil/src.hpp>\n' >"$work/src.cpp"
calls=${ANVIL_CHECK_CALLS:-$work/main.cpp}
"$cxx" "${flags[@]}" -c "$work/src.cpp" -o "$work/src.o" &
"$cxx" "${flags[@]}" -DANVIL_SEPARATE_COMPILATION -c "$calls" -o "$work/user.o" &
"$cxx" "${flags[@]}" -DANVIL_SEPARATE_COMPILATION -c "$work/a.cpp" -o "$work/a_separate.o" &
wait
"$cxx" "$work/src.o" "$work/user.o" "$work/a_separate.o" -o "$work/separate" -pthread -ldl
echo "check_compilation_modes: both modes link"
