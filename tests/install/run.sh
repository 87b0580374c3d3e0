#!/usr/bin/env bash
# Installs the build in $1 to a scratch prefix, then builds and runs the
# consumer through find_package(pincer) and through pkg-config, and builds
# every docs/examples program against the install (running one).
# $2: extra C/link flags matching the build (sanitizers).
set -euo pipefail
build=$1
flags=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
	-DPINCER_EXAMPLES_DIR="$here/../../docs/examples" \
	-DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
	-DCMAKE_BUILD_RPATH="$work/prefix/lib;$work/prefix/lib/x86_64-linux-gnu" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer_cmake"
"$work/consumer/consumer_static"
"$work/consumer/example_timers" >/dev/null
libdir=$(find "$work/prefix" -name pincer.pc -printf '%h\n' | head -n1)
export PKG_CONFIG_PATH="$libdir"
# shellcheck disable=SC2046
cc $flags "$here/consumer.c" -o "$work/consumer_pc" $(pkg-config --cflags --libs pincer) \
	-Wl,-rpath,"$(dirname "$libdir")"
"$work/consumer_pc"
