/*
 * Programs that run other programs: the names `allowlist` mode refuses in
 * its list (agents.defaults.tools.exec.allow; docs/tools.md).
 *
 * allowlist mode confines the program a command starts, never what it
 * does with its arguments. A launcher (`env sh -c ...`, `xargs`, `find
 * -exec`, `nice`, `timeout`, `sudo`) or an interpreter (`sh`, `python3`,
 * `perl -e`, `node -e`, `awk 'BEGIN{system(...)}'`) in the list would let
 * any command through, so listing one is a configuration error rather
 * than a silent hole. The list is fixed here; it cannot name every
 * program whose arguments or files can run a command (git aliases and
 * hooks, make, tar --to-command, editors), which is why arguments are
 * documented as not confined.
 *
 * Here, beside the configuration, because both its check at load and the
 * exec tool's registration (agents/tools, which stands above) read it.
 */
#ifndef PINCER_AGENTS_CONFIG_EXEC_LAUNCHERS_H
#define PINCER_AGENTS_CONFIG_EXEC_LAUNCHERS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * True when `name` is a launcher or an interpreter of the fixed list,
 * compared by its basename (so "/usr/bin/env" is "env"), also with a
 * version after it ("python3.11", "perl5.36", "lua5.4" and "node-18"
 * match "python", "perl", "lua" and "node"). NULL is false.
 */
bool pc_exec_is_launcher(const char *name);

#ifdef __cplusplus
}
#endif
#endif
