#!/usr/bin/env bash
# Installs the build in $1 to a scratch prefix; compiles every installed
# header on its own; then builds the gateway embedder (agent_consumer.c)
# through find_package(pincer COMPONENTS agent) and through
# `pkg-config pincer-agent`, and runs both.
# $2: extra C/link flags matching the build (sanitizers).
set -euo pipefail
build=$1
flags=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
inc=$work/prefix/include
# Each header stands alone with the documented flags, none is private.
if find "$inc" -name '*_internal.h' | grep .; then
	echo "private headers are installed" >&2
	exit 1
fi
while IFS= read -r h; do
	printf '#include <%s>\n' "$h" | cc -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -fsyntax-only -x c - \
		-I"$inc" -I"$inc/pincer" || { echo "installed header $h does not compile alone" >&2; exit 1; }
done < <(cd "$inc" && find pincer -name '*.h' | sort)

cmake -S "$here" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
	-DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
	-DCMAKE_BUILD_RPATH="$work/prefix/lib;$work/prefix/lib/x86_64-linux-gnu" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/agent_consumer_cmake"
libdir=$(find "$work/prefix" -name pincer-agent.pc -printf '%h\n' | head -n1)
export PKG_CONFIG_PATH="$libdir"
# shellcheck disable=SC2046
cc -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror $flags "$here/agent_consumer.c" -o "$work/agent_consumer_pc" \
	$(pkg-config --cflags --libs pincer-agent) -Wl,-rpath,"$(dirname "$libdir")"
"$work/agent_consumer_pc"
