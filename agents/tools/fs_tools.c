/*
 * The file tools (fs_tools.h): read, write, edit and list, each confined to
 * the invocation's workspace through workspace.h.
 *
 * Every call opens the workspace afresh (the environment may name a
 * different root each time), checks its arguments, and writes either a
 * result or an error result into `out`. A tool's function returns
 * PC_ENOMEM only when it could not even allocate its message.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io.h"
#include "fs_tools.h"
#include "workspace.h"

#define SNIFF_BYTES 8192u          /* the first block, checked for binary content */
#define READ_CHUNK ((size_t)65536)
#define TEMP_ATTEMPTS 8
#define COUNT_MAX ((uint64_t)1 << 53) /* integers a JSON number holds exactly */

/* ---- text building ---------------------------------------------------------------- */

/* ---- results ------------------------------------------------------------------------- */

static void result(pc_tool_output_t *out, bool is_error, const char *fmt, va_list ap)
{
	free(out->text);
	if (vasprintf(&out->text, fmt, ap) < 0)
		out->text = NULL;
	out->is_error = is_error;
}

static void fail(pc_tool_output_t *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(pc_tool_output_t *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	result(out, true, fmt, ap);
	va_end(ap);
}

static void succeed(pc_tool_output_t *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void succeed(pc_tool_output_t *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	result(out, false, fmt, ap);
	va_end(ap);
}

/* A result made of the text built in b (taken). */
static void succeed_with(pc_tool_output_t *out, pc__buf_t *b)
{
	free(out->text);
	out->text = pc__buf_take(b);
	out->is_error = false;
}

static const char *lines_word(uint64_t n)
{
	return n == 1 ? "line" : "lines";
}

/* What a tool function returns once `out` is written. */
static int finished(const pc_tool_output_t *out)
{
	return out->text ? 0 : PC_ENOMEM;
}

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* Appends s[0..n) as valid UTF-8: invalid bytes and NUL become U+FFFD,
 * and with `names` set, control characters become '?' (a file name must
 * not break the listing's lines). */
static void sb_add_clean(pc__buf_t *b, const char *s, size_t n, bool names)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, run = 0; /* u[run..i) is clean and not yet copied */
	while (i < n) {
		size_t bad = 1;
		size_t k = u[i] == 0 ? 0 : pc_utf8_seq(s + i, n - i, &bad);
		bool control = names && (u[i] < 0x20 || u[i] == 0x7f);
		if (k > 0 && !control) {
			i += k;
			continue;
		}
		pc__buf_append(b, u + run, i - run);
		pc__buf_append_str(b, control && u[i] != 0 ? "?" : PC_UTF8_REPLACEMENT);
		/* one replacement per maximal subpart, as every tool result gets */
		i += control ? 1 : bad;
		run = i;
	}
	pc__buf_append(b, u + run, i - run);
}

/* ---- arguments ---------------------------------------------------------------------------- */

#define WHY_MAX 160

/* The string argument `name` or its `alias` into *v (NULL when absent or
 * null). False, with the reason in why, when it has another type or is
 * required and absent. */
static bool arg_string(const cJSON *args, const char *name, const char *alias, bool required, const char **v,
		       char *why)
{
	const char *used = name;
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(args, name);
	if ((!it || cJSON_IsNull(it)) && alias) {
		it = cJSON_GetObjectItemCaseSensitive(args, alias);
		used = alias;
	}
	*v = NULL;
	if (!it || cJSON_IsNull(it)) {
		if (required)
			snprintf(why, WHY_MAX, "missing \"%s\"", name);
		return !required;
	}
	if (!cJSON_IsString(it) || !it->valuestring) {
		snprintf(why, WHY_MAX, "\"%s\" must be a string", used);
		return false;
	}
	*v = it->valuestring;
	return true;
}

/* The integer argument `name` in [min, max] into *v, left alone when
 * absent or null. */
static bool arg_count(const cJSON *args, const char *name, uint64_t min, uint64_t max, uint64_t *v, char *why)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(args, name);
	if (!it || cJSON_IsNull(it))
		return true;
	double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
	if (!isfinite(d) || d != floor(d) || d < (double)min || d > (double)max) {
		if (max == COUNT_MAX)
			snprintf(why, WHY_MAX, "\"%s\" must be an integer of at least %" PRIu64, name, min);
		else
			snprintf(why, WHY_MAX, "\"%s\" must be an integer from %" PRIu64 " to %" PRIu64, name, min,
				 max);
		return false;
	}
	*v = (uint64_t)d;
	return true;
}

static void bad_args(pc_tool_output_t *out, const char *tool, const char *why)
{
	fail(out, "Invalid arguments for tool %s: %s", tool, why);
}

static bool args_object(const cJSON *args, const char *tool, pc_tool_output_t *out)
{
	if (cJSON_IsObject(args))
		return true;
	bad_args(out, tool, "expected a JSON object");
	return false;
}

/* The workspace of this call, or false with an error result. */
static bool open_ws(const char *tool, const pc_tool_env_t *env, pc_workspace_t **ws, pc_tool_output_t *out)
{
	char err[PC_WORKSPACE_ERR_MAX];
	if (!env || !env->workspace || !env->workspace[0]) {
		fail(out, "Tool %s needs a workspace, and none is configured", tool);
		return false;
	}
	int rc = pc_workspace_open(env->workspace, ws, err, sizeof(err));
	if (rc == PC_ENOMEM)
		return false;
	if (rc != 0) {
		fail(out, "Tool %s cannot use the workspace: %s", tool, err);
		return false;
	}
	return true;
}

/* ---- files ----------------------------------------------------------------------------------- */

static ssize_t read_full(int fd, void *buf, size_t n, off_t at)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(fd, (char *)buf + got, n - got, at + (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static bool write_full(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

/* Creates a fresh temporary file in dirfd, its name into tmp. O_EXCL
 * never follows a link, so it lands in that directory or nowhere. */
static int create_temp(int dirfd, char tmp[64], mode_t mode)
{
	for (int i = 0; i < TEMP_ATTEMPTS; i++) {
		uint64_t r;
		if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
			return -1;
		snprintf(tmp, 64, ".pincer-%016" PRIx64 ".tmp", r);
		int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	return -1;
}

/* Writes data into a new temporary file of dirfd and syncs it. */
static bool write_temp(int dirfd, char tmp[64], const char *data, size_t len, bool keep_mode, mode_t mode)
{
	int fd = create_temp(dirfd, tmp, keep_mode ? 0600 : 0666);
	if (fd < 0)
		return false;
	bool ok = (!keep_mode || fchmod(fd, mode) == 0) && write_full(fd, data, len) && fsync(fd) == 0;
	int e = errno;
	if (close(fd) != 0 && ok) {
		ok = false;
		e = errno;
	}
	if (!ok) {
		unlinkat(dirfd, tmp, 0);
		errno = e;
	}
	return ok;
}

/* What is at `name` in dirfd now, checked on an fd of it (hard links are
 * refused, workspace.h): *st and *exists. False with an error result. */
static bool existing(int dirfd, const char *name, const char *shown, struct stat *st, bool *exists,
		     pc_tool_output_t *out)
{
	/* O_PATH: no permission needed and nothing opened but the entry;
	 * O_NOFOLLOW: a link swapped in is looked at, not through. */
	int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	*exists = fd >= 0;
	if (fd < 0 && errno != ENOENT) {
		fail(out, "could not write %s: %s", shown, strerror(errno));
		return false;
	}
	if (fd < 0)
		return true;
	char err[PC_WORKSPACE_ERR_MAX];
	int rc = pc_workspace_check_fd(fd, shown, st, err, sizeof(err));
	close(fd);
	if (rc != 0)
		fail(out, "%s", err);
	return rc == 0;
}

/*
 * Replaces `name` in dirfd by data[0..len), atomically: a temporary file
 * in the same directory, fsync, renameat, fsync of the directory. An
 * existing file keeps its permission bits. False with an error result.
 */
static bool replace_file(int dirfd, const char *name, const char *data, size_t len, const char *shown,
			 pc_tool_output_t *out)
{
	struct stat st;
	bool exists = false;
	if (!existing(dirfd, name, shown, &st, &exists, out))
		return false;
	if (exists && S_ISDIR(st.st_mode)) {
		fail(out, "%s is a directory", shown);
		return false;
	}
	if (exists && !S_ISREG(st.st_mode)) {
		fail(out, "not a regular file: %s", shown);
		return false;
	}
	char tmp[64];
	if (!write_temp(dirfd, tmp, data, len, exists, exists ? st.st_mode & 07777 : 0)) {
		fail(out, "could not write %s: %s", shown, strerror(errno));
		return false;
	}
	if (renameat(dirfd, tmp, dirfd, name) != 0) {
		int e = errno;
		unlinkat(dirfd, tmp, 0);
		fail(out, "could not write %s: %s", shown, strerror(e));
		return false;
	}
	/* Makes the rename itself durable; some file systems cannot sync a
	 * directory (EINVAL), which loses nothing the file did not have. */
	if (fsync(dirfd) != 0 && errno != EINVAL) {
		fail(out, "wrote %s but could not sync its directory: %s", shown, strerror(errno));
		return false;
	}
	return true;
}

/* The message for a workspace refusal of `path`, with the tools' own
 * wording for a missing file. */
static void ws_fail(pc_tool_output_t *out, int rc, const char *what, const char *path, const char *err)
{
	if (rc == PC_ENOTFOUND)
		fail(out, "%s not found: %s", what, path);
	else
		fail(out, "%s", err);
}

/* ---- read ------------------------------------------------------------------------------------- */

typedef struct read_args {
	const char *path;
	uint64_t offset;
	uint64_t limit;
} read_args_t;

/* The lines of a file as they stream by, and the text shown of them. */
typedef struct lines {
	uint64_t first, last;  /* the window of lines to show, 1-based */
	uint64_t lineno;       /* the line being read */
	uint64_t shown_last;   /* the last line shown, 0 for none */
	bool full;             /* the output budget is spent */
	bool partial;          /* the current line has bytes */
	pc__buf_t line;           /* the current line's kept bytes, inside the window */
	uint64_t chars;        /* characters of the current line so far */
	pc__buf_t text;
} lines_t;

static bool in_window(const lines_t *l)
{
	return !l->full && l->lineno >= l->first && l->lineno <= l->last;
}

/* Keeps the first PC_FS_READ_MAX_LINE_CHARS characters of the line; a
 * character starts at any byte that is not a UTF-8 continuation byte. */
static void take(lines_t *l, const char *p, size_t n)
{
	size_t keep = 0;
	while (keep < n) {
		bool starts = ((unsigned char)p[keep] & 0xc0) != 0x80;
		if (starts && l->chars == PC_FS_READ_MAX_LINE_CHARS)
			break;
		l->chars += starts;
		keep++;
	}
	pc__buf_append(&l->line, p, keep);
	for (size_t i = keep; i < n; i++)
		l->chars += ((unsigned char)p[i] & 0xc0) != 0x80;
}

static void end_line(lines_t *l, bool newline)
{
	if (in_window(l)) {
		size_t before = l->text.len;
		sb_add_clean(&l->text, l->line.p ? l->line.p : "", l->line.len, false);
		if (l->chars > PC_FS_READ_MAX_LINE_CHARS)
			pc__buf_printf(&l->text, " [... line truncated, %" PRIu64 " more characters]",
				  l->chars - PC_FS_READ_MAX_LINE_CHARS);
		if (newline)
			pc__buf_append_str(&l->text, "\n");
		if (l->text.len > PC_FS_READ_MAX_BYTES) {
			l->text.len = before;
			l->text.p[before] = '\0';
			l->full = true;
		} else {
			l->shown_last = l->lineno;
		}
	}
	l->lineno++;
	l->line.len = 0;
	l->chars = 0;
	l->partial = false;
}

static void feed(lines_t *l, const char *p, size_t n)
{
	while (n > 0) {
		const char *nl = memchr(p, '\n', n);
		size_t seg = nl ? (size_t)(nl - p) : n;
		if (in_window(l))
			take(l, p, seg);
		l->partial = l->partial || seg > 0;
		if (nl) {
			end_line(l, true);
			seg++;
		}
		p += seg;
		n -= seg;
	}
}

static const char *image_type(const unsigned char *h, size_t n)
{
	if (n >= 8 && memcmp(h, "\x89PNG\r\n\x1a\n", 8) == 0)
		return "image/png";
	if (n >= 3 && memcmp(h, "\xff\xd8\xff", 3) == 0)
		return "image/jpeg";
	if (n >= 6 && (memcmp(h, "GIF87a", 6) == 0 || memcmp(h, "GIF89a", 6) == 0))
		return "image/gif";
	if (n >= 12 && memcmp(h, "RIFF", 4) == 0 && memcmp(h + 8, "WEBP", 4) == 0)
		return "image/webp";
	return NULL;
}

/* A NUL byte or invalid UTF-8 in the first block; a sequence cut by the
 * end of a full block does not count. */
static bool looks_binary(const unsigned char *h, size_t n, bool block_full)
{
	if (memchr(h, 0, n))
		return true;
	for (size_t i = 0; i < n;) {
		size_t bad = 0;
		size_t k = pc_utf8_seq((const char *)h + i, n - i, &bad);
		if (k == 0)
			/* a sequence the block's end cut short is no sign */
			return !(block_full && i + bad == n);
		i += k;
	}
	return false;
}

/* Streams the whole file through `l` (the lines after the window are only
 * counted). False with an error result. */
static bool stream_lines(int fd, const char *path, char *buf, lines_t *l, pc_tool_output_t *out)
{
	for (;;) {
		ssize_t r = read(fd, buf, READ_CHUNK);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fail(out, "could not read %s: %s", path, strerror(errno));
			return false;
		}
		if (r == 0)
			break;
		feed(l, buf, (size_t)r);
	}
	if (l->partial)
		end_line(l, false);
	return true;
}

/* The result once the file is streamed: the window's text and, when lines
 * remain, where to continue. */
static void read_result(lines_t *l, const read_args_t *a, pc_tool_output_t *out)
{
	uint64_t total = l->lineno - 1;
	if (total == 0 && a->offset == 1) {
		succeed(out, "[empty file]");
		return;
	}
	if (a->offset > total) {
		fail(out, "offset %" PRIu64 " is beyond the end of %s (%" PRIu64 " lines)", a->offset, a->path, total);
		return;
	}
	uint64_t last = l->shown_last ? l->shown_last : a->offset - 1;
	if (last < total) {
		if (l->text.len > 0 && l->text.p[l->text.len - 1] != '\n')
			pc__buf_append_str(&l->text, "\n");
		pc__buf_printf(&l->text, "\n[... %" PRIu64 " more %s; use offset=%" PRIu64 " to continue]", total - last,
			  lines_word(total - last), last + 1);
	}
	succeed_with(out, &l->text);
}

static void read_text(int fd, off_t size, const read_args_t *a, pc_tool_output_t *out)
{
	char *buf = malloc(READ_CHUNK);
	if (!buf)
		return;
	ssize_t n = read_full(fd, buf, SNIFF_BYTES, 0);
	const unsigned char *h = (const unsigned char *)buf;
	const char *image = n >= 0 ? image_type(h, (size_t)n) : NULL;
	if (n < 0) {
		fail(out, "could not read %s: %s", a->path, strerror(errno));
	} else if (image) {
		succeed(out, "[image: %s, %lld bytes]", image, (long long)size);
	} else if (looks_binary(h, (size_t)n, n == SNIFF_BYTES)) {
		fail(out, "binary file, not shown: %s (%lld bytes)", a->path, (long long)size);
	} else {
		uint64_t want = a->limit < PC_FS_READ_MAX_LINES ? a->limit : PC_FS_READ_MAX_LINES;
		lines_t l = {.first = a->offset, .last = a->offset + want - 1, .lineno = 1};
		if (stream_lines(fd, a->path, buf, &l, out))
			read_result(&l, a, out);
		pc__buf_free(&l.line);
		pc__buf_free(&l.text);
	}
	free(buf);
}

static void read_file(const pc_workspace_t *ws, const read_args_t *a, pc_tool_output_t *out)
{
	char err[PC_WORKSPACE_ERR_MAX];
	int fd = -1;
	/* O_NONBLOCK: opening a FIFO must not hang the call. */
	int rc = pc_workspace_open_file(ws, a->path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, &fd, err, sizeof(err));
	if (rc != 0) {
		ws_fail(out, rc, "file", a->path, err);
		return;
	}
	struct stat st;
	if (fstat(fd, &st) != 0)
		fail(out, "could not read %s: %s", a->path, strerror(errno));
	else if (S_ISDIR(st.st_mode))
		fail(out, "%s is a directory; use the list tool to see its entries", a->path);
	else if (!S_ISREG(st.st_mode))
		fail(out, "not a regular file: %s", a->path);
	else
		read_text(fd, st.st_size, a, out);
	close(fd);
}

static bool read_args(const cJSON *args, read_args_t *a, pc_tool_output_t *out)
{
	char why[WHY_MAX];
	*a = (read_args_t){.offset = 1, .limit = PC_FS_READ_MAX_LINES};
	if (!args_object(args, "read", out))
		return false;
	bool ok = arg_string(args, "path", "file_path", true, &a->path, why) &&
		  arg_count(args, "offset", 1, COUNT_MAX, &a->offset, why) &&
		  arg_count(args, "limit", 1, COUNT_MAX, &a->limit, why);
	if (!ok)
		bad_args(out, "read", why);
	return ok;
}

static int read_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	read_args_t a;
	pc_workspace_t *ws = NULL;
	if (read_args(args, &a, out) && open_ws("read", env, &ws, out))
		read_file(ws, &a, out);
	pc_workspace_free(ws);
	return finished(out);
}

/* ---- write ------------------------------------------------------------------------------------ */

/* Replaces the file at `path` (parents created, final links followed
 * inside the workspace) by data[0..len). False with an error result. */
static bool store_file(const pc_workspace_t *ws, const char *path, const char *data, size_t len, pc_tool_output_t *out)
{
	char err[PC_WORKSPACE_ERR_MAX];
	char name[NAME_MAX + 1];
	int dirfd = -1;
	int rc = pc_workspace_make_parents(ws, path, err, sizeof(err));
	if (rc == 0)
		rc = pc_workspace_open_parent(ws, path, &dirfd, name, err, sizeof(err));
	if (rc != 0) {
		ws_fail(out, rc, "directory", path, err);
		return false;
	}
	bool ok = replace_file(dirfd, name, data, len, path, out);
	close(dirfd);
	return ok;
}

static int write_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	char why[WHY_MAX];
	const char *path = NULL, *content = NULL;
	pc_workspace_t *ws = NULL;
	if (!args_object(args, "write", out))
		return finished(out);
	if (!arg_string(args, "path", "file_path", true, &path, why) ||
	    !arg_string(args, "content", NULL, true, &content, why)) {
		bad_args(out, "write", why);
		return finished(out);
	}
	size_t len = strlen(content);
	if (len > PC_FS_WRITE_MAX_BYTES)
		fail(out, "content is too large: %zu bytes (at most %zu)", len, PC_FS_WRITE_MAX_BYTES);
	else if (open_ws("write", env, &ws, out) && store_file(ws, path, content, len, out))
		succeed(out, "wrote %zu bytes to %s", len, path);
	pc_workspace_free(ws);
	return finished(out);
}

/* ---- edit ------------------------------------------------------------------------------------- */

typedef struct edit_args {
	const char *path;
	const char *old_text;
	const char *new_text;
} edit_args_t;

/* Whether the open file is a regular one with a single link. False with
 * an error result. */
static bool regular(int fd, const char *path, pc_tool_output_t *out)
{
	struct stat st;
	char err[PC_WORKSPACE_ERR_MAX];
	bool ok = pc_workspace_check_fd(fd, path, &st, err, sizeof(err)) == 0;
	if (!ok)
		fail(out, "%s", err);
	else if (S_ISDIR(st.st_mode))
		fail(out, "%s is a directory", path);
	else if (!S_ISREG(st.st_mode))
		fail(out, "not a regular file: %s", path);
	return ok && S_ISREG(st.st_mode);
}

/* Reads fd to its end, up to one byte over the write cap, into b. Not by
 * its size: the file may grow meanwhile, and what the edit writes back
 * must be all of it. */
static bool read_capped(int fd, pc__buf_t *b)
{
	char chunk[8192];
	while (b->len <= PC_FS_WRITE_MAX_BYTES && !b->err) {
		ssize_t r = read(fd, chunk, sizeof(chunk));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r == 0;
		pc__buf_append(b, chunk, (size_t)r);
	}
	return true;
}

/* Reads the regular file `name` of dirfd (at most the write cap) into b.
 * False with an error result. */
static bool load_file(int dirfd, const char *name, const char *path, pc__buf_t *b, pc_tool_output_t *out)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			fail(out, "file not found: %s", path);
		else
			fail(out, "could not read %s: %s", path, strerror(errno));
		return false;
	}
	bool ok = regular(fd, path, out);
	if (ok && !read_capped(fd, b)) {
		fail(out, "could not read %s: %s", path, strerror(errno));
		ok = false;
	} else if (ok && b->len > PC_FS_WRITE_MAX_BYTES) {
		fail(out, "file is too large to edit: %s (more than %zu bytes)", path, PC_FS_WRITE_MAX_BYTES);
		ok = false;
	}
	close(fd);
	return ok && !b->err;
}

/* Occurrences of needle in hay, counting overlapping ones as at least
 * two, and where the first starts. Linear: non-overlapping matches are
 * counted, then one overlap check after a single match. */
static size_t occurrences(const char *hay, size_t n, const char *needle, size_t m, size_t *first)
{
	size_t count = 0;
	const char *p = hay, *end = hay + n;
	const char *hit;
	while ((size_t)(end - p) >= m && (hit = memmem(p, (size_t)(end - p), needle, m))) {
		if (count++ == 0)
			*first = (size_t)(hit - hay);
		p = hit + m;
	}
	if (count == 1 && *first + 1 < n && memmem(hay + *first + 1, n - *first - 1, needle, m))
		count = 2;
	return count;
}

/* s with every line trimmed of surrounding blanks and '\r', and the whole
 * trimmed of blank lines at both ends (caller frees). */
static char *squeeze(const char *s, size_t n)
{
	pc__buf_t b = {0};
	size_t i = 0;
	while (i < n) {
		size_t e = i;
		while (e < n && s[e] != '\n')
			e++;
		size_t a = i, z = e;
		while (a < z && (s[a] == ' ' || s[a] == '\t' || s[a] == '\r'))
			a++;
		while (z > a && (s[z - 1] == ' ' || s[z - 1] == '\t' || s[z - 1] == '\r'))
			z--;
		if (z > a || b.len > 0) {
			pc__buf_append(&b, s + a, z - a);
			pc__buf_append_str(&b, "\n");
		}
		i = e + 1;
	}
	while (b.len > 0 && b.p[b.len - 1] == '\n')
		b.p[--b.len] = '\0';
	return pc__buf_take(&b);
}

/* Whether old matches the file once whitespace and line endings around
 * each line are ignored. */
static bool loose_match(const char *data, size_t len, const char *old)
{
	char *sd = squeeze(data, len);
	char *so = squeeze(old, strlen(old));
	bool hit = sd && so && so[0] && strstr(sd, so);
	free(sd);
	free(so);
	return hit;
}

static size_t newlines(const char *s, size_t n)
{
	size_t count = 0;
	for (const char *p = s, *end = s + n; (p = memchr(p, '\n', (size_t)(end - p))); p++)
		count++;
	return count;
}

/* Lines of s[0..n), a last one without '\n' included. */
static size_t count_lines(const char *s, size_t n)
{
	return newlines(s, n) + (n > 0 && s[n - 1] != '\n');
}

/* The one occurrence of oldText in data[0..len), or false with an error
 * result. */
static bool find_unique(const char *data, size_t len, const edit_args_t *a, size_t *at, pc_tool_output_t *out)
{
	size_t n = occurrences(data, len, a->old_text, strlen(a->old_text), at);
	if (n == 0 && loose_match(data, len, a->old_text))
		fail(out,
		     "oldText not found in %s (it would match if whitespace and line endings were ignored: copy the "
		     "exact text from read, with its indentation and line endings)",
		     a->path);
	else if (n == 0)
		fail(out, "oldText not found in %s", a->path);
	else if (n > 1)
		fail(out, "oldText occurs %zu times in %s; include more context to make it unique", n, a->path);
	return n == 1;
}

/* Applies the edit to data[0..len) and stores it. */
static void apply_edit(int dirfd, const char *name, const char *data, size_t len, const edit_args_t *a,
		       pc_tool_output_t *out)
{
	size_t at = 0;
	if (!find_unique(data, len, a, &at, out))
		return;
	size_t ol = strlen(a->old_text), nl = strlen(a->new_text);
	if (strcmp(a->old_text, a->new_text) == 0) {
		fail(out, "oldText and newText are the same; nothing to change in %s", a->path);
		return;
	}
	if (len - ol + nl > PC_FS_WRITE_MAX_BYTES) {
		fail(out, "the edited file would be too large: %zu bytes (at most %zu)", len - ol + nl,
		     PC_FS_WRITE_MAX_BYTES);
		return;
	}
	pc__buf_t b = {0};
	pc__buf_append(&b, data, at);
	pc__buf_append(&b, a->new_text, nl);
	pc__buf_append(&b, data + at + ol, len - at - ol);
	size_t blen = b.len;
	char *edited = pc__buf_take(&b);
	if (!edited)
		return;
	if (replace_file(dirfd, name, edited, blen, a->path, out)) {
		size_t line = 1 + newlines(data, at);
		size_t gone = count_lines(a->old_text, ol), added = count_lines(a->new_text, nl);
		succeed(out, "edited %s at line %zu (%zu %s replaced by %zu %s)", a->path, line, gone,
			lines_word(gone), added, lines_word(added));
	}
	free(edited);
}

static void edit_file(const pc_workspace_t *ws, const edit_args_t *a, pc_tool_output_t *out)
{
	char err[PC_WORKSPACE_ERR_MAX];
	char name[NAME_MAX + 1];
	int dirfd = -1;
	int rc = pc_workspace_open_parent(ws, a->path, &dirfd, name, err, sizeof(err));
	if (rc != 0) {
		ws_fail(out, rc, "file", a->path, err);
		return;
	}
	pc__buf_t b = {0};
	if (load_file(dirfd, name, a->path, &b, out)) {
		if (memchr(b.p ? b.p : "", 0, b.len))
			fail(out, "binary file, not edited: %s", a->path);
		else
			apply_edit(dirfd, name, b.p ? b.p : "", b.len, a, out);
	}
	free(b.p);
	close(dirfd);
}

static bool edit_args(const cJSON *args, edit_args_t *a, pc_tool_output_t *out)
{
	char why[WHY_MAX];
	*a = (edit_args_t){0};
	if (!args_object(args, "edit", out))
		return false;
	bool ok = arg_string(args, "path", "file_path", true, &a->path, why) &&
		  arg_string(args, "oldText", "old_string", true, &a->old_text, why) &&
		  arg_string(args, "newText", "new_string", true, &a->new_text, why);
	if (ok && a->old_text[0] == '\0') {
		snprintf(why, sizeof(why), "\"oldText\" must not be empty (to replace a whole file, use write)");
		ok = false;
	}
	if (!ok)
		bad_args(out, "edit", why);
	return ok;
}

static int edit_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	edit_args_t a;
	pc_workspace_t *ws = NULL;
	if (edit_args(args, &a, out) && open_ws("edit", env, &ws, out))
		edit_file(ws, &a, out);
	pc_workspace_free(ws);
	return finished(out);
}

/* ---- list ------------------------------------------------------------------------------------- */

typedef struct entry {
	char *name;
	char *target; /* a link's target, else NULL */
	bool dir;
} entry_t;

typedef struct listing {
	pc__buf_t text;
	uint64_t shown;
	uint64_t more;
} listing_t;

typedef struct entries {
	entry_t *v;
	size_t n, cap;
} entries_t;

static void entries_free(entries_t *es)
{
	for (size_t i = 0; i < es->n; i++) {
		free(es->v[i].name);
		free(es->v[i].target);
	}
	free(es->v);
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const entry_t *)a)->name, ((const entry_t *)b)->name);
}

/* A link's target, read without following it (caller frees). */
static char *link_target(int dirfd, const char *name)
{
	char buf[PATH_MAX];
	ssize_t n = readlinkat(dirfd, name, buf, sizeof(buf) - 1);
	if (n < 0)
		return strdup("?");
	buf[n] = '\0';
	return strdup(buf);
}

static int entries_add(entries_t *es, int dirfd, const char *name)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return 0; /* gone since readdir: nothing to show */
	if (PC__GROW(es->v, es->cap, es->n + 1, 64))
		return PC_ENOMEM;
	entry_t e = {.name = strdup(name), .dir = S_ISDIR(st.st_mode)};
	if (S_ISLNK(st.st_mode))
		e.target = link_target(dirfd, name);
	if (!e.name || (S_ISLNK(st.st_mode) && !e.target)) {
		free(e.name);
		free(e.target);
		return PC_ENOMEM;
	}
	es->v[es->n++] = e;
	return 0;
}

/* The entries of d, sorted. errno is kept when reading fails. */
static int read_entries(DIR *d, entries_t *es)
{
	int rc = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			rc = errno ? PC_ESYS : 0;
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		rc = entries_add(es, dirfd(d), de->d_name);
		if (rc != 0)
			break;
	}
	int e = errno;
	if (es->n > 1)
		qsort(es->v, es->n, sizeof(es->v[0]), entry_cmp);
	errno = e;
	return rc;
}

static void emit_entry(listing_t *L, const char *prefix, const entry_t *e)
{
	if (L->shown >= PC_FS_LIST_MAX_ENTRIES) {
		L->more++;
		return;
	}
	L->shown++;
	sb_add_clean(&L->text, prefix, strlen(prefix), true);
	sb_add_clean(&L->text, e->name, strlen(e->name), true);
	if (e->dir)
		pc__buf_append_str(&L->text, "/");
	if (e->target) {
		pc__buf_append_str(&L->text, " -> ");
		sb_add_clean(&L->text, e->target, strlen(e->target), true);
	}
	pc__buf_append_str(&L->text, "\n");
}

static int list_dir(int fd, const char *prefix, int depth, listing_t *L);

/* Lists subdirectory `e` of d below its own line. A directory that cannot
 * be read says so in place of its entries. */
static int list_sub(DIR *d, const char *prefix, const entry_t *e, int depth, listing_t *L)
{
	char *sub = NULL;
	if (asprintf(&sub, "%s%s/", prefix, e->name) < 0)
		return PC_ENOMEM;
	/* A single name with O_NOFOLLOW: a link swapped in is not entered. */
	int fd = openat(dirfd(d), e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int rc = fd >= 0 ? list_dir(fd, sub, depth, L) : PC_ESYS;
	if (rc == PC_ESYS && L->shown < PC_FS_LIST_MAX_ENTRIES) {
		const char *why = strerror(errno);
		pc__buf_append_str(&L->text, "[... cannot list ");
		sb_add_clean(&L->text, sub, strlen(sub), true);
		pc__buf_printf(&L->text, ": %s]\n", why);
	}
	free(sub);
	return rc == PC_ESYS ? 0 : rc;
}

/* Lists the directory open as fd (taken) under `prefix`, `depth` levels. */
static int list_dir(int fd, const char *prefix, int depth, listing_t *L)
{
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		errno = e;
		return PC_ESYS;
	}
	entries_t es = {0};
	int rc = read_entries(d, &es);
	for (size_t i = 0; rc == 0 && i < es.n; i++) {
		emit_entry(L, prefix, &es.v[i]);
		if (es.v[i].dir && depth > 1)
			rc = list_sub(d, prefix, &es.v[i], depth - 1, L);
	}
	int e = errno;
	entries_free(&es);
	closedir(d);
	errno = e;
	return rc;
}

static void list_path(const pc_workspace_t *ws, const char *path, int depth, pc_tool_output_t *out)
{
	char err[PC_WORKSPACE_ERR_MAX];
	int fd = -1;
	int rc = pc_workspace_open_file(ws, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, &fd, err, sizeof(err));
	if (rc != 0) {
		ws_fail(out, rc, "directory", path, err);
		return;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fail(out, "%s is not a directory; use the read tool to see a file", path);
		close(fd);
		return;
	}
	listing_t L = {0};
	rc = list_dir(fd, "", depth, &L);
	if (rc == PC_ESYS)
		fail(out, "could not list %s: %s", path, strerror(errno));
	else if (rc == 0 && L.shown == 0)
		succeed(out, "[empty directory]");
	else if (rc == 0) {
		if (L.more)
			pc__buf_printf(&L.text, "[... %" PRIu64 " more]\n", L.more);
		succeed_with(out, &L.text);
	}
	free(pc__buf_take(&L.text));
}

static int list_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	char why[WHY_MAX];
	const char *path = NULL;
	uint64_t depth = 1;
	pc_workspace_t *ws = NULL;
	if (!args_object(args, "list", out))
		return finished(out);
	if (!arg_string(args, "path", "file_path", false, &path, why) ||
	    !arg_count(args, "depth", 1, PC_FS_LIST_MAX_DEPTH, &depth, why)) {
		bad_args(out, "list", why);
		return finished(out);
	}
	if (open_ws("list", env, &ws, out))
		list_path(ws, path ? path : ".", (int)depth, out);
	pc_workspace_free(ws);
	return finished(out);
}

/* ---- registration --------------------------------------------------------------------------- */

/* The "path" property and its alias; `what` ends the description. */
#define PATH_PROPS(what)                                                                                   \
	"\"path\":{\"type\":\"string\",\"description\":\"" what " relative to the workspace root (an "        \
	"absolute path must lie inside the workspace). Alias: file_path.\"},"                             \
	"\"file_path\":{\"type\":\"string\",\"description\":\"Alias of path.\"}"

static const pc_tool_def_t fs_defs[] = {
	{
		.name = "read",
		.description = "Reads a text file of the workspace. Shows at most 2000 lines or 50 KiB; use offset and "
			       "limit to page through longer files. Lines over 2000 characters are cut. Images are "
			       "described, not shown; other binary files are refused.",
		.parameters = "{\"type\":\"object\",\"properties\":{" PATH_PROPS("The file,") ","
			      "\"offset\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"First line to show, "
			      "1-based (default 1).\"},"
			      "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"Lines to show at most "
			      "(default 2000, which is also the cap).\"}},\"additionalProperties\":false}",
		.parallel_safe = true,
		.blocking = true,
		.call = read_call,
	},
	{
		.name = "write",
		.description = "Creates or replaces a file of the workspace with the given content (at most 10 MiB), "
			       "creating missing parent directories.",
		.parameters = "{\"type\":\"object\",\"properties\":{" PATH_PROPS("The file,") ","
			      "\"content\":{\"type\":\"string\",\"description\":\"The whole new content of the "
			      "file.\"}},\"required\":[\"content\"],\"additionalProperties\":false}",
		.blocking = true,
		.mutating = true,
		.call = write_call,
	},
	{
		.name = "edit",
		.description = "Replaces one exact occurrence of oldText by newText in a file of the workspace. "
			       "oldText must match the file exactly, whitespace and line endings included, and occur "
			       "exactly once: include surrounding lines to make it unique.",
		.parameters = "{\"type\":\"object\",\"properties\":{" PATH_PROPS("The file,") ","
			      "\"oldText\":{\"type\":\"string\",\"minLength\":1,\"description\":\"The exact text to "
			      "replace. Alias: old_string.\"},"
			      "\"old_string\":{\"type\":\"string\",\"description\":\"Alias of oldText.\"},"
			      "\"newText\":{\"type\":\"string\",\"description\":\"The text to put in its place. "
			      "Alias: new_string.\"},"
			      "\"new_string\":{\"type\":\"string\",\"description\":\"Alias of newText.\"}},"
			      "\"additionalProperties\":false}",
		.blocking = true,
		.mutating = true,
		.call = edit_call,
	},
	{
		.name = "list",
		.description = "Lists a directory of the workspace: entries sorted by name, hidden ones included; "
			       "directories end with '/', symbolic links show as 'name -> target'. With depth above 1, "
			       "subdirectories are listed too, as paths below their directory. At most 1000 entries.",
		.parameters = "{\"type\":\"object\",\"properties\":{" PATH_PROPS("The directory (default: the root),") ","
			      "\"depth\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":5,\"description\":\"Levels to "
			      "list (default 1).\"}},\"additionalProperties\":false}",
		.parallel_safe = true,
		.blocking = true,
		.call = list_call,
	},
};

int pc_tool_register_fs(pc_tool_registry_t *r)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < sizeof(fs_defs) / sizeof(fs_defs[0]); i++)
		rc = pc_tool_register(r, &fs_defs[i]);
	return rc;
}
