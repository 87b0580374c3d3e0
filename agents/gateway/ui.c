/*
 * The Control UI (docs/control-ui.md): with gateway.controlUi.root set, a
 * plain GET or HEAD that no other route takes is answered from that
 * directory, the way OpenClaw's gateway serves its own build:
 *
 *   - a file beneath the root, opened through the tools part's workspace
 *     (openat2 RESOLVE_BENEATH, or its walk): "..", absolute links and
 *     links that leave the root are refused, and so is "%2e", "%2f",
 *     "%5c" or "%00" in the request's path (404, saying nothing of what
 *     lies outside);
 *   - a path that names no file and has no static asset's extension gets
 *     index.html (the UI's own router reads the rest);
 *   - /__openclaw/control-ui-config.json (and /control-ui-config.json) is
 *     the bootstrap the UI reads first: base path and assistant identity,
 *     no secret;
 *   - hashed build assets (assets/name-HASH.ext) are cached for a year,
 *     everything else is revalidated (no-cache, ETag, Last-Modified);
 *   - every answer carries the UI's Content-Security-Policy, nosniff,
 *     no-referrer and frame denial.
 *
 * Static files need no auth: the page must load before it reads its
 * token. Admission (guard.c: Host, Origin) still applies. Files are read on
 * the blocking pool, never on a worker; one file may hold at most
 * PC__GW_UI_MAX_FILE bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "agents/tools/tools.h"
#include "gateway_internal.h"
#include "http_util_internal.h"
#include "runtime/blocking.h"

#define PC__GW_UI_MAX_FILE ((off_t)16 << 20)

/* The policy OpenClaw's gateway gives its UI, less the third-party hosts
 * of features this gateway has not (realtime talk, theme import). A page's
 * inline scripts are allowed by their hashes, computed from the page as
 * served (csp_script_hashes). */
#define CSP_BEFORE_SCRIPTS                                                                                   \
	"Content-Security-Policy: default-src 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'; " \
	"frame-src 'self' http: https:; script-src 'self'"
#define CSP_AFTER_SCRIPTS                                                                                    \
	"; style-src 'self' 'unsafe-inline' https://fonts.googleapis.com; img-src 'self' data: blob: https:; "   \
	"media-src 'self' data: blob:; font-src 'self' data: https://fonts.gstatic.com; worker-src 'self'; "     \
	"connect-src 'self' ws: wss: data:\r\n"                                                               \
	"X-Content-Type-Options: nosniff\r\n"                                                                   \
	"Referrer-Policy: no-referrer\r\n"                                                                      \
	"X-Frame-Options: DENY\r\n"
static const char ui_security[] = CSP_BEFORE_SCRIPTS CSP_AFTER_SCRIPTS;
/* Inline scripts of one page given a hash each; a page with more gets the
 * first ones (the UI's index has two). */
#define CSP_SCRIPTS_MAX 16
#define CSP_HASH_TOKEN 56 /* " 'sha256-" + 44 base64 + "'" + NUL */

struct pc__gw_ui {
	pc_gateway_t *g;
	pc_workspace_t *root;
	pc_actor_t *route;
	uint64_t inflight; /* atomic: requests being served, each holding the server */
	bool closing;      /* atomic: the server goes; serve nothing more */
};

/* One request, copied out of its message for the blocking pool. */
typedef struct ui_job {
	struct pc__gw_ui *ui;
	pc_http_server_t *srv;
	uint64_t id;
	bool head;
	char rid[PC__GW_REQUEST_ID_MAX + 1];
	char inm[128]; /* If-None-Match, "" none */
	char rel[];    /* the decoded path, relative to the root */
} ui_job_t;

static const char *content_type(const char *name)
{
	static const char *const types[][2] = {
		{".html", "text/html; charset=utf-8"},
		{".htm", "text/html; charset=utf-8"},
		{".js", "text/javascript; charset=utf-8"},
		{".mjs", "text/javascript; charset=utf-8"},
		{".css", "text/css; charset=utf-8"},
		{".json", "application/json; charset=utf-8"},
		{".map", "application/json; charset=utf-8"},
		{".webmanifest", "application/manifest+json; charset=utf-8"},
		{".svg", "image/svg+xml"},
		{".png", "image/png"},
		{".jpg", "image/jpeg"},
		{".jpeg", "image/jpeg"},
		{".gif", "image/gif"},
		{".webp", "image/webp"},
		{".avif", "image/avif"},
		{".ico", "image/x-icon"},
		{".woff2", "font/woff2"},
		{".woff", "font/woff"},
		{".ttf", "font/ttf"},
		{".txt", "text/plain; charset=utf-8"},
		{".wasm", "application/wasm"},
	};
	const char *base = strrchr(name, '/');
	const char *dot = strrchr(base ? base : name, '.');
	for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcasecmp(dot, types[i][0]))
			return types[i][1];
	return "application/octet-stream";
}

/* The last component has an extension (a dot after its first byte). */
static bool has_extension(const char *rel)
{
	const char *base = strrchr(rel, '/');
	base = base ? base + 1 : rel;
	const char *dot = strrchr(base, '.');
	return dot && dot != base;
}

/* A Vite build's content-hashed asset: under assets/, its stem's last
 * '-' or '.' part at least 8 of [A-Za-z0-9_] with a digit among them. */
static bool hashed_asset(const char *rel)
{
	if (strncmp(rel, "assets/", 7))
		return false;
	const char *base = strrchr(rel, '/') + 1;
	const char *dot = strrchr(base, '.');
	if (!dot || dot == base)
		return false;
	const char *p = dot;
	size_t n = 0;
	bool digit = false;
	while (p > base && p[-1] != '-' && p[-1] != '.') {
		char c = p[-1];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
			return false;
		digit |= c >= '0' && c <= '9';
		p--, n++;
	}
	return p > base && n >= 8 && digit;
}

/* The request's path as a file name relative to the root, decoded, into
 * out[0..cap); "" for the root. False for what may not name a file: a bad
 * escape or NUL, a backslash, a "..", "." or empty component (all judged
 * after decoding, so an encoded one is refused alike). "/x/assets/y" is
 * "assets/y", as OpenClaw maps it. */
static bool ui_rel(const char *path, char *out, size_t cap)
{
	const char *a = strstr(path, "/assets/");
	const char *p = a ? a + 1 : path[0] == '/' ? path + 1 : path;
	size_t n = strlen(p);
	if (n >= cap)
		return false;
	memcpy(out, p, n + 1);
	if (!pc_percent_decode(out) || strchr(out, '\\'))
		return false;
	/* no "..", and no empty or "." component in the middle either */
	for (const char *s = out; *s;) {
		const char *e = strchr(s, '/');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		if ((len == 2 && s[0] == '.' && s[1] == '.') || (len == 1 && s[0] == '.') || (len == 0 && e))
			return false;
		s += len + (e ? 1 : 0);
	}
	return true;
}

/* Opens rel beneath the root, a regular file; its fd, or -1 with *refused
 * set when the path was refused rather than absent. */
static int open_beneath(struct pc__gw_ui *ui, const char *rel, struct stat *st, bool *refused)
{
	int dirfd = -1, fd = -1;
	char name[NAME_MAX + 1];
	*refused = false;
	int rc = pc_workspace_open_parent(ui->root, rel, &dirfd, name, NULL, 0);
	if (rc != 0) {
		*refused = rc == PC_EINVAL;
		return -1;
	}
	/* the parent lies beneath the root and `name` is its entry (a link
	 * that stays inside already followed): never follow one here */
	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == ELOOP)
		*refused = true;
	close(dirfd);
	if (fd >= 0 && (fstat(fd, st) != 0 || !S_ISREG(st->st_mode))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Whether an opening <script ...> tag (without its "<script") has a src
 * attribute: names are read as HTML does, values skipped quoted or not. */
static bool tag_has_src(const char *p, const char *end)
{
	while (p < end) {
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '/'))
			p++;
		const char *name = p;
		while (p < end && !strchr(" \t\n\r\f/=>", *p))
			p++;
		if (p - name == 3 && !strncasecmp(name, "src", 3))
			return true;
		if (p == name)
			return false; /* the tag's '>' */
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f'))
			p++;
		if (p < end && *p == '=') {
			p++;
			while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f'))
				p++;
			if (p < end && (*p == '"' || *p == '\'')) {
				const char *q = memchr(p + 1, *p, (size_t)(end - p - 1));
				p = q ? q + 1 : end;
			} else {
				while (p < end && !strchr(" \t\n\r\f>", *p))
					p++;
			}
		}
	}
	return false;
}

static const char *find_ci(const char *p, const char *end, const char *word)
{
	size_t n = strlen(word);
	for (; p + n <= end; p++)
		if (!strncasecmp(p, word, n))
			return p;
	return NULL;
}

/* Writes to out (CSP_SCRIPTS_MAX * CSP_HASH_TOKEN bytes) the hash tokens
 * (" 'sha256-...'") of the page's non-empty inline scripts, as OpenClaw
 * computes them: the text between <script ...> and </script>, for each tag
 * without src. */
static void csp_script_hashes(const char *html, size_t len, char *out)
{
	const char *p = html, *end = html + len;
	size_t n = 0, at = 0;
	out[0] = '\0';
	while (n < CSP_SCRIPTS_MAX && (p = find_ci(p, end, "<script")) != NULL) {
		p += 7;
		if (p < end && !strchr(" \t\n\r\f>", *p))
			continue; /* <scripts..., not a script tag */
		const char *gt = memchr(p, '>', (size_t)(end - p));
		if (!gt)
			break;
		const char *body = gt + 1, *close = find_ci(body, end, "</script>");
		if (!close)
			break;
		if (!tag_has_src(p, gt) && close > body) {
			unsigned char md[SHA256_DIGEST_LENGTH];
			char b64[4 * ((SHA256_DIGEST_LENGTH + 2) / 3) + 1];
			if (SHA256((const unsigned char *)body, (size_t)(close - body), md) &&
			    EVP_EncodeBlock((unsigned char *)b64, md, SHA256_DIGEST_LENGTH) > 0) {
				at += (size_t)snprintf(out + at, CSP_HASH_TOKEN, " 'sha256-%s'", b64);
				n++;
			}
		}
		p = close + 9;
	}
}

static void respond_text(ui_job_t *j, int status, const char *text)
{
	char head[1024];
	snprintf(head, sizeof(head), "Content-Type: text/plain; charset=utf-8\r\nCache-Control: no-cache\r\n%sx-request-id: %s\r\n",
		 ui_security, j->rid);
	(void)pc_http_respond(j->srv, j->id, status, head, j->head ? NULL : text, j->head ? 0 : strlen(text));
}

static void serve_fd(ui_job_t *j, int fd, const struct stat *st, const char *rel)
{
	if (st->st_size > PC__GW_UI_MAX_FILE) {
		respond_text(j, 500, "Control UI file exceeds the 16 MiB limit\n");
		return;
	}
	char etag[64];
	snprintf(etag, sizeof(etag), "\"%llx-%llx\"", (unsigned long long)st->st_size,
		 (unsigned long long)st->st_mtim.tv_sec * 1000000000ull + (unsigned long long)st->st_mtim.tv_nsec);
	char date[64] = "";
	struct tm tm;
	if (gmtime_r(&st->st_mtim.tv_sec, &tm))
		strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
	bool immutable = hashed_asset(rel);
	/* a page is read even for HEAD or a revalidation: its policy names
	 * its inline scripts */
	bool page = !strcmp(content_type(rel), "text/html; charset=utf-8");
	bool fresh = j->inm[0] && strstr(j->inm, etag);
	size_t len = (size_t)st->st_size;
	char *body = NULL;
	if ((page || (!j->head && !fresh)) && len) {
		body = malloc(len);
		size_t got = 0;
		while (body && got < len) {
			ssize_t r = pread(fd, body + got, len - got, (off_t)got);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			got += (size_t)r;
		}
		if (!body || got != len) {
			free(body);
			respond_text(j, 500, "Control UI file could not be read\n");
			return;
		}
	}
	char scripts[CSP_SCRIPTS_MAX * CSP_HASH_TOKEN] = "";
	if (page && body)
		csp_script_hashes(body, len, scripts);
	char head[2048 + sizeof(scripts)];
	snprintf(head, sizeof(head),
		 "Content-Type: %s\r\nCache-Control: %s\r\nETag: %s\r\nLast-Modified: %s\r\n"
		 CSP_BEFORE_SCRIPTS "%s" CSP_AFTER_SCRIPTS "x-request-id: %s\r\n",
		 content_type(rel), immutable ? "public, max-age=31536000, immutable" : "no-cache", etag, date,
		 scripts, j->rid);
	if (fresh)
		(void)pc_http_respond(j->srv, j->id, 304, head, NULL, 0);
	else /* a HEAD answer is the headers alone */
		(void)pc_http_respond(j->srv, j->id, 200, head, body, j->head ? 0 : len);
	free(body);
}

static void job_done(ui_job_t *j)
{
	struct pc__gw_ui *ui = j->ui;
	free(j);
	__atomic_sub_fetch(&ui->inflight, 1, __ATOMIC_SEQ_CST);
}

static pc_msg_t *ui_job_run(void *arg)
{
	ui_job_t *j = arg;
	const char *rel = j->rel[0] && j->rel[strlen(j->rel) - 1] != '/' ? j->rel : NULL;
	char path[PATH_MAX];
	if (!rel) { /* the root or a directory: its index.html */
		snprintf(path, sizeof(path), "%sindex.html", j->rel);
		rel = path;
	}
	struct stat st;
	bool refused = false;
	int fd = open_beneath(j->ui, rel, &st, &refused);
	if (fd < 0 && !refused && !has_extension(rel)) {
		rel = "index.html"; /* the UI's router takes it from here */
		fd = open_beneath(j->ui, rel, &st, &refused);
	}
	if (fd < 0) {
		respond_text(j, 404, "Not Found\n");
	} else {
		serve_fd(j, fd, &st, rel);
		close(fd);
	}
	job_done(j);
	return NULL;
}

static void ui_job_discard(void *arg) { job_done(arg); }

/* The bootstrap the UI reads before anything else (OpenClaw's
 * ControlUiBootstrapConfig): nothing secret. */
static void serve_config(struct pc__gw_ui *ui, const pc_http_request_msg_t *q, const char *rid)
{
	cJSON *o = cJSON_CreateObject();
	if (o) {
		cJSON_AddStringToObject(o, "basePath", "");
		cJSON_AddStringToObject(o, "assistantName", PC__GW_ASSISTANT_NAME);
		cJSON_AddStringToObject(o, "assistantAvatar", PC__GW_ASSISTANT_AVATAR);
		cJSON_AddStringToObject(o, "assistantAgentId", PC__GW_AGENT_ID);
	}
	char *text = o ? cJSON_PrintUnformatted(o) : NULL;
	char head[1024];
	snprintf(head, sizeof(head),
		 "Content-Type: application/json; charset=utf-8\r\nCache-Control: no-cache\r\n%sx-request-id: %s\r\n",
		 ui_security, rid);
	bool head_only = !strcmp(q->method, "HEAD");
	(void)pc_http_respond(ui->g->srv, q->id, text ? 200 : 500, head, head_only ? NULL : text ? text : "{}",
			      head_only ? 0 : text ? strlen(text) : 2);
	cJSON_free(text);
	cJSON_Delete(o);
}

bool pc__gw_ui_serves(const pc_gateway_t *g) { return g && g->ui; }

static bool serve(pc_gateway_t *g, struct pc__gw_ui *ui, const pc_http_request_msg_t *q);

/* Counted before `closing` is read, so pc__gw_ui_quiesce either sees the
 * request or the request sees it closing. */
void pc__gw_ui_request(pc_gateway_t *g, const pc_http_request_msg_t *q)
{
	struct pc__gw_ui *ui = g->ui;
	__atomic_add_fetch(&ui->inflight, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&ui->closing, __ATOMIC_SEQ_CST)) {
		__atomic_sub_fetch(&ui->inflight, 1, __ATOMIC_SEQ_CST);
		return;
	}
	if (serve(g, ui, q))
		__atomic_sub_fetch(&ui->inflight, 1, __ATOMIC_SEQ_CST);
}

/* True when the request was answered here, false when a job took it (and
 * the count with it). */
static bool serve(pc_gateway_t *g, struct pc__gw_ui *ui, const pc_http_request_msg_t *q)
{
	char rid[PC__GW_REQUEST_ID_MAX + 1];
	pc__gw_request_id(q, rid);
	char head[PC__GW_REQUEST_ID_MAX + 96];
	pc__gw_client_t who;
	const char *why = NULL;
	int refused = pc__gw_admit(g, q, &who, &why);
	if (refused) {
		snprintf(head, sizeof(head), "Content-Type: text/plain; charset=utf-8\r\nx-request-id: %s\r\n", rid);
		(void)pc_http_respond(g->srv, q->id, refused, head, why, strlen(why));
		return true;
	}
	if (strcmp(q->method, "GET") && strcmp(q->method, "HEAD")) {
		snprintf(head, sizeof(head), "Allow: GET, HEAD\r\nx-request-id: %s\r\n", rid);
		(void)pc_http_respond(g->srv, q->id, 405, head, NULL, 0);
		return true;
	}
	if (!strcmp(q->path, "/__openclaw/control-ui-config.json") || !strcmp(q->path, "/control-ui-config.json")) {
		serve_config(ui, q, rid);
		return true;
	}
	size_t cap = strlen(q->path) + 16;
	ui_job_t *j = calloc(1, sizeof(*j) + cap);
	if (!j) {
		(void)pc_http_respond(g->srv, q->id, 503, NULL, NULL, 0);
		return true;
	}
	j->ui = ui;
	j->srv = g->srv;
	j->id = q->id;
	j->head = !strcmp(q->method, "HEAD");
	memcpy(j->rid, rid, sizeof(rid));
	const char *inm = pc_http_request_header(q, "if-none-match");
	snprintf(j->inm, sizeof(j->inm), "%s", inm ? inm : "");
	if (!ui_rel(q->path, j->rel, cap)) {
		respond_text(j, 404, "Not Found\n");
		free(j);
		return true;
	}
	if (pc_blocking_submit(g->rt, ui_job_run, ui_job_discard, j, NULL) != 0) {
		respond_text(j, 503, "server busy\n");
		free(j);
		return true;
	}
	return false;
}

static int ui_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	if (msg->type == PC_MSG_HTTP_REQUEST)
		pc__gw_ui_request(((struct pc__gw_ui *)state)->g, pc_msg_cdata(msg));
	/* PC_MSG_HTTP_GONE: the job's answer finds the request gone */
	return 0;
}

static const pc_behavior_t ui_behavior = {"gateway.ui", ui_receive, NULL};

int pc__gw_ui_new(pc_gateway_t *g)
{
	const pc_gateway_config_t *gc = g->gcfg;
	if (!gc->control_ui_root || !gc->control_ui_enabled)
		return 0;
	struct pc__gw_ui *ui = calloc(1, sizeof(*ui));
	if (!ui)
		return PC_ENOMEM;
	ui->g = g;
	int rc = pc_workspace_open(gc->control_ui_root, &ui->root, NULL, 0);
	if (rc == 0)
		rc = pc_spawn(g->rt, &ui_behavior, ui, &ui->route);
	if (rc != 0) {
		pc_workspace_free(ui->root);
		free(ui);
		return rc;
	}
	g->ui = ui;
	g->ui_route = ui->route;
	return 0;
}

void pc__gw_ui_quiesce(pc_gateway_t *g)
{
	struct pc__gw_ui *ui = g->ui;
	if (ui)
		__atomic_store_n(&ui->closing, true, __ATOMIC_SEQ_CST);
	while (ui && __atomic_load_n(&ui->inflight, __ATOMIC_ACQUIRE) > 0)
		pc__gw_nap_ms(1);
}

void pc__gw_ui_free(pc_gateway_t *g)
{
	struct pc__gw_ui *ui = g->ui;
	if (!ui)
		return;
	pc__gw_route_stop(&g->ui_route);
	pc__gw_ui_quiesce(g);
	pc_workspace_free(ui->root);
	free(ui);
	g->ui = NULL;
}
