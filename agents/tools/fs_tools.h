/*
 * The file tools: "read", "write", "edit" and "list", confined to the
 * workspace of each invocation (pc_tool_env_t.workspace; see workspace.h).
 *
 * All four run on the blocking pool; "write" and "edit" are mutating.
 * Results are plain text without timestamps or inode numbers. Every
 * refusal, missing file and bad argument is an error result the model can
 * read, never a failed invocation. Arguments are checked here as well as by
 * the schema, so a call with wrong types gets an error result too.
 *
 * A regular file with more than one hard link is refused by read, write
 * and edit ("file refused: it has 2 hard links, ..."), checked on the
 * opened file: another of its names may lie outside the workspace. write
 * may still create a new file, and replaces an existing one only when it
 * has a single link. list shows such a file like any other entry: it
 * reads names, never contents.
 *
 * Claude-Code style argument names are accepted as aliases: "file_path"
 * for "path", "old_string" / "new_string" for "oldText" / "newText". When
 * both a name and its alias are given, the name wins.
 *
 *   read {path, offset?, limit?}
 *     The file's text from line `offset` (1-based, default 1), at most
 *     `limit` lines, and never more than 2000 lines or 50 KiB; when lines
 *     remain it ends with "[... N more lines; use offset=K to continue]".
 *     Lines longer than 2000 characters are cut with a marker; bytes that
 *     are not UTF-8 are shown as U+FFFD. A file whose first 8 KiB hold a
 *     NUL byte or invalid UTF-8 is binary: a PNG, JPEG, GIF or WebP image
 *     reads as "[image: image/png, N bytes]" (transcripts here are text
 *     only, so the image itself is not attached), anything else is the
 *     error "binary file, not shown". A directory is an error pointing to
 *     "list"; a missing file is "file not found: <path>".
 *   write {path, content}
 *     Creates missing parent directories and replaces the file atomically
 *     (a temporary file in the same directory, fsync, rename); an existing
 *     file keeps its permission bits. At most 10 MiB. Writing through a
 *     relative symbolic link replaces the link's target when it is inside
 *     the workspace; a link that leads outside, or is absolute, is refused
 *     (workspace.h). "wrote N bytes to <path>".
 *   edit {path, oldText, newText}
 *     Replaces the one exact occurrence of oldText (which must occur
 *     exactly once; overlapping occurrences count) and writes atomically
 *     as "write" does. The result names the line where the change starts.
 *   list {path? = ".", depth? = 1 (1..5)}
 *     Entries sorted by name (bytewise), directories with a trailing "/",
 *     symbolic links as "name -> target" (never followed), hidden entries
 *     included; deeper levels appear as relative paths below their
 *     directory. At most 1000 entries, then "[... N more]".
 */
#ifndef PINCER_AGENTS_TOOLS_FS_TOOLS_H
#define PINCER_AGENTS_TOOLS_FS_TOOLS_H

#include "tool.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_FS_READ_MAX_LINES 2000u
#define PC_FS_READ_MAX_BYTES ((size_t)50 * 1024)
#define PC_FS_READ_MAX_LINE_CHARS 2000u
#define PC_FS_WRITE_MAX_BYTES ((size_t)10 * 1024 * 1024)
#define PC_FS_LIST_MAX_ENTRIES 1000u
#define PC_FS_LIST_MAX_DEPTH 5

/* Registers "read", "write", "edit" and "list" in `r`. PC_EEXIST if one of
 * the names is taken. */
int pc_tool_register_fs(pc_tool_registry_t *r);

#ifdef __cplusplus
}
#endif
#endif
