#!/usr/bin/env bash
# Builds the library, then compiles and runs the C example host, the C ABI tests and a
# C++ check of the header against it, each also under valgrind (zero errors, zero
# leaks of any kind). Then runs tests/c/leak_check.c, a host that forgets one handle,
# under valgrind and requires that handle to be reported as "definitely lost" (so hosts
# can find their own leaks). The last line is the C tests' "N passed, 0 failed".
#
#   scripts/c-tests.sh            debug build (PROFILE=release for a release build)
#
# Uses $CARGO_TARGET_DIR when set (as cargo does), else target/ in the repository.
#
# Needs: cargo, cc, c++, valgrind (apt-get install -y valgrind). SWH_SKIP_VALGRIND=1
# skips the valgrind runs (for machines without it; CI must not set it).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
profile="${PROFILE:-debug}"
target="${CARGO_TARGET_DIR:-$root/target}"
lib="$target/$profile"
out="$target/c-tests"
mkdir -p "$out"

step() { printf '\n== %s\n' "$*"; }

step "cargo build ($profile)"
if [ "$profile" = release ]; then cargo build --release --lib; else cargo build --lib; fi

# The static library's native dependencies on Linux, as printed by
#   cargo rustc --lib --crate-type staticlib -- --print native-static-libs
# (-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc); with cc as the linker, libc and
# libgcc_s come by default and -lutil -lrt are empty on glibc >= 2.34.
native_libs=(-lpthread -ldl -lm)
cflags=(-std=c11 -Wall -Wextra -Werror -pedantic -I include)
valgrind_flags=(--leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all --error-exitcode=1)

step "header compiles as C and C++"
cc "${cflags[@]}" -fsyntax-only -x c include/strategy_webhook.h
c++ -std=c++11 -Wall -Wextra -Werror -fsyntax-only -x c++ include/strategy_webhook.h

step "compile against the static library"
cc "${cflags[@]}" examples/c/host.c "$lib/libstrategy_webhook.a" "${native_libs[@]}" -o "$out/host"
cc "${cflags[@]}" -pthread tests/c/ffi_test.c "$lib/libstrategy_webhook.a" "${native_libs[@]}" -o "$out/ffi_test"
cc "${cflags[@]}" -g tests/c/leak_check.c "$lib/libstrategy_webhook.a" "${native_libs[@]}" -o "$out/leak_check"
c++ -std=c++11 -Wall -Wextra -Werror -I include tests/c/cpp_check.cpp "$lib/libstrategy_webhook.a" \
    "${native_libs[@]}" -o "$out/cpp_check"

step "compile against the shared library"
cc "${cflags[@]}" examples/c/host.c -L "$lib" -lstrategy_webhook -o "$out/host_shared"

step "run the example host (static)"
"$out/host" examples/strategies/demo.json
step "run the example host (shared)"
LD_LIBRARY_PATH="$lib" "$out/host_shared" examples/strategies/demo.json >/dev/null
echo "host_shared: ok"
step "run the C++ check"
"$out/cpp_check"

run_valgrind() {
    local name="$1"
    shift
    local log="$out/valgrind-$name.log"
    if valgrind "${valgrind_flags[@]}" --log-file="$log" "$@" >"$out/$name.stdout"; then
        echo "valgrind $name: $(grep -h 'ERROR SUMMARY' "$log" | sed 's/^==[0-9]*== //'); $(grep -h -e 'All heap blocks were freed' -e 'in use at exit' "$log" | head -1 | sed 's/^==[0-9]*== *//')"
    else
        cat "$log" >&2
        echo "valgrind $name: FAILED (log: $log)" >&2
        exit 1
    fi
}

# Runs leak_check, which leaves its WHICH handle unfreed, under valgrind and requires
# exactly that leak: one block "definitely lost" whose allocation stack names CREATOR
# and leak_check.c, nothing possibly lost or still reachable (the registry of live
# handles must not keep the block reachable), and no other error.
expect_lost() {
    local which="$1" creator="$2"
    local log="$out/valgrind-leak-$which.log"
    local why=""
    if ! valgrind --leak-check=full --num-callers=60 --log-file="$log" "$out/leak_check" "$which" \
        >"$out/leak-$which.stdout"; then
        why="leak_check $which failed before its deliberate leak"
    fi
    # valgrind's lines without their "==PID== " prefix; the lost block's record ends at a blank line.
    local plain record
    plain="$(sed 's/^==[0-9]*== \{0,1\}//' "$log")"
    record="$(printf '%s\n' "$plain" | awk '/are definitely lost in loss record/ {on=1} on && /^$/ {exit} on')"
    [ -n "$why" ] || [ "$(printf '%s\n' "$plain" | grep -c 'are definitely lost in loss record')" = 1 ] ||
        why="expected exactly one definitely lost block"
    [ -n "$why" ] || printf '%s\n' "$record" | grep -q "$creator" || why="the lost block was not allocated by $creator"
    [ -n "$why" ] || printf '%s\n' "$record" | grep -q 'leak_check.c' || why="the lost block's stack does not reach leak_check.c"
    [ -n "$why" ] || printf '%s\n' "$plain" | grep -q 'definitely lost: [0-9,]* bytes in 1 blocks' ||
        why="the leak summary does not show one definitely lost block"
    [ -n "$why" ] || printf '%s\n' "$plain" | grep -q 'possibly lost: 0 bytes in 0 blocks' || why="blocks possibly lost"
    [ -n "$why" ] || printf '%s\n' "$plain" | grep -q 'still reachable: 0 bytes in 0 blocks' ||
        why="blocks still reachable (is the registry keeping a handle's address?)"
    [ -n "$why" ] || printf '%s\n' "$plain" | grep -q 'ERROR SUMMARY: 1 errors from 1 contexts' ||
        why="errors other than the one leak"
    if [ -n "$why" ]; then
        cat "$log" >&2
        echo "valgrind leak_check $which: FAILED: $why (log: $log)" >&2
        exit 1
    fi
    echo "valgrind leak_check $which: $(printf '%s\n' "$plain" | grep -o 'definitely lost: .*') (from $creator), as expected"
}

if [ "${SWH_SKIP_VALGRIND:-0}" = 1 ]; then
    step "valgrind skipped (SWH_SKIP_VALGRIND=1)"
else
    command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install -y valgrind" >&2; exit 1; }
    step "valgrind"
    run_valgrind host "$out/host" examples/strategies/demo.json
    run_valgrind cpp_check "$out/cpp_check"
    run_valgrind ffi_test "$out/ffi_test"
    tail -n 1 "$out/ffi_test.stdout"
    step "valgrind finds a handle the host forgot to free"
    expect_lost engine swh_engine_new
    expect_lost outcome swh_engine_deliver
fi

step "C ABI tests"
"$out/ffi_test"
