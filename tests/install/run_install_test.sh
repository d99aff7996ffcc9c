#!/bin/sh
# Installs a built attn into a fresh prefix, then builds and runs tests/c/api_test.c against
# it twice: through pkg-config (plain and --static) and through find_package(attn CONFIG).
# Usage: run_install_test.sh <build dir> <tests source dir> <C compiler> <cmake>
set -eu
build=$1 tests=$2 cc=$3 cmake=$4
work=$build/install_consumer
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; exit 1; }
for f in include/attn/attn.h lib/libattn.a lib/cmake/attn/attnConfig.cmake lib/pkgconfig/attn.pc; do
    test -f "$prefix/$f" || { echo "missing after install: $f"; exit 1; }
done
# The shared library, when the build made one (ATTN_BUILD_SHARED), is installed beside it.
if [ -e "$build/src/libattn.so" ]; then
    test -e "$prefix/lib/libattn.so" || { echo "missing after install: lib/libattn.so"; exit 1; }
fi

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
for mode in "" "--static"; do
    flags=$(pkg-config --cflags --libs $mode attn)
    echo "== $cc api_test.c $flags   (pkg-config $mode)"
    # shellcheck disable=SC2086  # the flags are a word list
    "$cc" -std=c99 -o "$work/api_test_pc" "$tests/c/api_test.c" $flags
    "$work/api_test_pc"
done

echo "== find_package(attn CONFIG) consumer"
"$cmake" -S "$tests/install" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release >"$work/consumer.log" 2>&1 ||
    { cat "$work/consumer.log"; exit 1; }
"$cmake" --build "$work/consumer" --verbose >>"$work/consumer.log" 2>&1 ||
    { cat "$work/consumer.log"; exit 1; }
grep -E -- "-o attn_consumer|attn_consumer " "$work/consumer.log" | tail -n 1
"$work/consumer/attn_consumer"
echo "install consumer: OK"
