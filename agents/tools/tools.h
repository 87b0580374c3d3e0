/*
 * tools: what a model may call. This is the part's one public header; the
 * pieces it gathers say the details.
 *
 *   tool.h           the registry of tool definitions and one actor per
 *                    invocation (tool_lifecycle.h: its states)
 *   fs_tools.h       read, write, edit and list, confined to a workspace
 *   exec_tool.h      commands run under supervision, with their process
 *                    table (process_table.h) and limits
 *   loop_detect.h    a run calling the same tool the same way again
 *   workspace.h      opening paths beneath a directory and never outside
 *                    it (the fs tools' workspace, the gateway's Control UI)
 *
 * Ownership: a registry belongs to its maker and outlives every
 * invocation it started; an invocation's actor owns its arguments and
 * sends its owner exactly one result.
 * Threads: the registry is read from any thread once built; a tool's
 * `call` runs in its actor or on the blocking pool, never on an I/O thread.
 */
#ifndef PINCER_AGENTS_TOOLS_TOOLS_H
#define PINCER_AGENTS_TOOLS_TOOLS_H

#include "exec_tool.h"
#include "fs_tools.h"
#include "loop_detect.h"
#include "process_table.h"
#include "tool.h"
#include "tool_lifecycle.h"
#include "workspace.h"

#endif
