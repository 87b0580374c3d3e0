/*
 * The file tools (read, write, edit, list) through the real invocation
 * actor: each call goes through pc_tool_invoke_start and its one
 * PC_MSG_TOOL_DONE, on a fresh workspace under /tmp with a sibling
 * "outside" directory holding secret.txt ("SECRET"), which no call may
 * read, change or create files next to (tool_fs_fixture.h).
 */
#include "tool_fs_fixture.h"

/* ---- registration ------------------------------------------------------------------ */

Test(fs_tools, registration)
{
	pc_tool_registry_t *r = NULL;
	cr_assert_eq(pc_tool_registry_new(&r), 0);
	cr_assert_eq(pc_tool_register_fs(r), 0);
	cr_assert_eq(pc_tool_count(r), 4u);
	const char *names[] = {"read", "write", "edit", "list"};
	for (size_t i = 0; i < 4; i++) {
		const pc_tool_def_t *d = pc_tool_find(r, names[i]);
		cr_assert_not_null(d, "%s", names[i]);
		cr_assert(d->blocking, "%s", names[i]);
		cr_assert_eq(d->mutating, i == 1 || i == 2, "%s", names[i]);
	}
	cJSON *schemas = NULL;
	cr_assert_eq(pc_tool_schemas(r, NULL, 0, &schemas), 0);
	const cJSON *edit = cJSON_GetArrayItem(schemas, 2);
	const cJSON *props =
		cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(edit, "parameters"), "properties");
	cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(props, "old_string"));
	cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(props, "file_path"));
	cJSON_Delete(schemas);
	cr_assert_eq(pc_tool_register_fs(r), PC_EEXIST);
	pc_tool_registry_free(r);
}

/* ---- read ----------------------------------------------------------------------------- */

Test(fs_tools, read_whole_and_alias)
{
	fx_t *f = fx_new();
	put(f->root, "a.txt", "one\ntwo\nthree\n");
	expect_ok(call(f, "read", "{\"path\":\"a.txt\"}"), "one\ntwo\nthree\n");
	expect_ok(call(f, "read", "{\"file_path\":\"a.txt\",\"limit\":1}"),
		  "one\n\n[... 2 more lines; use offset=2 to continue]");
	put(f->root, "b.txt", "x\ny");
	expect_ok(call(f, "read", "{\"path\":\"b.txt\"}"), "x\ny");
	expect_ok(call(f, "read", "{\"path\":\"b.txt\",\"limit\":1}"), "x\n\n[... 1 more line; use offset=2 to continue]");
	put(f->root, "empty.txt", "");
	expect_ok(call(f, "read", "{\"path\":\"empty.txt\"}"), "[empty file]");
	char abs[PATH_MAX + 32];
	snprintf(abs, sizeof(abs), "{\"path\":\"%s/a.txt\",\"offset\":3}", f->root);
	expect_ok(call(f, "read", abs), "three\n");
	fx_free(f);
}

Test(fs_tools, read_offset_limit)
{
	fx_t *f = fx_new();
	char text[256] = "";
	for (int i = 1; i <= 10; i++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "line%d\n", i);
	put(f->root, "ten.txt", text);
	expect_ok(call(f, "read", "{\"path\":\"ten.txt\",\"offset\":3,\"limit\":2}"),
		  "line3\nline4\n\n[... 6 more lines; use offset=5 to continue]");
	expect_ok(call(f, "read", "{\"path\":\"ten.txt\",\"offset\":10}"), "line10\n");
	expect_ok(call(f, "read", "{\"path\":\"ten.txt\",\"offset\":9,\"limit\":50}"), "line9\nline10\n");
	expect_error(call(f, "read", "{\"path\":\"ten.txt\",\"offset\":11}"),
		     "offset 11 is beyond the end of ten.txt (10 lines)");
	expect_error(call(f, "read", "{\"path\":\"ten.txt\",\"offset\":1000000000000000}"), "beyond the end");
	expect_error(call(f, "read", "{\"path\":\"empty.txt\"}"), "file not found: empty.txt");
	put(f->root, "empty.txt", "");
	expect_error(call(f, "read", "{\"path\":\"empty.txt\",\"offset\":2}"), "beyond the end");
	fx_free(f);
}

Test(fs_tools, read_line_cap)
{
	fx_t *f = fx_new();
	size_t cap = 2500 * 8;
	char *text = malloc(cap);
	cr_assert_not_null(text);
	size_t len = 0;
	for (int i = 1; i <= 2500; i++)
		len += (size_t)snprintf(text + len, cap - len, "%d\n", i);
	put(f->root, "many.txt", text);
	rec_t r = call(f, "read", "{\"path\":\"many.txt\"}");
	cr_assert_not(r.is_error, "%s", r.text);
	cr_assert(strncmp(r.text, "1\n2\n3\n", 6) == 0);
	cr_assert_not_null(strstr(r.text, "\n2000\n\n[... 500 more lines; use offset=2001 to continue]"), "%.200s",
			   r.text + strlen(r.text) - 200);
	cr_assert_null(strstr(r.text, "\n2001\n"));
	free(r.text);
	/* A larger limit does not lift the cap. */
	r = call(f, "read", "{\"path\":\"many.txt\",\"offset\":2,\"limit\":5000}");
	cr_assert_not_null(strstr(r.text, "\n2001\n\n[... 499 more lines; use offset=2002 to continue]"));
	free(r.text);
	expect_ok(call(f, "read", "{\"path\":\"many.txt\",\"offset\":2001,\"limit\":5000}"), strstr(text, "\n2001\n") + 1);
	free(text);
	fx_free(f);
}

Test(fs_tools, read_byte_cap)
{
	fx_t *f = fx_new();
	/* 1000 lines of 100 characters: 101 000 bytes, about twice the cap. */
	char *text = malloc(101 * 1000 + 1);
	cr_assert_not_null(text);
	for (int i = 0; i < 1000; i++) {
		memset(text + i * 101, 'a' + i % 26, 100);
		text[i * 101 + 100] = '\n';
	}
	text[101 * 1000] = '\0';
	put(f->root, "wide.txt", text);
	rec_t r = call(f, "read", "{\"path\":\"wide.txt\"}");
	cr_assert_not(r.is_error, "%s", r.text);
	/* 50 KiB hold 506 whole lines of 101 bytes. */
	size_t shown = 506 * 101;
	cr_assert(strncmp(r.text, text, shown) == 0);
	cr_assert_str_eq(r.text + shown, "\n[... 494 more lines; use offset=507 to continue]");
	free(r.text);
	free(text);
	fx_free(f);
}

Test(fs_tools, read_long_lines)
{
	fx_t *f = fx_new();
	char *line = malloc(5000 * 2 + 2);
	cr_assert_not_null(line);
	memset(line, 'x', 5000);
	strcpy(line + 5000, "\n");
	put(f->root, "long.txt", line);
	rec_t r = call(f, "read", "{\"path\":\"long.txt\"}");
	cr_assert_eq(strspn(r.text, "x"), 2000u);
	cr_assert_str_eq(r.text + 2000, " [... line truncated, 3000 more characters]\n");
	free(r.text);
	/* Characters, not bytes: 2500 two-byte characters keep 2000. */
	for (int i = 0; i < 2500; i++)
		memcpy(line + 2 * i, "\xc3\xa9", 2);
	line[5000] = '\0';
	put(f->root, "long_utf8.txt", line);
	r = call(f, "read", "{\"path\":\"long_utf8.txt\"}");
	cr_assert(strncmp(r.text, line, 4000) == 0);
	cr_assert_str_eq(r.text + 4000, " [... line truncated, 500 more characters]");
	free(r.text);
	free(line);
	fx_free(f);
}

/* Invalid UTF-8 after the first block is shown as U+FFFD, never passed on:
 * one per maximal subpart (a cut-short sequence is one), as every tool
 * result gets. */
Test(fs_tools, read_invalid_utf8_after_first_block)
{
	fx_t *f = fx_new();
	char text[9100];
	memset(text, 'a', 9000);
	text[8999] = '\n';
	memcpy(text + 9000, "b\xff" "c\xe2\x82" "d\n", 8);
	put(f->root, "late.txt", text);
	rec_t r = call(f, "read", "{\"path\":\"late.txt\",\"offset\":2}");
	cr_assert_str_eq(r.text, "b\xef\xbf\xbd" "c\xef\xbf\xbd" "d\n");
	free(r.text);
	fx_free(f);
}

Test(fs_tools, read_binary_and_images)
{
	fx_t *f = fx_new();
	put_n(f->root, "nul.bin", "ab\0cd", 5);
	expect_error(call(f, "read", "{\"path\":\"nul.bin\"}"), "binary file, not shown: nul.bin (5 bytes)");
	put(f->root, "latin1.txt", "caf\xe9\n");
	expect_error(call(f, "read", "{\"path\":\"latin1.txt\"}"), "binary file, not shown");
	unsigned char img[100] = {0};
	struct {
		const char *name, *magic, *mime;
		size_t n;
	} kinds[] = {
		{"p.png", "\x89PNG\r\n\x1a\n", "image/png", 8},
		{"j.jpg", "\xff\xd8\xff\xe0", "image/jpeg", 4},
		{"g.gif", "GIF89a", "image/gif", 6},
		{"w.webp", "RIFF\x10\0\0\0WEBP", "image/webp", 12},
	};
	for (size_t i = 0; i < 4; i++) {
		memcpy(img, kinds[i].magic, kinds[i].n);
		put_n(f->root, kinds[i].name, img, sizeof(img));
		char args[64], want[64];
		snprintf(args, sizeof(args), "{\"path\":\"%s\"}", kinds[i].name);
		snprintf(want, sizeof(want), "[image: %s, 100 bytes]", kinds[i].mime);
		expect_ok(call(f, "read", args), want);
	}
	/* A truncated character at the end of the first block is not binary. */
	char text[8200];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = i % 50 == 49 ? '\n' : 'z';
	memcpy(text + 8191, "\xc3\xa9", 2);
	text[sizeof(text) - 1] = '\0';
	put(f->root, "edge.txt", text);
	rec_t r = call(f, "read", "{\"path\":\"edge.txt\"}");
	cr_assert_not(r.is_error, "%s", r.text);
	cr_assert_str_eq(r.text, text);
	free(r.text);
	fx_free(f);
}

Test(fs_tools, read_not_a_file)
{
	fx_t *f = fx_new();
	mkdir_at(f->root, "sub");
	expect_error(call(f, "read", "{\"path\":\"sub\"}"), "sub is a directory; use the list tool");
	expect_error(call(f, "read", "{\"path\":\"missing.txt\"}"), "file not found: missing.txt");
	expect_error(call(f, "read", "{\"path\":\"sub/missing.txt\"}"), "file not found: sub/missing.txt");
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/fifo", f->root);
	cr_assert_eq(mkfifo(p, 0600), 0);
	/* Must not block waiting for a writer. */
	expect_error(call(f, "read", "{\"path\":\"fifo\"}"), "not a regular file: fifo");
	fx_free(f);
}

/* ---- write ------------------------------------------------------------------------------ */

Test(fs_tools, write_create_overwrite)
{
	fx_t *f = fx_new();
	rec_t r = call(f, "write", "{\"path\":\"new.txt\",\"content\":\"hello\\n\"}");
	cr_assert(r.mutating);
	expect_ok(r, "wrote 6 bytes to new.txt");
	assert_content(f->root, "new.txt", "hello\n");
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/new.txt", f->root);
	cr_assert_eq(chmod(p, 0640), 0);
	expect_ok(call(f, "write", "{\"file_path\":\"new.txt\",\"content\":\"\"}"), "wrote 0 bytes to new.txt");
	assert_content(f->root, "new.txt", "");
	struct stat st;
	cr_assert_eq(stat(p, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0640u, "mode %o", st.st_mode & 07777);
	/* No temporary file is left behind. */
	cr_assert_eq(entry_count(f->root), 1);
	fx_free(f);
}

Test(fs_tools, write_parents_and_targets)
{
	fx_t *f = fx_new();
	expect_ok(call(f, "write", "{\"path\":\"a/b/c.txt\",\"content\":\"deep\"}"), "wrote 4 bytes to a/b/c.txt");
	assert_content(f->root, "a/b/c.txt", "deep");
	expect_error(call(f, "write", "{\"path\":\"a/b\",\"content\":\"x\"}"), "a/b is a directory");
	expect_error(call(f, "write", "{\"path\":\"a/b/c.txt/d\",\"content\":\"x\"}"), "not a directory");
	expect_error(call(f, "write", "{\"path\":\".\",\"content\":\"x\"}"), "not a file");
	/* Through a link that stays inside: its target is replaced, the link stays. */
	link_at(f->root, "to_c", "a/b/c.txt");
	expect_ok(call(f, "write", "{\"path\":\"to_c\",\"content\":\"via link\"}"), "wrote 8 bytes to to_c");
	assert_content(f->root, "a/b/c.txt", "via link");
	struct stat st;
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/to_c", f->root);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert(S_ISLNK(st.st_mode));
	fx_free(f);
}

Test(fs_tools, write_too_large)
{
	fx_t *f = fx_new();
	size_t n = PC_FS_WRITE_MAX_BYTES + 1;
	char *big = malloc(n + 1);
	cr_assert_not_null(big);
	memset(big, 'q', n);
	big[n] = '\0';
	rec_t r = call_obj(f, "write", args_path("big.txt", "content", big));
	expect_error(r, "content is too large: 10485761 bytes (at most 10485760)");
	cr_assert_not(exists_at(f->root, "big.txt"));
	/* Exactly the cap is fine. */
	big[n - 1] = '\0';
	expect_ok(call_obj(f, "write", args_path("big.txt", "content", big)), "wrote 10485760 bytes to big.txt");
	free(big);
	fx_free(f);
}

/* ---- edit --------------------------------------------------------------------------------- */

Test(fs_tools, edit_unique)
{
	fx_t *f = fx_new();
	put(f->root, "e.txt", "alpha\nbeta\ngamma\n");
	rec_t r = call(f, "edit", "{\"path\":\"e.txt\",\"oldText\":\"beta\",\"newText\":\"BETA\"}");
	cr_assert(r.mutating);
	expect_ok(r, "edited e.txt at line 2 (1 line replaced by 1 line)");
	assert_content(f->root, "e.txt", "alpha\nBETA\ngamma\n");
	expect_ok(call(f, "edit", "{\"file_path\":\"e.txt\",\"old_string\":\"BETA\\ngamma\\n\",\"new_string\":\"\"}"),
		  "edited e.txt at line 2 (2 lines replaced by 0 lines)");
	assert_content(f->root, "e.txt", "alpha\n");
	expect_ok(call(f, "edit", "{\"path\":\"e.txt\",\"oldText\":\"ph\",\"newText\":\"1\\n2\\n3\"}"),
		  "edited e.txt at line 1 (1 line replaced by 3 lines)");
	assert_content(f->root, "e.txt", "al1\n2\n3a\n");
	cr_assert_eq(entry_count(f->root), 1);
	/* Through a link that stays inside: the target changes, the link stays. */
	link_at(f->root, "to_e", "e.txt");
	expect_ok(call(f, "edit", "{\"path\":\"to_e\",\"oldText\":\"al\",\"newText\":\"AL\"}"),
		  "edited to_e at line 1 (1 line replaced by 1 line)");
	assert_content(f->root, "e.txt", "AL1\n2\n3a\n");
	struct stat st;
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/to_e", f->root);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert(S_ISLNK(st.st_mode));
	fx_free(f);
}

Test(fs_tools, edit_failures)
{
	fx_t *f = fx_new();
	put(f->root, "e.txt", "x = 1\nx = 1\naaa\n");
	expect_error(call(f, "edit", "{\"path\":\"e.txt\",\"oldText\":\"y = 2\",\"newText\":\"z\"}"),
		     "oldText not found in e.txt");
	expect_error(call(f, "edit", "{\"path\":\"e.txt\",\"oldText\":\"x = 1\",\"newText\":\"z\"}"),
		     "oldText occurs 2 times in e.txt; include more context to make it unique");
	/* Overlapping occurrences count. */
	expect_error(call(f, "edit", "{\"path\":\"e.txt\",\"oldText\":\"aa\",\"newText\":\"b\"}"), "occurs 2 times");
	expect_error(call(f, "edit", "{\"path\":\"e.txt\",\"oldText\":\"aaa\",\"newText\":\"aaa\"}"),
		     "nothing to change");
	expect_error(call(f, "edit", "{\"path\":\"none.txt\",\"oldText\":\"a\",\"newText\":\"b\"}"),
		     "file not found: none.txt");
	expect_error(call(f, "edit", "{\"path\":\"nodir/none.txt\",\"oldText\":\"a\",\"newText\":\"b\"}"),
		     "file not found: nodir/none.txt");
	mkdir_at(f->root, "d");
	expect_error(call(f, "edit", "{\"path\":\"d\",\"oldText\":\"a\",\"newText\":\"b\"}"), "d is a directory");
	put_n(f->root, "bin", "a\0b", 3);
	expect_error(call(f, "edit", "{\"path\":\"bin\",\"oldText\":\"a\",\"newText\":\"b\"}"), "binary file");
	char *big = malloc(PC_FS_WRITE_MAX_BYTES + 2);
	cr_assert_not_null(big);
	memset(big, 'a', PC_FS_WRITE_MAX_BYTES + 1);
	big[PC_FS_WRITE_MAX_BYTES + 1] = '\0';
	put(f->root, "big", big);
	expect_error(call(f, "edit", "{\"path\":\"big\",\"oldText\":\"a\",\"newText\":\"b\"}"),
		     "file is too large to edit: big");
	/* At the cap, an edit that would grow the file past it is refused. */
	big[PC_FS_WRITE_MAX_BYTES - 1] = 'X';
	big[PC_FS_WRITE_MAX_BYTES] = '\0';
	put(f->root, "full", big);
	free(big);
	expect_error(call(f, "edit", "{\"path\":\"full\",\"oldText\":\"X\",\"newText\":\"YY\"}"),
		     "the edited file would be too large: 10485761 bytes");
	expect_ok(call(f, "edit", "{\"path\":\"full\",\"oldText\":\"aX\",\"newText\":\"Y\"}"), NULL);
	assert_content(f->root, "e.txt", "x = 1\nx = 1\naaa\n");
	fx_free(f);
}

Test(fs_tools, edit_whitespace_hint)
{
	fx_t *f = fx_new();
	put(f->root, "crlf.txt", "int main() {\r\n    foo();  \r\n    bar();\r\n}\r\n");
	rec_t r = call(f, "edit", "{\"path\":\"crlf.txt\",\"oldText\":\"foo();\\nbar();\",\"newText\":\"baz();\"}");
	cr_assert_not_null(strstr(r.text, "whitespace and line endings"), "%s", r.text);
	expect_error(r, "oldText not found in crlf.txt");
	/* No hint when the text is simply absent. */
	r = call(f, "edit", "{\"path\":\"crlf.txt\",\"oldText\":\"qux();\",\"newText\":\"baz();\"}");
	cr_assert_null(strstr(r.text, "whitespace"), "%s", r.text);
	expect_error(r, "oldText not found");
	/* The exact text, CRs included, works. */
	expect_ok(call(f, "edit", "{\"path\":\"crlf.txt\",\"oldText\":\"foo();  \\r\\n\",\"newText\":\"\"}"),
		  "edited crlf.txt at line 2 (1 line replaced by 0 lines)");
	assert_content(f->root, "crlf.txt", "int main() {\r\n        bar();\r\n}\r\n");
	fx_free(f);
}

/* ---- list ----------------------------------------------------------------------------------- */

static void make_listing_tree(fx_t *f)
{
	put(f->root, "b.txt", "b");
	put(f->root, ".hidden", "h");
	mkdir_at(f->root, "a_dir");
	put(f->root, "a_dir/inner.txt", "i");
	mkdir_at(f->root, "a_dir/deeper");
	put(f->root, "a_dir/deeper/x", "x");
	link_at(f->root, "link", "a_dir/inner.txt");
	link_at(f->root, "out_link", f->out);
	mkdir_at(f->root, "Z");
}

Test(fs_tools, list_depths)
{
	fx_t *f = fx_new();
	make_listing_tree(f);
	char want[512];
	snprintf(want, sizeof(want), ".hidden\nZ/\na_dir/\nb.txt\nlink -> a_dir/inner.txt\nout_link -> %s\n", f->out);
	expect_ok(call(f, "list", "{}"), want);
	expect_ok(call(f, "list", "{\"path\":\".\",\"depth\":1}"), want);
	snprintf(want, sizeof(want),
		 ".hidden\nZ/\na_dir/\na_dir/deeper/\na_dir/inner.txt\nb.txt\nlink -> a_dir/inner.txt\n"
		 "out_link -> %s\n",
		 f->out);
	expect_ok(call(f, "list", "{\"depth\":2}"), want);
	expect_ok(call(f, "list", "{\"path\":\"a_dir\",\"depth\":5}"), "deeper/\ndeeper/x\ninner.txt\n");
	expect_ok(call(f, "list", "{\"path\":\"Z\"}"), "[empty directory]");
	/* A link to an inside directory may be listed; one to outside may not. */
	link_at(f->root, "to_a", "a_dir");
	expect_ok(call(f, "list", "{\"path\":\"to_a\"}"), "deeper/\ninner.txt\n");
	expect_error(call(f, "list", "{\"path\":\"out_link\"}"), "escapes the workspace");
	expect_error(call(f, "list", "{\"path\":\"b.txt\"}"), "b.txt is not a directory; use the read tool");
	expect_error(call(f, "list", "{\"path\":\"nope\"}"), "directory not found: nope");
	fx_free(f);
}

Test(fs_tools, list_entry_cap)
{
	fx_t *f = fx_new();
	mkdir_at(f->root, "many");
	char p[PATH_MAX];
	for (int i = 0; i < 1005; i++) {
		snprintf(p, sizeof(p), "many/f%04d", i);
		put(f->root, p, "");
	}
	rec_t r = call(f, "list", "{\"path\":\"many\"}");
	cr_assert_not(r.is_error, "%s", r.text);
	cr_assert(strncmp(r.text, "f0000\nf0001\n", 12) == 0);
	const char *tail = "f0999\n[... 5 more]\n";
	size_t n = strlen(r.text);
	cr_assert_str_eq(r.text + n - strlen(tail), tail);
	size_t lines = 0;
	for (size_t i = 0; i < n; i++)
		lines += r.text[i] == '\n';
	cr_assert_eq(lines, 1001u);
	free(r.text);
	fx_free(f);
}

/* Names that would break the listing's lines or its UTF-8 are shown safely. */
Test(fs_tools, list_odd_names)
{
	fx_t *f = fx_new();
	put(f->root, "new\nline", "");
	put(f->root, "bad\xff", "");
	expect_ok(call(f, "list", "{}"), "bad\xef\xbf\xbd\nnew?line\n");
	fx_free(f);
}

/* ---- hard links ------------------------------------------------------------------------------ */

/* A hard link inside the workspace to a file outside: the outside file's
 * own name is invisible to every path check. */
static void hard_link_out(fx_t *f, const char *rel)
{
	char from[PATH_MAX], to[PATH_MAX];
	snprintf(from, sizeof(from), "%s/secret.txt", f->out);
	snprintf(to, sizeof(to), "%s/%s", f->root, rel);
	cr_assert_eq(link(from, to), 0, "link %s: %s", to, strerror(errno));
}

static nlink_t links_of(const char *dir, const char *rel)
{
	char p[PATH_MAX];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	cr_assert_eq(lstat(p, &st), 0, "%s", p);
	return st.st_nlink;
}

Test(fs_tools, hard_link_read_refused)
{
	fx_t *f = fx_new();
	mkdir_at(f->root, "sub");
	hard_link_out(f, "sub/hl");
	rec_t r = call(f, "read", "{\"path\":\"sub/hl\"}");
	cr_assert_null(strstr(r.text, "SECRET"), "%s", r.text);
	expect_error(r, "file refused: it has 2 hard links, and another of its names may lie outside the workspace: "
			"sub/hl");
	/* Two names inside are refused as well: the check cannot know where
	 * the other name is. */
	put(f->root, "a.txt", "A\n");
	char a[PATH_MAX], b[PATH_MAX];
	snprintf(a, sizeof(a), "%s/a.txt", f->root);
	snprintf(b, sizeof(b), "%s/b.txt", f->root);
	cr_assert_eq(link(a, b), 0);
	expect_error(call(f, "read", "{\"path\":\"b.txt\"}"), "hard links");
	/* list only reads names: the link shows as an ordinary entry. */
	expect_ok(call(f, "list", "{\"path\":\"sub\"}"), "hl\n");
	fx_free(f);
}

Test(fs_tools, hard_link_write_edit_refused)
{
	fx_t *f = fx_new();
	hard_link_out(f, "hl");
	expect_error(call(f, "write", "{\"path\":\"hl\",\"content\":\"PWNED\"}"), "hard links");
	expect_error(call(f, "edit", "{\"path\":\"hl\",\"oldText\":\"SECRET\",\"newText\":\"PWNED\"}"),
		     "file refused: it has 2 hard links");
	/* The link itself is left as it was, and the outside file too
	 * (fx_free checks). */
	cr_assert_eq(links_of(f->root, "hl"), 2u);
	assert_content(f->root, "hl", "SECRET");
	/* Through a relative link inside, the same file is refused too. */
	link_at(f->root, "to_hl", "hl");
	expect_error(call(f, "write", "{\"path\":\"to_hl\",\"content\":\"PWNED\"}"), "hard links");
	expect_error(call(f, "read", "{\"path\":\"to_hl\"}"), "hard links");
	/* A new file, and a file with a single link, are written as before. */
	expect_ok(call(f, "write", "{\"path\":\"new.txt\",\"content\":\"one\"}"), "wrote 3 bytes to new.txt");
	expect_ok(call(f, "write", "{\"path\":\"new.txt\",\"content\":\"two\"}"), "wrote 3 bytes to new.txt");
	expect_ok(call(f, "edit", "{\"path\":\"new.txt\",\"oldText\":\"two\",\"newText\":\"three\"}"), NULL);
	assert_content(f->root, "new.txt", "three");
	fx_free(f);
}

/* ---- escapes through every tool -------------------------------------------------------------- */

Test(fs_tools, escapes_through_every_tool)
{
	fx_t *f = fx_new();
	char rel_out[128], abs_out[128];
	snprintf(rel_out, sizeof(rel_out), "../%s/secret.txt", strrchr(f->out, '/') + 1);
	snprintf(abs_out, sizeof(abs_out), "%s/secret.txt", f->out);
	link_at(f->root, "file_link", rel_out);
	link_at(f->root, "abs_link", abs_out);
	mkdir_at(f->root, "sub");
	char up[128];
	snprintf(up, sizeof(up), "../../%s", strrchr(f->out, '/') + 1);
	link_at(f->root, "sub/up", up);
	const char *paths[] = {
		rel_out, abs_out, "file_link", "abs_link", "sub/up/secret.txt", "sub/up/new.txt",
		"/proc/self/root/etc/hostname", "~/secret.txt", "", "sub/../../x",
	};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		const char *p = paths[i];
		expect_refused_by_every_tool(f, p, p[0] ? p : "empty");
	}
	/* The escaping links themselves are left as they were. */
	struct stat st;
	char lp[PATH_MAX];
	snprintf(lp, sizeof(lp), "%s/file_link", f->root);
	cr_assert_eq(lstat(lp, &st), 0);
	cr_assert(S_ISLNK(st.st_mode));
	fx_free(f);
}

/* ---- hostile arguments and environments ---------------------------------------------------------- */

/* Arguments of the wrong shape, each with the argument it is about and
 * the tool's own message for it. */
static const struct hostile {
	const char *tool, *args, *name, *own;
} hostile[] = {
	{"read", "{}", "path", "missing \"path\""},
	{"read", "{\"path\":5}", "path", "\"path\" must be a string"},
	{"read", "{\"file_path\":true}", "file_path", "\"file_path\" must be a string"},
	{"read", "{\"path\":\"a.txt\",\"offset\":\"3\"}", "offset", "\"offset\" must be an integer"},
	{"read", "{\"path\":\"a.txt\",\"offset\":0}", "offset", "\"offset\" must be an integer of at least 1"},
	{"read", "{\"path\":\"a.txt\",\"limit\":-5}", "limit", "\"limit\" must be an integer"},
	{"read", "{\"path\":\"a.txt\",\"limit\":1.5}", "limit", "\"limit\" must be an integer"},
	{"read", "{\"path\":\"a.txt\",\"limit\":1e300}", "limit", "\"limit\" must be an integer"},
	{"read", "{\"path\":\"a.txt\",\"offset\":[1]}", "offset", "\"offset\" must be an integer"},
	{"write", "{\"path\":\"w.txt\"}", "content", "missing \"content\""},
	{"write", "{\"path\":\"w.txt\",\"content\":42}", "content", "\"content\" must be a string"},
	{"write", "{\"path\":{},\"content\":\"x\"}", "path", "\"path\" must be a string"},
	{"edit", "{\"path\":\"a.txt\",\"newText\":\"b\"}", "oldText", "missing \"oldText\""},
	{"edit", "{\"path\":\"a.txt\",\"oldText\":1,\"newText\":\"b\"}", "oldText", "\"oldText\" must be a string"},
	{"edit", "{\"path\":\"a.txt\",\"oldText\":\"a\"}", "newText", "missing \"newText\""},
	{"edit", "{\"path\":\"a.txt\",\"oldText\":\"\",\"newText\":\"b\"}", "oldText",
	 "\"oldText\" must not be empty"},
	{"list", "{\"depth\":\"2\"}", "depth", "\"depth\" must be an integer from 1 to 5"},
	{"list", "{\"depth\":6}", "depth", "\"depth\" must be an integer from 1 to 5"},
	{"list", "{\"depth\":0}", "depth", "\"depth\" must be an integer from 1 to 5"},
	{"list", "{\"path\":[]}", "path", "\"path\" must be a string"},
};

/* Through the invocation: an error result about the right argument,
 * whether the tool or a schema check in front of it found the fault. */
Test(fs_tools, hostile_arguments)
{
	fx_t *f = fx_new();
	put(f->root, "a.txt", "a\n");
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		const struct hostile *h = &hostile[i];
		rec_t r = call(f, h->tool, h->args);
		cr_assert(r.is_error, "%s %s: %s", h->tool, h->args, r.text);
		cr_assert_not_null(strstr(r.text, h->name), "%s %s: %s", h->tool, h->args, r.text);
		free(r.text);
	}
	/* Not an object at all. */
	const char *tools[] = {"read", "write", "edit", "list"};
	for (size_t i = 0; i < 4; i++) {
		rec_t r = call(f, tools[i], "[1,2]");
		cr_assert(r.is_error, "%s: %s", tools[i], r.text);
		free(r.text);
		r = call(f, tools[i], "\"a.txt\"");
		cr_assert(r.is_error, "%s: %s", tools[i], r.text);
		free(r.text);
	}
	assert_content(f->root, "a.txt", "a\n");
	cr_assert_not(exists_at(f->root, "w.txt"));
	fx_free(f);
}

/* The tools' own checks, called directly as nothing in front of them
 * would: every fault is an error result with its own message. */
Test(fs_tools, own_argument_checks)
{
	fx_t *f = fx_new();
	put(f->root, "a.txt", "a\n");
	pc_tool_env_t env = {.workspace = f->root};
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		const struct hostile *h = &hostile[i];
		const pc_tool_def_t *d = pc_tool_find(f->reg, h->tool);
		cr_assert_not_null(d);
		cJSON *args = cJSON_Parse(h->args);
		cr_assert_not_null(args);
		pc_tool_output_t out = {0};
		cr_assert_eq(d->call(d->user, args, &env, &out), 0);
		cr_assert(out.is_error, "%s %s: %s", h->tool, h->args, out.text);
		cr_assert_not_null(strstr(out.text, h->own), "%s %s: %s", h->tool, h->args, out.text);
		free(out.text);
		cJSON_Delete(args);
	}
	/* A null argument counts as absent, and the name wins over its alias. */
	const pc_tool_def_t *d = pc_tool_find(f->reg, "read");
	cJSON *args = cJSON_Parse("{\"path\":null,\"file_path\":\"a.txt\",\"offset\":null}");
	pc_tool_output_t out = {0};
	cr_assert_eq(d->call(d->user, args, &env, &out), 0);
	cr_assert_str_eq(out.text, "a\n");
	free(out.text);
	cJSON_Delete(args);
	args = cJSON_Parse("{\"path\":\"a.txt\",\"file_path\":\"nope\"}");
	out = (pc_tool_output_t){0};
	cr_assert_eq(d->call(d->user, args, &env, &out), 0);
	cr_assert_str_eq(out.text, "a\n");
	free(out.text);
	cJSON_Delete(args);
	/* Not an object, or no arguments at all. */
	const char *tools[] = {"read", "write", "edit", "list"};
	cJSON *arr = cJSON_Parse("[1]");
	for (size_t i = 0; i < 4; i++) {
		d = pc_tool_find(f->reg, tools[i]);
		const cJSON *bad[] = {arr, NULL};
		for (size_t j = 0; j < 2; j++) {
			out = (pc_tool_output_t){0};
			cr_assert_eq(d->call(d->user, bad[j], &env, &out), 0);
			cr_assert(out.is_error);
			cr_assert_not_null(strstr(out.text, "expected a JSON object"), "%s", out.text);
			free(out.text);
		}
	}
	cJSON_Delete(arr);
	fx_free(f);
}

Test(fs_tools, missing_workspace)
{
	fx_t *f = fx_new();
	f->workspace = NULL;
	expect_error(call(f, "read", "{\"path\":\"a.txt\"}"), "Tool read needs a workspace");
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/file", f->root);
	put(f->root, "file", "");
	f->workspace = p;
	expect_error(call(f, "write", "{\"path\":\"a.txt\",\"content\":\"x\"}"), "workspace is not a directory");
	f->workspace = "/nonexistent/pincer-ws";
	expect_error(call(f, "list", "{}"), "workspace does not exist");
	expect_error(call(f, "edit", "{\"path\":\"a\",\"oldText\":\"a\",\"newText\":\"b\"}"), "does not exist");
	f->workspace = f->root;
	fx_free(f);
}
