/*
 * Mock LLM scenarios: step parsing and validation, the scenario cursors,
 * and plans (the exact bytes of an answer and when to send them).
 *
 * Wire shapes follow what the providers send: OpenAI chat.completion.chunk
 * events ending in "data: [DONE]", Anthropic's message_start ...
 * message_stop sequence, and each provider's error JSON. Per-fragment
 * events (one per piece of text, reasoning or tool arguments) are rendered
 * straight into the output buffer: only their strings vary, and skipping a
 * cJSON tree per fragment keeps a long answer to one pass over one buffer.
 * Everything else is built with cJSON.
 */
#include "io/json_print.h"
#include "scenario.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../mailbox/atomics_internal.h"
#include "../../runtime/error.h"

/* ---- small helpers -------------------------------------------------------- */

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...)
{
	if (cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, cap, fmt, ap);
		va_end(ap);
	}
	return PC_EINVAL;
}

static char *dup_str(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Tokens, as the mock counts them: whitespace-separated words. */
static uint64_t word_count(const char *s, size_t n)
{
	uint64_t w = 0;
	for (size_t i = 0; i < n; i++)
		if (!is_space(s[i]) && (i == 0 || is_space(s[i - 1])))
			w++;
	return w;
}

/* A growable byte buffer whose allocation failure is sticky, so a long
 * run of appends is checked once at the end. */
typedef struct buf {
	char *p;
	size_t len;
	size_t cap;
	int err;
} buf_t;

static void buf_put(buf_t *b, const void *s, size_t n)
{
	if (b->err)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (!np) {
			b->err = PC_ENOMEM;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void buf_puts(buf_t *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

static void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(buf_t *b, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	/* Only short, fixed formats go through here. */
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		if (!b->err)
			b->err = PC_EINVAL;
		return;
	}
	buf_put(b, tmp, (size_t)n);
}

static void put_piece(void *b, const char *p, size_t n)
{
	buf_put(b, p, n);
}

/* A JSON string literal, escaped the way cJSON prints it. */
static void buf_json_str(buf_t *b, const char *s, size_t n)
{
	pc_json_escape(s, n, put_piece, b);
}

/* splitmix64's finaliser: a bijection, so distinct inputs give distinct
 * ids. */
static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* `prefix` then `n` base62 characters derived from (seq, salt): ids are
 * unique per request and the same on every run. */
static void make_id(char *out, size_t cap, const char *prefix, size_t n, uint64_t seq, uint64_t salt)
{
	static const char a62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
	size_t pl = strlen(prefix);
	if (pl + n + 1 > cap)
		n = cap - pl - 1; /* callers size `out`; this only guards */
	memcpy(out, prefix, pl);
	uint64_t base = mix(seq ^ mix(salt)), x = 0;
	for (size_t i = 0; i < n; i++) {
		if (i % 10 == 0)
			x = mix(base + i); /* 62^10 < 2^64: ten digits per draw */
		out[pl + i] = a62[x % 62];
		x /= 62;
	}
	out[pl + n] = 0;
}

/* ---- steps ---------------------------------------------------------------- */

enum {
	K_TEXT,
	K_TOOLS,
	K_REASONING,
	K_EMPTY,
	K_ERROR,
	K_OVERFLOW,
	K_STALL,
	K_COUNT
};

static const char *const kind_names[K_COUNT] = {
	"text", "tool_calls", "reasoning", "empty", "error", "context_overflow", "stall",
};

enum { F_NONE, F_DISCONNECT, F_STALL, F_BAD_JSON, F_TRUNCATED, F_STREAM_ERROR };

/* Usage fields; -1 in a step means "computed". */
enum { U_INPUT, U_OUTPUT, U_CACHE_READ, U_CACHE_WRITE, U_REASONING, U_COUNT };
static const char *const usage_names[U_COUNT] = {
	"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
};

typedef struct tool {
	char *id;   /* NULL: generated */
	char *name;
	char *args; /* the arguments as sent: JSON text, or any string */
} tool_t;

struct pc_mock_step {
	int kind;
	char *text;      /* NULL: none (kind text: echo the user) */
	char *reasoning; /* NULL: none */
	tool_t *tools;
	size_t tool_count;
	uint32_t chunks;     /* pieces per text; 0: one per word */
	uint32_t arg_chunks; /* pieces per tool's arguments */
	uint32_t ttft_ms;
	uint32_t delay_ms;
	uint32_t burst;      /* pieces per delay_ms; 0: one */
	int64_t usage[U_COUNT];
	const char *finish; /* "stop", "length", "tool_calls", "content_filter"; NULL: by content */
	/* error / context_overflow */
	int status;
	char *message;
	char *etype;
	char *code;
	int64_t retry_after; /* seconds; -1: no header */
	int64_t max_tokens;  /* -1: the API's default */
	int64_t prompt_tokens;
	/* stall kind */
	uint32_t ms; /* 0: for ever */
	bool before_headers;
	/* delivery faults */
	int fault;
	bool fault_at_set;
	uint32_t fault_at;
	uint32_t stall_ms; /* F_STALL: 0 for ever */
	char *headers;     /* extra response header lines */
	char *json;        /* the step as given */
};

/* The step used when nothing scripts the request. */
static const pc_mock_step_t echo_step = {
	.kind = K_TEXT,
	.arg_chunks = 3,
	.usage = {-1, -1, -1, -1, -1},
	.retry_after = -1,
	.max_tokens = -1,
	.prompt_tokens = -1,
};

#define BIT(k) (1u << (k))
#define ANSWER (BIT(K_TEXT) | BIT(K_TOOLS) | BIT(K_REASONING) | BIT(K_EMPTY))
#define ALL ((1u << K_COUNT) - 1)

/* Which keys each kind accepts. */
static const struct {
	const char *key;
	unsigned kinds;
} step_keys[] = {
	{"kind", ALL},
	{"headers", ALL},
	{"text", BIT(K_TEXT) | BIT(K_TOOLS)},
	{"reasoning", BIT(K_TEXT) | BIT(K_TOOLS) | BIT(K_REASONING)},
	{"tool_calls", BIT(K_TOOLS)},
	{"arg_chunks", BIT(K_TOOLS)},
	{"chunks", ANSWER},
	{"ttft_ms", ANSWER | BIT(K_ERROR) | BIT(K_OVERFLOW)},
	{"delay_ms", ANSWER},
	{"burst", ANSWER},
	{"usage", ANSWER},
	{"finish_reason", ANSWER},
	{"disconnect_after", ANSWER},
	{"stall_after", ANSWER},
	{"stall_ms", ANSWER},
	{"malformed", ANSWER},
	{"malformed_at", ANSWER},
	{"error_after", ANSWER},
	{"status", BIT(K_ERROR)},
	{"message", BIT(K_ERROR) | ANSWER}, /* answers: of the in-stream error */
	{"type", BIT(K_ERROR) | ANSWER},
	{"code", BIT(K_ERROR) | ANSWER},
	{"retry_after", BIT(K_ERROR)},
	{"max_tokens", BIT(K_OVERFLOW)},
	{"prompt_tokens", BIT(K_OVERFLOW)},
	{"ms", BIT(K_STALL)},
	{"before_headers", BIT(K_STALL)},
};

#define MAX_MS 86400000u       /* a day: longer is surely a typo */
#define MAX_CHUNKS 1000000u
#define MAX_TOKENS 1000000000000000ll

/* Where a parse is, for messages: "steps[2]" + "." + key. */
typedef struct where {
	const char *path; /* "" at the top */
	char *err;
	size_t cap;
} where_t;

static int bad(const where_t *w, const char *key, const char *what)
{
	return fail(w->err, w->cap, "%s%s%s: %s", w->path, *w->path ? "." : "", key, what);
}

/* A non-negative integer no greater than max. */
static int get_uint(const cJSON *o, const char *key, const where_t *w, uint64_t max, uint64_t *out,
		    bool *present)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (present)
		*present = v != NULL;
	if (!v)
		return 0;
	double d = v->valuedouble;
	if (!cJSON_IsNumber(v) || d < 0 || d > (double)max || d != (double)(uint64_t)d) {
		char what[96];
		snprintf(what, sizeof(what), "must be an integer from 0 to %" PRIu64, max);
		return bad(w, key, what);
	}
	*out = (uint64_t)d;
	return 0;
}

static int get_u32(const cJSON *o, const char *key, const where_t *w, uint32_t max, uint32_t *out)
{
	uint64_t v = *out;
	int rc = get_uint(o, key, w, max, &v, NULL);
	*out = (uint32_t)v;
	return rc;
}

/* A string, copied into *out (left alone when the key is absent). */
static int get_str(const cJSON *o, const char *key, const where_t *w, char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsString(v))
		return bad(w, key, "must be a string");
	*out = dup_str(v->valuestring);
	return *out ? 0 : PC_ENOMEM;
}

static bool token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* "headers": {"name": "value", ...} -> "name: value\r\n" lines. */
static int parse_headers(const cJSON *v, const where_t *w, char **out)
{
	if (!cJSON_IsObject(v))
		return bad(w, "headers", "must be an object of strings");
	buf_t b = {0};
	const cJSON *h;
	cJSON_ArrayForEach(h, v) {
		bool ok = cJSON_IsString(h) && *h->string;
		for (const char *c = h->string; ok && *c; c++)
			ok = token_char(*c);
		for (const char *c = ok ? h->valuestring : ""; ok && *c; c++)
			ok = *c != '\r' && *c != '\n';
		if (!ok) {
			free(b.p);
			return bad(w, "headers", "needs token names and string values without CR or LF");
		}
		buf_puts(&b, h->string);
		buf_puts(&b, ": ");
		buf_puts(&b, h->valuestring);
		buf_put(&b, "\r\n", 2);
	}
	if (b.err) {
		free(b.p);
		return b.err;
	}
	*out = b.p; /* NULL for an empty object: no extra headers */
	return 0;
}

static int parse_usage(const cJSON *v, const where_t *w, pc_mock_step_t *s)
{
	if (!cJSON_IsObject(v))
		return bad(w, "usage", "must be an object");
	char path[96];
	snprintf(path, sizeof(path), "%s%susage", w->path, *w->path ? "." : "");
	where_t uw = {path, w->err, w->cap};
	const cJSON *f;
	cJSON_ArrayForEach(f, v) {
		size_t u = 0;
		while (u < U_COUNT && strcmp(f->string, usage_names[u]))
			u++;
		if (u == U_COUNT)
			return bad(&uw, f->string, "unknown key");
		uint64_t n = 0;
		int rc = get_uint(v, f->string, &uw, MAX_TOKENS, &n, NULL);
		if (rc)
			return rc;
		s->usage[u] = (int64_t)n;
	}
	return 0;
}

static int parse_tools(const cJSON *v, const where_t *w, pc_mock_step_t *s)
{
	int n = cJSON_GetArraySize(v);
	if (!cJSON_IsArray(v) || n == 0)
		return bad(w, "tool_calls", "must be a non-empty array");
	s->tools = calloc((size_t)n, sizeof(tool_t));
	if (!s->tools)
		return PC_ENOMEM;
	s->tool_count = (size_t)n;
	const cJSON *t;
	size_t i = 0;
	cJSON_ArrayForEach(t, v) {
		char path[96];
		snprintf(path, sizeof(path), "%s%stool_calls[%zu]", w->path, *w->path ? "." : "", i);
		where_t tw = {path, w->err, w->cap};
		tool_t *tc = &s->tools[i++];
		if (!cJSON_IsObject(t))
			return fail(w->err, w->cap, "%s: must be an object", path);
		const cJSON *f;
		cJSON_ArrayForEach(f, t) {
			if (strcmp(f->string, "name") && strcmp(f->string, "arguments") && strcmp(f->string, "id"))
				return bad(&tw, f->string, "unknown key");
		}
		int rc = get_str(t, "name", &tw, &tc->name);
		if (!rc && (!tc->name || !*tc->name))
			rc = bad(&tw, "name", "must be a non-empty string");
		if (!rc)
			rc = get_str(t, "id", &tw, &tc->id);
		if (rc)
			return rc;
		const cJSON *a = cJSON_GetObjectItemCaseSensitive(t, "arguments");
		if (!a)
			tc->args = dup_str("{}");
		else if (cJSON_IsString(a))
			tc->args = dup_str(a->valuestring); /* as given, even if not JSON */
		else if (cJSON_IsObject(a))
			tc->args = cJSON_PrintUnformatted(a);
		else
			return bad(&tw, "arguments", "must be an object or a string");
		if (!tc->args)
			return PC_ENOMEM;
	}
	return 0;
}

static int parse_fault(const cJSON *j, const where_t *w, pc_mock_step_t *s)
{
	static const char *const keys[] = {"disconnect_after", "stall_after", "malformed", "error_after"};
	int given = 0;
	for (size_t i = 0; i < 4; i++)
		given += cJSON_GetObjectItemCaseSensitive(j, keys[i]) != NULL;
	if (given > 1)
		return bad(w, "disconnect_after",
			   "only one of disconnect_after, stall_after, malformed, error_after");
	bool in_stream = cJSON_GetObjectItemCaseSensitive(j, "error_after") != NULL;
	if (s->kind != K_ERROR && !in_stream) {
		if (cJSON_GetObjectItemCaseSensitive(j, "message"))
			return bad(w, "message", "needs error_after");
		if (cJSON_GetObjectItemCaseSensitive(j, "type"))
			return bad(w, "type", "needs error_after");
		if (cJSON_GetObjectItemCaseSensitive(j, "code"))
			return bad(w, "code", "needs error_after");
	}
	if (cJSON_GetObjectItemCaseSensitive(j, "stall_ms") &&
	    !cJSON_GetObjectItemCaseSensitive(j, "stall_after"))
		return bad(w, "stall_ms", "needs stall_after");
	if (cJSON_GetObjectItemCaseSensitive(j, "malformed_at") &&
	    !cJSON_GetObjectItemCaseSensitive(j, "malformed"))
		return bad(w, "malformed_at", "needs malformed");
	bool present = false;
	uint64_t k = 0;
	int rc = get_uint(j, "disconnect_after", w, MAX_CHUNKS, &k, &present);
	if (!rc && present) {
		s->fault = F_DISCONNECT;
		s->fault_at = (uint32_t)k;
	}
	if (!rc)
		rc = get_uint(j, "error_after", w, MAX_CHUNKS, &k, &present);
	if (!rc && present) {
		s->fault = F_STREAM_ERROR;
		s->fault_at = (uint32_t)k;
	}
	if (!rc)
		rc = get_uint(j, "stall_after", w, MAX_CHUNKS, &k, &present);
	if (!rc && present) {
		s->fault = F_STALL;
		s->fault_at = (uint32_t)k;
		rc = get_u32(j, "stall_ms", w, MAX_MS, &s->stall_ms);
	}
	if (rc)
		return rc;
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "malformed");
	if (!m)
		return 0;
	if (cJSON_IsString(m) && !strcmp(m->valuestring, "bad_json"))
		s->fault = F_BAD_JSON;
	else if (cJSON_IsString(m) && !strcmp(m->valuestring, "truncated"))
		s->fault = F_TRUNCATED;
	else
		return bad(w, "malformed", "must be \"bad_json\" or \"truncated\"");
	rc = get_uint(j, "malformed_at", w, MAX_CHUNKS, &k, &s->fault_at_set);
	s->fault_at = (uint32_t)k;
	return rc;
}

static int parse_kind(const cJSON *j, const where_t *w, pc_mock_step_t *s)
{
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind");
	s->kind = K_TEXT;
	if (!k)
		return 0;
	for (int i = 0; i < K_COUNT; i++) {
		if (cJSON_IsString(k) && !strcmp(k->valuestring, kind_names[i])) {
			s->kind = i;
			return 0;
		}
	}
	return bad(w, "kind", "must be one of text, tool_calls, reasoning, empty, error, "
			      "context_overflow, stall");
}

/* Keys of this kind only, with the right types, in range. */
static int parse_fields(const cJSON *j, const where_t *w, pc_mock_step_t *s)
{
	const cJSON *f;
	cJSON_ArrayForEach(f, j) {
		size_t i = 0;
		while (i < sizeof(step_keys) / sizeof(step_keys[0]) && strcmp(step_keys[i].key, f->string))
			i++;
		if (i == sizeof(step_keys) / sizeof(step_keys[0]))
			return bad(w, f->string, "unknown key");
		if (!(step_keys[i].kinds & BIT(s->kind))) {
			char what[64];
			snprintf(what, sizeof(what), "not allowed for kind %s", kind_names[s->kind]);
			return bad(w, f->string, what);
		}
	}
	int rc = get_str(j, "text", w, &s->text);
	if (!rc)
		rc = get_str(j, "reasoning", w, &s->reasoning);
	if (!rc)
		rc = get_u32(j, "chunks", w, MAX_CHUNKS, &s->chunks);
	if (!rc && cJSON_GetObjectItemCaseSensitive(j, "chunks") && s->chunks == 0)
		rc = bad(w, "chunks", "must be at least 1");
	if (!rc)
		rc = get_u32(j, "arg_chunks", w, MAX_CHUNKS, &s->arg_chunks);
	if (!rc && s->arg_chunks == 0)
		rc = bad(w, "arg_chunks", "must be at least 1");
	if (!rc)
		rc = get_u32(j, "ttft_ms", w, MAX_MS, &s->ttft_ms);
	if (!rc)
		rc = get_u32(j, "delay_ms", w, MAX_MS, &s->delay_ms);
	if (!rc)
		rc = get_u32(j, "burst", w, MAX_CHUNKS, &s->burst);
	if (!rc)
		rc = get_u32(j, "ms", w, MAX_MS, &s->ms);
	if (rc)
		return rc;
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "before_headers");
	if (v && !cJSON_IsBool(v))
		return bad(w, "before_headers", "must be true or false");
	s->before_headers = cJSON_IsTrue(v);
	if ((v = cJSON_GetObjectItemCaseSensitive(j, "headers")) && (rc = parse_headers(v, w, &s->headers)))
		return rc;
	if ((v = cJSON_GetObjectItemCaseSensitive(j, "usage")) && (rc = parse_usage(v, w, s)))
		return rc;
	if ((v = cJSON_GetObjectItemCaseSensitive(j, "tool_calls")) && (rc = parse_tools(v, w, s)))
		return rc;
	if ((v = cJSON_GetObjectItemCaseSensitive(j, "finish_reason"))) {
		static const char *const fr[] = {"stop", "length", "tool_calls", "content_filter", "error"};
		for (size_t i = 0; i < sizeof(fr) / sizeof(fr[0]) && !s->finish; i++)
			if (cJSON_IsString(v) && !strcmp(v->valuestring, fr[i]))
				s->finish = fr[i];
		if (!s->finish)
			return bad(w, "finish_reason",
				   "must be stop, length, tool_calls, content_filter or error");
	}
	uint64_t n = 0;
	bool present = false;
	rc = get_uint(j, "status", w, 599, &n, &present);
	if (!rc && present && n < 200)
		rc = bad(w, "status", "must be from 200 to 599");
	s->status = (int)n;
	if (!rc)
		rc = get_uint(j, "retry_after", w, MAX_MS, &n, &present);
	if (!rc && present)
		s->retry_after = (int64_t)n;
	if (!rc)
		rc = get_uint(j, "max_tokens", w, MAX_TOKENS, &n, &present);
	if (!rc && present)
		s->max_tokens = (int64_t)n;
	if (!rc)
		rc = get_uint(j, "prompt_tokens", w, MAX_TOKENS, &n, &present);
	if (!rc && present)
		s->prompt_tokens = (int64_t)n;
	if (!rc)
		rc = get_str(j, "message", w, &s->message);
	if (!rc)
		rc = get_str(j, "type", w, &s->etype);
	if (!rc)
		rc = get_str(j, "code", w, &s->code);
	if (!rc)
		rc = parse_fault(j, w, s);
	return rc;
}

static int step_parse(const cJSON *j, const where_t *w, pc_mock_step_t **out)
{
	if (!cJSON_IsObject(j))
		return fail(w->err, w->cap, "%s%sa step must be a JSON object", w->path, *w->path ? ": " : "");
	pc_mock_step_t *s = malloc(sizeof(*s));
	if (!s)
		return PC_ENOMEM;
	*s = echo_step;
	int rc = parse_kind(j, w, s);
	if (!rc)
		rc = parse_fields(j, w, s);
	if (!rc && s->kind == K_TOOLS && !s->tools)
		rc = bad(w, "tool_calls", "is required for kind tool_calls");
	if (!rc && s->kind == K_REASONING && !s->reasoning)
		rc = bad(w, "reasoning", "is required for kind reasoning");
	if (!rc && s->kind == K_ERROR && !s->status)
		rc = bad(w, "status", "is required for kind error");
	if (!rc && !(s->json = cJSON_PrintUnformatted(j)))
		rc = PC_ENOMEM;
	if (rc) {
		pc_mock_step_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int pc_mock_step_parse(const cJSON *json, pc_mock_step_t **out, char *err, size_t errcap)
{
	if (!json || !out)
		return PC_EINVAL;
	where_t w = {"", err, errcap};
	return step_parse(json, &w, out);
}

void pc_mock_step_free(pc_mock_step_t *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->tool_count; i++) {
		free(s->tools[i].id);
		free(s->tools[i].name);
		free(s->tools[i].args);
	}
	free(s->tools);
	free(s->text);
	free(s->reasoning);
	free(s->message);
	free(s->etype);
	free(s->code);
	free(s->headers);
	free(s->json);
	free(s);
}

const char *pc_mock_step_json(const pc_mock_step_t *s)
{
	return s ? s->json : "null";
}

const char *pc_mock_source_name(pc_mock_source_t src)
{
	switch (src) {
	case PC_MOCK_SRC_MARKER: return "marker";
	case PC_MOCK_SRC_HEADER: return "header";
	case PC_MOCK_SRC_SCENARIO: return "scenario";
	case PC_MOCK_SRC_DEFAULT: return "default";
	}
	return "?";
}

/* ---- scenarios ------------------------------------------------------------ */

typedef struct session {
	struct session *next;
	size_t cursor;
	char key[];
} session_t;

struct pc_mock_scenario {
	uint32_t refs;
	pc_mock_step_t **steps;
	size_t step_count;
	pc_mock_step_t *dflt; /* NULL: the echo */
	bool loop;            /* after the last step, start again */
	char **models;
	size_t model_count;
	size_t cursor;        /* requests naming no session */
	session_t **buckets;  /* chained; grows with the session count */
	size_t bucket_count;
	size_t session_count;
};

static void sessions_clear(pc_mock_scenario_t *sc)
{
	for (size_t i = 0; i < sc->bucket_count; i++) {
		session_t *s = sc->buckets[i];
		while (s) {
			session_t *next = s->next;
			free(s);
			s = next;
		}
	}
	free(sc->buckets);
	sc->buckets = NULL;
	sc->bucket_count = 0;
	sc->session_count = 0;
}

static void scenario_free(pc_mock_scenario_t *sc)
{
	for (size_t i = 0; i < sc->step_count; i++)
		pc_mock_step_free(sc->steps[i]);
	free(sc->steps);
	pc_mock_step_free(sc->dflt);
	for (size_t i = 0; i < sc->model_count; i++)
		free(sc->models[i]);
	free(sc->models);
	sessions_clear(sc);
	free(sc);
}

static int parse_steps(const cJSON *arr, pc_mock_scenario_t *sc, char *err, size_t cap)
{
	if (!cJSON_IsArray(arr))
		return fail(err, cap, "steps: must be an array");
	int n = cJSON_GetArraySize(arr);
	if (n && !(sc->steps = calloc((size_t)n, sizeof(*sc->steps))))
		return PC_ENOMEM;
	const cJSON *j;
	cJSON_ArrayForEach(j, arr) {
		char path[32];
		snprintf(path, sizeof(path), "steps[%zu]", sc->step_count);
		where_t w = {path, err, cap};
		int rc = step_parse(j, &w, &sc->steps[sc->step_count]);
		if (rc)
			return rc;
		sc->step_count++;
	}
	return 0;
}

static int parse_models(const cJSON *arr, pc_mock_scenario_t *sc, char *err, size_t cap)
{
	int n = cJSON_GetArraySize(arr);
	if (!cJSON_IsArray(arr) || n == 0)
		return fail(err, cap, "models: must be a non-empty array of strings");
	if (!(sc->models = calloc((size_t)n, sizeof(char *))))
		return PC_ENOMEM;
	const cJSON *m;
	cJSON_ArrayForEach(m, arr) {
		if (!cJSON_IsString(m) || !*m->valuestring)
			return fail(err, cap, "models[%zu]: must be a non-empty string", sc->model_count);
		if (!(sc->models[sc->model_count] = dup_str(m->valuestring)))
			return PC_ENOMEM;
		sc->model_count++;
	}
	return 0;
}

static int parse_scenario(const cJSON *root, pc_mock_scenario_t *sc, char *err, size_t cap)
{
	if (cJSON_IsArray(root))
		return parse_steps(root, sc, err, cap);
	if (!cJSON_IsObject(root))
		return fail(err, cap, "a scenario must be an object or an array of steps");
	const cJSON *f;
	cJSON_ArrayForEach(f, root) {
		if (strcmp(f->string, "steps") && strcmp(f->string, "then") && strcmp(f->string, "default") &&
		    strcmp(f->string, "models"))
			return fail(err, cap, "%s: unknown key", f->string);
	}
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "steps");
	int rc = v ? parse_steps(v, sc, err, cap) : 0;
	if (rc)
		return rc;
	if ((v = cJSON_GetObjectItemCaseSensitive(root, "then"))) {
		if (cJSON_IsString(v) && !strcmp(v->valuestring, "loop"))
			sc->loop = true;
		else if (!cJSON_IsString(v) || strcmp(v->valuestring, "default"))
			return fail(err, cap, "then: must be \"default\" or \"loop\"");
	}
	if ((v = cJSON_GetObjectItemCaseSensitive(root, "default"))) {
		where_t w = {"default", err, cap};
		if ((rc = step_parse(v, &w, &sc->dflt)))
			return rc;
	}
	if ((v = cJSON_GetObjectItemCaseSensitive(root, "models")))
		rc = parse_models(v, sc, err, cap);
	return rc;
}

int pc_mock_scenario_parse(const char *json, size_t len, pc_mock_scenario_t **out, char *err,
			   size_t errcap)
{
	if (!json || !out)
		return PC_EINVAL;
	const char *end = json;
	cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
	if (!root)
		return fail(err, errcap, "not valid JSON (near byte %zu)", (size_t)(end - json));
	int rc = PC_ENOMEM;
	pc_mock_scenario_t *sc = calloc(1, sizeof(*sc));
	if (sc) {
		sc->refs = 1;
		rc = parse_scenario(root, sc, err, errcap);
	}
	cJSON_Delete(root);
	if (rc) {
		if (sc)
			scenario_free(sc);
		return rc;
	}
	*out = sc;
	return 0;
}

pc_mock_scenario_t *pc_mock_scenario_retain(pc_mock_scenario_t *sc)
{
	if (sc)
		pc_atomic_faa_u32(&sc->refs, 1);
	return sc;
}

void pc_mock_scenario_release(pc_mock_scenario_t *sc)
{
	if (sc && pc_atomic_faa_u32(&sc->refs, (uint32_t)-1) == 1)
		scenario_free(sc);
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* Doubles the bucket array (rehashing); on ENOMEM the table stays as it
 * was, only longer chains. */
static void sessions_grow(pc_mock_scenario_t *sc)
{
	size_t n = sc->bucket_count ? sc->bucket_count * 2 : 64;
	session_t **nb = calloc(n, sizeof(*nb));
	if (!nb)
		return;
	for (size_t i = 0; i < sc->bucket_count; i++) {
		session_t *s = sc->buckets[i];
		while (s) {
			session_t *next = s->next;
			size_t b = fnv1a(s->key) & (n - 1);
			s->next = nb[b];
			nb[b] = s;
			s = next;
		}
	}
	free(sc->buckets);
	sc->buckets = nb;
	sc->bucket_count = n;
}

/* The cursor of `key`, created at the first step; NULL when the table is
 * full (the caller uses the shared cursor) or memory ran out (*rc). */
static size_t *session_cursor(pc_mock_scenario_t *sc, const char *key, int *rc)
{
	if (sc->session_count >= sc->bucket_count)
		sessions_grow(sc);
	if (!sc->bucket_count) {
		*rc = PC_ENOMEM;
		return NULL;
	}
	size_t b = fnv1a(key) & (sc->bucket_count - 1);
	for (session_t *s = sc->buckets[b]; s; s = s->next)
		if (!strcmp(s->key, key))
			return &s->cursor;
	if (sc->session_count >= PC_MOCK_MAX_SESSIONS)
		return NULL;
	size_t kl = strlen(key) + 1;
	session_t *s = malloc(sizeof(*s) + kl);
	if (!s) {
		*rc = PC_ENOMEM;
		return NULL;
	}
	memcpy(s->key, key, kl);
	s->cursor = 0;
	s->next = sc->buckets[b];
	sc->buckets[b] = s;
	sc->session_count++;
	return &s->cursor;
}

int pc_mock_scenario_next(pc_mock_scenario_t *sc, const char *session, const pc_mock_step_t **step,
			  pc_mock_source_t *src)
{
	if (!sc || !step || !src)
		return PC_EINVAL;
	int rc = 0;
	size_t *cur = &sc->cursor;
	if (session && *session) {
		size_t *sess = session_cursor(sc, session, &rc);
		if (rc)
			return rc;
		if (sess)
			cur = sess;
	}
	if (*cur >= sc->step_count && sc->loop)
		*cur = 0;
	if (*cur < sc->step_count) {
		*step = sc->steps[(*cur)++];
		*src = PC_MOCK_SRC_SCENARIO;
	} else {
		*step = sc->dflt;
		*src = PC_MOCK_SRC_DEFAULT;
	}
	return 0;
}

void pc_mock_scenario_rewind(pc_mock_scenario_t *sc)
{
	if (!sc)
		return;
	sc->cursor = 0;
	sessions_clear(sc);
}

/* ---- reading the request -------------------------------------------------- */

/* Appends the text of a message's content (a string, or the "text" parts
 * of an array joined with LF). */
static void content_text(const cJSON *msg, buf_t *out)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
	if (cJSON_IsString(c)) {
		buf_puts(out, c->valuestring);
		return;
	}
	const cJSON *parts = cJSON_IsArray(c) ? c : NULL, *part;
	bool first = true;
	cJSON_ArrayForEach(part, parts) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
		const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
		if (!cJSON_IsString(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text"))
			continue;
		if (!first)
			buf_put(out, "\n", 1);
		buf_puts(out, t->valuestring);
		first = false;
	}
}

static bool is_user(const cJSON *msg)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, "role");
	return cJSON_IsString(r) && !strcmp(r->valuestring, "user");
}

#define MARKER "[[mock:"

/* Finds the first well-formed marker in s[0..n): its JSON is parsed into
 * *json (the caller's) and [*start, *end) spans the whole marker. False if
 * there is none; PC_EINVAL (in *rc) if one is there but broken. */
static bool find_marker(const char *s, size_t n, cJSON **json, size_t *start, size_t *end, int *rc)
{
	size_t ml = strlen(MARKER);
	const char *m = memmem(s, n, MARKER, ml);
	if (!m)
		return false;
	const char *j = m + ml;
	const char *jend = NULL;
	cJSON *v = cJSON_ParseWithLengthOpts(j, n - (size_t)(j - s), &jend, false);
	if (v && jend && (size_t)(jend - s) + 2 <= n && jend[0] == ']' && jend[1] == ']') {
		*json = v;
		*start = (size_t)(m - s);
		*end = (size_t)(jend - s) + 2;
		return true;
	}
	cJSON_Delete(v);
	*rc = PC_EINVAL;
	return false;
}

int pc_mock_request_step(const cJSON *body, const char *header, pc_mock_step_t **out,
			 pc_mock_source_t *src, char *err, size_t errcap)
{
	if (!out || !src)
		return PC_EINVAL;
	*out = NULL;
	const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
	const cJSON *last = cJSON_IsArray(msgs) ? cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1) : NULL;
	int rc = 0;
	if (last && is_user(last)) {
		buf_t t = {0};
		content_text(last, &t);
		cJSON *j = NULL;
		size_t a, b;
		if (t.err)
			rc = t.err;
		else if (t.p && find_marker(t.p, t.len, &j, &a, &b, &rc)) {
			where_t w = {"marker", err, errcap};
			*src = PC_MOCK_SRC_MARKER;
			rc = step_parse(j, &w, out);
			cJSON_Delete(j);
		} else if (rc) {
			rc = fail(err, errcap, "marker: [[mock:...]] must hold a JSON object followed by ]]");
		}
		free(t.p);
		if (rc || *out)
			return rc;
	}
	if (!header)
		return 0;
	cJSON *j = cJSON_Parse(header);
	if (!j)
		return fail(err, errcap, "x-mock-scenario: not valid JSON");
	where_t w = {"x-mock-scenario", err, errcap};
	*src = PC_MOCK_SRC_HEADER;
	rc = step_parse(j, &w, out);
	cJSON_Delete(j);
	return rc;
}

/* The echo: the last user message with text, markers removed, trimmed. */
static int echo_text(const cJSON *body, char **out)
{
	const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
	buf_t t = {0};
	for (int i = cJSON_GetArraySize(msgs) - 1; i >= 0 && !t.len && !t.err; i--) {
		const cJSON *m = cJSON_GetArrayItem(msgs, i);
		if (!is_user(m))
			continue;
		content_text(m, &t);
		cJSON *j;
		size_t a, b;
		int rc = 0;
		while (t.p && find_marker(t.p, t.len, &j, &a, &b, &rc)) {
			cJSON_Delete(j);
			memmove(t.p + a, t.p + b, t.len - b + 1);
			t.len -= b - a;
		}
		size_t s = 0;
		while (s < t.len && is_space(t.p[s]))
			s++;
		while (t.len > s && is_space(t.p[t.len - 1]))
			t.len--;
		if (t.p) {
			memmove(t.p, t.p + s, t.len - s);
			t.len -= s;
			t.p[t.len] = 0;
		}
	}
	if (!t.err && !t.len)
		buf_puts(&t, "OK");
	if (t.err) {
		free(t.p);
		return t.err;
	}
	*out = t.p;
	return 0;
}

/* Words in every string of the conversation except structural ones (roles,
 * types, ids, names, signatures). */
static uint64_t json_words(const cJSON *v)
{
	static const char *const skip[] = {"role", "type", "id", "name", "tool_call_id", "tool_use_id",
					   "signature"};
	uint64_t n = 0;
	if (cJSON_IsString(v)) {
		for (size_t i = 0; v->string && i < sizeof(skip) / sizeof(skip[0]); i++)
			if (!strcmp(v->string, skip[i]))
				return 0;
		return word_count(v->valuestring, strlen(v->valuestring));
	}
	const cJSON *c;
	cJSON_ArrayForEach(c, v)
		n += json_words(c);
	return n;
}

static uint64_t input_words(const cJSON *body)
{
	return json_words(cJSON_GetObjectItemCaseSensitive(body, "messages")) +
	       json_words(cJSON_GetObjectItemCaseSensitive(body, "system"));
}

/* ---- splitting text into pieces ------------------------------------------- */

/* Cuts a string into `chunks` pieces of (nearly) equal code point count,
 * or with chunks 0 into words, each with the whitespace before it (the
 * trailing whitespace joins the last word). */
typedef struct split {
	const char *s;
	size_t n;
	size_t pos;
	uint32_t chunks;
	uint32_t i;
	uint64_t cps;    /* code points in s */
	uint64_t cp_pos; /* code points before pos */
	size_t last_word; /* index of the last non-space byte */
} split_t;

static bool utf8_lead(char c)
{
	return ((unsigned char)c & 0xC0) != 0x80;
}

static void split_init(split_t *sp, const char *s, size_t n, uint32_t chunks)
{
	*sp = (split_t){.s = s, .n = n, .chunks = chunks};
	for (size_t i = 0; i < n; i++) {
		sp->cps += utf8_lead(s[i]);
		if (!is_space(s[i]))
			sp->last_word = i;
	}
	if (chunks && chunks > sp->cps)
		sp->chunks = (uint32_t)sp->cps;
}

static bool split_next(split_t *sp, const char **p, size_t *len)
{
	if (sp->pos >= sp->n)
		return false;
	size_t start = sp->pos, e = start;
	if (sp->chunks) {
		uint64_t target = (uint64_t)(sp->i + 1) * sp->cps / sp->chunks;
		sp->i++;
		while (e < sp->n && (sp->cp_pos < target || !utf8_lead(sp->s[e]))) {
			sp->cp_pos += utf8_lead(sp->s[e]);
			e++;
		}
	} else {
		while (e < sp->n && is_space(sp->s[e]))
			e++;
		while (e < sp->n && !is_space(sp->s[e]))
			e++;
		if (e > sp->last_word)
			e = sp->n;
	}
	sp->pos = e;
	*p = sp->s + start;
	*len = e - start;
	return true;
}

static uint64_t piece_count(const char *s, uint32_t chunks)
{
	if (!s)
		return 0;
	split_t sp;
	split_init(&sp, s, strlen(s), chunks);
	if (sp.chunks)
		return sp.chunks;
	uint64_t n = 0;
	const char *p;
	size_t l;
	while (split_next(&sp, &p, &l))
		n++;
	return n;
}

/* ---- the answer ----------------------------------------------------------- */

typedef struct event {
	uint32_t wait_ms;
	size_t off;
	size_t len;
} event_t;

/* A timed group of events: the k-th piece (a fragment of text, reasoning
 * or arguments, or a tool call's header) and what goes out with it.
 * Faults count pieces, so "after 2" means the same in both APIs. */
typedef struct group {
	size_t start; /* its first event */
	size_t piece; /* the event carrying the piece; NO_PIECE for the finish */
} group_t;

#define NO_PIECE SIZE_MAX

/* An answer being built: the resolved content, the ids, and the SSE
 * events written so far. */
typedef struct answer {
	pc_mock_api_t api;
	const pc_mock_step_t *st;
	const char *text;      /* NULL: no text */
	const char *reasoning; /* NULL: no reasoning */
	char *echo;            /* owned: the echoed text */
	const char *model;
	uint64_t seq;
	int64_t created;
	bool include_usage;
	bool started;          /* a timed event has been written */
	size_t finish_ev;      /* the finish chunk / message_delta */
	int64_t usage[U_COUNT];
	const char *finish;    /* in the API's vocabulary */
	char id[48];
	char req_id[48];
	char **tool_ids;
	buf_t head;            /* OpenAI: a chunk's JSON up to "choices": */
	buf_t out;
	event_t *ev;
	size_t ev_count;
	size_t ev_cap;
	group_t *groups;
	size_t group_count;
	size_t group_cap;
	uint32_t since_wait;   /* pieces since the last delay_ms */
	int err;
} answer_t;

/* Opens the next timed group at the next event; returns its wait. */
static uint32_t next_wait(answer_t *a)
{
	if (a->group_count == a->group_cap && !a->err) {
		size_t cap = a->group_cap ? a->group_cap * 2 : 16;
		group_t *ng = realloc(a->groups, cap * sizeof(*ng));
		if (!ng)
			a->err = PC_ENOMEM;
		else {
			a->groups = ng;
			a->group_cap = cap;
		}
	}
	if (!a->err)
		a->groups[a->group_count++] = (group_t){.start = a->ev_count, .piece = a->ev_count};
	/* `burst` pieces go together, then the stream waits delay_ms: a long
	 * answer in small pieces can stream faster than a millisecond each. */
	if (a->started)
		return ++a->since_wait % (a->st->burst ? a->st->burst : 1) ? 0 : a->st->delay_ms;
	a->started = true;
	return a->st->ttft_ms;
}

/* The wait before the finish: ttft when nothing came before it. */
static uint32_t finish_wait(answer_t *a)
{
	a->finish_ev = a->ev_count;
	if (a->started)
		return 0;
	uint32_t w = next_wait(a);
	if (!a->err)
		a->groups[a->group_count - 1].piece = NO_PIECE;
	return w;
}

static void ev_begin(answer_t *a, uint32_t wait_ms, const char *name)
{
	if (a->ev_count == a->ev_cap && !a->err) {
		size_t cap = a->ev_cap ? a->ev_cap * 2 : 32;
		event_t *ne = realloc(a->ev, cap * sizeof(*ne));
		if (!ne)
			a->err = PC_ENOMEM;
		else {
			a->ev = ne;
			a->ev_cap = cap;
		}
	}
	if (a->err)
		return;
	a->ev[a->ev_count] = (event_t){.wait_ms = wait_ms, .off = a->out.len};
	if (name) {
		buf_puts(&a->out, "event: ");
		buf_puts(&a->out, name);
		buf_puts(&a->out, "\n");
	}
	buf_puts(&a->out, "data: ");
}

static void ev_end(answer_t *a)
{
	buf_put(&a->out, "\n\n", 2);
	if (a->err)
		return;
	a->ev[a->ev_count].len = a->out.len - a->ev[a->ev_count].off;
	a->ev_count++;
}

/* A whole event from a cJSON object (which it frees). */
static void ev_json(answer_t *a, uint32_t wait_ms, const char *name, cJSON *obj)
{
	char *s = obj ? pc_json_print(obj) : NULL;
	cJSON_Delete(obj);
	if (!s) {
		a->err = PC_ENOMEM;
		return;
	}
	ev_begin(a, wait_ms, name);
	buf_puts(&a->out, s);
	ev_end(a);
	free(s);
}

static uint64_t usage_of(const answer_t *a, int u)
{
	return (uint64_t)a->usage[u];
}

static cJSON *openai_usage(const answer_t *a)
{
	uint64_t in = usage_of(a, U_INPUT) + usage_of(a, U_CACHE_READ) + usage_of(a, U_CACHE_WRITE);
	cJSON *u = cJSON_CreateObject();
	bool ok = u != NULL;
	ok &= cJSON_AddNumberToObject(u, "prompt_tokens", (double)in) != NULL;
	ok &= cJSON_AddNumberToObject(u, "completion_tokens", (double)usage_of(a, U_OUTPUT)) != NULL;
	ok &= cJSON_AddNumberToObject(u, "total_tokens", (double)(in + usage_of(a, U_OUTPUT))) != NULL;
	cJSON *pd = cJSON_AddObjectToObject(u, "prompt_tokens_details");
	ok &= cJSON_AddNumberToObject(pd, "cached_tokens", (double)usage_of(a, U_CACHE_READ)) != NULL;
	cJSON *cd = cJSON_AddObjectToObject(u, "completion_tokens_details");
	ok &= cJSON_AddNumberToObject(cd, "reasoning_tokens", (double)usage_of(a, U_REASONING)) != NULL;
	if (!ok) {
		cJSON_Delete(u);
		return NULL;
	}
	return u;
}

static cJSON *anthropic_usage(const answer_t *a, uint64_t output)
{
	cJSON *u = cJSON_CreateObject();
	bool ok = u != NULL;
	ok &= cJSON_AddNumberToObject(u, "input_tokens", (double)usage_of(a, U_INPUT)) != NULL;
	ok &= cJSON_AddNumberToObject(u, "cache_creation_input_tokens", (double)usage_of(a, U_CACHE_WRITE)) != NULL;
	ok &= cJSON_AddNumberToObject(u, "cache_read_input_tokens", (double)usage_of(a, U_CACHE_READ)) != NULL;
	ok &= cJSON_AddNumberToObject(u, "output_tokens", (double)output) != NULL;
	if (!ok) {
		cJSON_Delete(u);
		return NULL;
	}
	return u;
}

/* Adds `item` (which may be NULL after a failed allocation) to `o`. */
static bool add_item(cJSON *o, const char *key, cJSON *item)
{
	if (!item)
		return false;
	if (!o || !cJSON_AddItemToObject(o, key, item)) {
		cJSON_Delete(item);
		return false;
	}
	return true;
}

/* A new object appended to `arr`, or NULL (nothing leaks) on failure. */
static cJSON *push_obj(cJSON *arr)
{
	cJSON *o = cJSON_CreateObject();
	if (o && !cJSON_AddItemToArray(arr, o)) {
		cJSON_Delete(o);
		o = NULL;
	}
	return o;
}

/* -- OpenAI ----------------------------------------------------------------- */

static void oa_begin(answer_t *a, uint32_t wait_ms)
{
	ev_begin(a, wait_ms, NULL);
	buf_put(&a->out, a->head.p, a->head.len);
	buf_puts(&a->out, "[{\"index\":0,\"delta\":");
}

static void oa_end(answer_t *a, const char *finish)
{
	buf_puts(&a->out, ",\"logprobs\":null,\"finish_reason\":");
	if (finish)
		buf_json_str(&a->out, finish, strlen(finish));
	else
		buf_puts(&a->out, "null");
	buf_puts(&a->out, a->include_usage ? "}],\"usage\":null}" : "}]}");
	ev_end(a);
}

/* One event per piece of `s`: {"<field>":"<piece>"}. */
static void oa_pieces(answer_t *a, const char *field, const char *s)
{
	split_t sp;
	split_init(&sp, s, strlen(s), a->st->chunks);
	const char *p;
	size_t l;
	while (split_next(&sp, &p, &l)) {
		oa_begin(a, next_wait(a));
		buf_printf(&a->out, "{\"%s\":", field);
		buf_json_str(&a->out, p, l);
		buf_puts(&a->out, "}");
		oa_end(a, NULL);
	}
}

static void openai_stream(answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	/* The role comes in its own chunk, except that a bare tool-call answer
	 * carries it in the first tool fragment, as OpenAI does. */
	bool tools_first = !a->reasoning && !a->text && st->tool_count;
	if (!tools_first) {
		oa_begin(a, 0);
		buf_puts(&a->out, "{\"role\":\"assistant\",\"content\":\"\"}");
		oa_end(a, NULL);
	}
	if (a->reasoning)
		oa_pieces(a, "reasoning_content", a->reasoning);
	if (a->text)
		oa_pieces(a, "content", a->text);
	for (size_t i = 0; i < st->tool_count; i++) {
		const tool_t *t = &st->tools[i];
		oa_begin(a, next_wait(a));
		buf_puts(&a->out, i == 0 && tools_first ? "{\"role\":\"assistant\",\"content\":null," : "{");
		buf_printf(&a->out, "\"tool_calls\":[{\"index\":%zu,\"id\":", i);
		buf_json_str(&a->out, a->tool_ids[i], strlen(a->tool_ids[i]));
		buf_puts(&a->out, ",\"type\":\"function\",\"function\":{\"name\":");
		buf_json_str(&a->out, t->name, strlen(t->name));
		buf_puts(&a->out, ",\"arguments\":\"\"}}]}");
		oa_end(a, NULL);
		split_t sp;
		split_init(&sp, t->args, strlen(t->args), st->arg_chunks);
		const char *p;
		size_t l;
		while (split_next(&sp, &p, &l)) {
			oa_begin(a, next_wait(a));
			buf_printf(&a->out, "{\"tool_calls\":[{\"index\":%zu,\"function\":{\"arguments\":", i);
			buf_json_str(&a->out, p, l);
			buf_puts(&a->out, "}}]}");
			oa_end(a, NULL);
		}
	}
	oa_begin(a, finish_wait(a));
	buf_puts(&a->out, "{}");
	oa_end(a, a->finish);
	if (a->include_usage) {
		cJSON *u = openai_usage(a);
		char *us = u ? pc_json_print(u) : NULL;
		cJSON_Delete(u);
		if (!us)
			a->err = PC_ENOMEM;
		ev_begin(a, 0, NULL);
		buf_put(&a->out, a->head.p, a->head.len);
		buf_puts(&a->out, "[],\"usage\":");
		buf_puts(&a->out, us ? us : "null");
		buf_puts(&a->out, "}");
		ev_end(a);
		free(us);
	}
	ev_begin(a, 0, NULL);
	buf_puts(&a->out, "[DONE]");
	ev_end(a);
}

static cJSON *openai_message(answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	cJSON *root = cJSON_CreateObject();
	bool ok = root != NULL;
	ok &= cJSON_AddStringToObject(root, "id", a->id) != NULL;
	ok &= cJSON_AddStringToObject(root, "object", "chat.completion") != NULL;
	ok &= cJSON_AddNumberToObject(root, "created", (double)a->created) != NULL;
	ok &= cJSON_AddStringToObject(root, "model", a->model) != NULL;
	cJSON *choice = push_obj(cJSON_AddArrayToObject(root, "choices"));
	ok &= choice != NULL;
	ok &= cJSON_AddNumberToObject(choice, "index", 0) != NULL;
	cJSON *msg = cJSON_AddObjectToObject(choice, "message");
	ok &= cJSON_AddStringToObject(msg, "role", "assistant") != NULL;
	if (a->text || !st->tool_count)
		ok &= cJSON_AddStringToObject(msg, "content", a->text ? a->text : "") != NULL;
	else
		ok &= cJSON_AddNullToObject(msg, "content") != NULL;
	ok &= cJSON_AddNullToObject(msg, "refusal") != NULL;
	if (a->reasoning)
		ok &= cJSON_AddStringToObject(msg, "reasoning_content", a->reasoning) != NULL;
	cJSON *calls = st->tool_count ? cJSON_AddArrayToObject(msg, "tool_calls") : NULL;
	ok &= !st->tool_count || calls;
	for (size_t i = 0; ok && i < st->tool_count; i++) {
		cJSON *c = push_obj(calls);
		ok &= c != NULL;
		ok &= cJSON_AddStringToObject(c, "id", a->tool_ids[i]) != NULL;
		ok &= cJSON_AddStringToObject(c, "type", "function") != NULL;
		cJSON *fn = cJSON_AddObjectToObject(c, "function");
		ok &= cJSON_AddStringToObject(fn, "name", st->tools[i].name) != NULL;
		ok &= cJSON_AddStringToObject(fn, "arguments", st->tools[i].args) != NULL;
	}
	ok &= cJSON_AddNullToObject(choice, "logprobs") != NULL;
	ok &= cJSON_AddStringToObject(choice, "finish_reason", a->finish) != NULL;
	ok &= add_item(root, "usage", openai_usage(a));
	ok &= cJSON_AddStringToObject(root, "system_fingerprint", "fp_mock") != NULL;
	if (!ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

/* -- Anthropic -------------------------------------------------------------- */

static void an_block_start(answer_t *a, uint32_t wait_ms, size_t index, const char *block)
{
	ev_begin(a, wait_ms, "content_block_start");
	buf_printf(&a->out, "{\"type\":\"content_block_start\",\"index\":%zu,\"content_block\":", index);
	buf_puts(&a->out, block);
	buf_puts(&a->out, "}");
	ev_end(a);
}

static void an_delta(answer_t *a, uint32_t wait_ms, size_t index, const char *type, const char *field,
		     const char *s, size_t n)
{
	ev_begin(a, wait_ms, "content_block_delta");
	buf_printf(&a->out, "{\"type\":\"content_block_delta\",\"index\":%zu,\"delta\":{\"type\":\"%s\",\"%s\":",
		   index, type, field);
	buf_json_str(&a->out, s, n);
	buf_puts(&a->out, "}}");
	ev_end(a);
}

static void an_block_stop(answer_t *a, size_t index)
{
	ev_begin(a, 0, "content_block_stop");
	buf_printf(&a->out, "{\"type\":\"content_block_stop\",\"index\":%zu}", index);
	ev_end(a);
}

/* A text or thinking block: the start takes the first piece's wait. */
static void an_text_block(answer_t *a, size_t index, const char *s, bool thinking, uint32_t chunks)
{
	split_t sp;
	split_init(&sp, s, strlen(s), chunks);
	const char *p;
	size_t l;
	bool first = true;
	while (split_next(&sp, &p, &l)) {
		uint32_t w = next_wait(a);
		if (first) {
			an_block_start(a, w, index,
				       thinking ? "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}"
						: "{\"type\":\"text\",\"text\":\"\"}");
			if (!a->err)
				a->groups[a->group_count - 1].piece = a->ev_count; /* the delta, not the start */
		}
		an_delta(a, first ? 0 : w, index, thinking ? "thinking_delta" : "text_delta",
			 thinking ? "thinking" : "text", p, l);
		first = false;
	}
	if (first)
		return; /* empty: no block at all */
	if (thinking) {
		char sig[96];
		make_id(sig, sizeof(sig), "Eq", 86, a->seq, 4);
		an_delta(a, 0, index, "signature_delta", "signature", sig, strlen(sig));
	}
	an_block_stop(a, index);
}

static cJSON *anthropic_message_head(answer_t *a)
{
	cJSON *m = cJSON_CreateObject();
	bool ok = m != NULL;
	ok &= cJSON_AddStringToObject(m, "id", a->id) != NULL;
	ok &= cJSON_AddStringToObject(m, "type", "message") != NULL;
	ok &= cJSON_AddStringToObject(m, "role", "assistant") != NULL;
	ok &= cJSON_AddStringToObject(m, "model", a->model) != NULL;
	ok &= cJSON_AddArrayToObject(m, "content") != NULL;
	if (!ok) {
		cJSON_Delete(m);
		return NULL;
	}
	return m;
}

static void anthropic_stream(answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	cJSON *start = cJSON_CreateObject();
	cJSON *m = anthropic_message_head(a);
	bool ok = cJSON_AddStringToObject(start, "type", "message_start") != NULL;
	if (m) {
		ok &= cJSON_AddNullToObject(m, "stop_reason") != NULL;
		ok &= cJSON_AddNullToObject(m, "stop_sequence") != NULL;
		ok &= add_item(m, "usage", anthropic_usage(a, 1));
	}
	ok &= add_item(start, "message", m);
	if (!ok) {
		cJSON_Delete(start);
		start = NULL;
	}
	ev_json(a, 0, "message_start", start);
	ev_begin(a, 0, "ping");
	buf_puts(&a->out, "{\"type\": \"ping\"}");
	ev_end(a);
	size_t index = 0;
	if (a->reasoning && *a->reasoning)
		an_text_block(a, index++, a->reasoning, true, st->chunks);
	if (a->text && *a->text)
		an_text_block(a, index++, a->text, false, st->chunks);
	for (size_t i = 0; i < st->tool_count; i++, index++) {
		const tool_t *t = &st->tools[i];
		buf_t blk = {0};
		buf_puts(&blk, "{\"type\":\"tool_use\",\"id\":");
		buf_json_str(&blk, a->tool_ids[i], strlen(a->tool_ids[i]));
		buf_puts(&blk, ",\"name\":");
		buf_json_str(&blk, t->name, strlen(t->name));
		buf_puts(&blk, ",\"input\":{}}");
		if (blk.err)
			a->err = blk.err;
		an_block_start(a, next_wait(a), index, blk.p ? blk.p : "null");
		free(blk.p);
		an_delta(a, 0, index, "input_json_delta", "partial_json", "", 0);
		split_t sp;
		split_init(&sp, t->args, strlen(t->args), st->arg_chunks);
		const char *p;
		size_t l;
		while (split_next(&sp, &p, &l))
			an_delta(a, next_wait(a), index, "input_json_delta", "partial_json", p, l);
		an_block_stop(a, index);
	}
	cJSON *md = cJSON_CreateObject();
	ok = cJSON_AddStringToObject(md, "type", "message_delta") != NULL;
	cJSON *d = cJSON_AddObjectToObject(md, "delta");
	ok &= cJSON_AddStringToObject(d, "stop_reason", a->finish) != NULL;
	ok &= cJSON_AddNullToObject(d, "stop_sequence") != NULL;
	cJSON *u = cJSON_AddObjectToObject(md, "usage");
	ok &= cJSON_AddNumberToObject(u, "output_tokens", (double)usage_of(a, U_OUTPUT)) != NULL;
	if (!ok) {
		cJSON_Delete(md);
		md = NULL;
	}
	ev_json(a, finish_wait(a), "message_delta", md);
	ev_begin(a, 0, "message_stop");
	buf_puts(&a->out, "{\"type\":\"message_stop\"}");
	ev_end(a);
}

static cJSON *anthropic_message(answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	cJSON *m = anthropic_message_head(a);
	cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	bool ok = m != NULL;
	if (a->reasoning && *a->reasoning) {
		cJSON *b = push_obj(content);
		char sig[96];
		make_id(sig, sizeof(sig), "Eq", 86, a->seq, 4);
		ok &= cJSON_AddStringToObject(b, "type", "thinking") != NULL; /* false when b is NULL */
		ok &= cJSON_AddStringToObject(b, "thinking", a->reasoning) != NULL;
		ok &= cJSON_AddStringToObject(b, "signature", sig) != NULL;
	}
	if (a->text && *a->text) {
		cJSON *b = push_obj(content);
		ok &= cJSON_AddStringToObject(b, "type", "text") != NULL;
		ok &= cJSON_AddStringToObject(b, "text", a->text) != NULL;
	}
	for (size_t i = 0; ok && i < st->tool_count; i++) {
		cJSON *b = push_obj(content);
		ok &= cJSON_AddStringToObject(b, "type", "tool_use") != NULL;
		ok &= cJSON_AddStringToObject(b, "id", a->tool_ids[i]) != NULL;
		ok &= cJSON_AddStringToObject(b, "name", st->tools[i].name) != NULL;
		/* Arguments that are not JSON go out as the string they are:
		 * the shape is then as broken as the step asked. */
		cJSON *in = cJSON_Parse(st->tools[i].args);
		ok &= add_item(b, "input", in ? in : cJSON_CreateString(st->tools[i].args));
	}
	ok &= cJSON_AddStringToObject(m, "stop_reason", a->finish) != NULL;
	ok &= cJSON_AddNullToObject(m, "stop_sequence") != NULL;
	ok &= add_item(m, "usage", anthropic_usage(a, usage_of(a, U_OUTPUT)));
	if (!ok) {
		cJSON_Delete(m);
		return NULL;
	}
	return m;
}

/* ---- plans ---------------------------------------------------------------- */

static void plan_headers(pc_mock_api_t api, const char *req_id, const char *type,
			 const pc_mock_step_t *st, buf_t *b)
{
	buf_printf(b, "Content-Type: %s\r\n", type);
	if (!strcmp(type, "text/event-stream"))
		buf_puts(b, "Cache-Control: no-cache\r\n");
	buf_printf(b, "%s: %s\r\n", api == PC_MOCK_OPENAI ? "x-request-id" : "request-id", req_id);
	if (st && st->retry_after >= 0)
		buf_printf(b, "retry-after: %" PRId64 "\r\n", st->retry_after);
	if (st && st->headers)
		buf_puts(b, st->headers);
}

static void request_id(char *out, size_t cap, pc_mock_api_t api, uint64_t seq)
{
	if (api == PC_MOCK_OPENAI)
		make_id(out, cap, "req_", 32, seq, 3);
	else
		make_id(out, cap, "req_01", 22, seq, 3);
}

static const char *model_of(const cJSON *body)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "model");
	return cJSON_IsString(m) && *m->valuestring ? m->valuestring : "mock-model";
}

/* A one-shot JSON answer. */
static int plan_json(pc_mock_plan_t *pl, cJSON *obj, int status, pc_mock_api_t api, uint64_t seq,
		     const pc_mock_step_t *st)
{
	char rid[48];
	request_id(rid, sizeof(rid), api, seq);
	char *s = obj ? pc_json_print(obj) : NULL;
	cJSON_Delete(obj);
	if (!s)
		return PC_ENOMEM;
	buf_t h = {0};
	pl->status = status;
	pl->send_head = true;
	plan_headers(api, rid, "application/json", st, &h);
	if (h.err) {
		free(s);
		return h.err;
	}
	pl->headers = h.p;
	pl->body = s;
	pl->body_len = strlen(s);
	return 0;
}

/* The provider's error JSON for `status`. `message` NULL: the provider's
 * usual wording. */
static cJSON *error_body(pc_mock_api_t api, int status, const char *type, const char *code,
			 const char *message, const char *param, const char *model, const char *rid)
{
	char text[512];
	const char *t = type, *c = code, *m = message;
	if (api == PC_MOCK_OPENAI) {
		const char *dt = status >= 500 ? "server_error" : "invalid_request_error", *dc = NULL, *dm;
		switch (status) {
		case 401:
			dc = "invalid_api_key";
			dm = "Incorrect API key provided: sk-mock*****. You can find your API key at "
			     "https://platform.openai.com/account/api-keys.";
			break;
		case 402:
			dt = dc = "insufficient_quota";
			dm = "You exceeded your current quota, please check your plan and billing details.";
			break;
		case 403:
			dt = "permission_error";
			dm = "You are not allowed to access this model.";
			break;
		case 404:
			dc = "model_not_found";
			snprintf(text, sizeof(text), "The model `%s` does not exist or you do not have access to it.", model);
			dm = text;
			break;
		case 429:
			dt = "requests";
			dc = "rate_limit_exceeded";
			snprintf(text, sizeof(text), "Rate limit reached for %s in organization org-mock on requests per min "
				 "(RPM): Limit 60, Used 60, Requested 1. Please try again in 1s.", model);
			dm = text;
			break;
		case 502: dm = "Bad gateway."; break;
		case 503:
		case 529: dm = "The server is overloaded or not ready yet."; break;
		default:
			dm = status >= 500 ? "The server had an error while processing your request. Sorry about that!"
					   : "Invalid request.";
		}
		t = t ? t : dt;
		c = c ? c : dc;
		m = m ? m : dm;
		cJSON *root = cJSON_CreateObject();
		cJSON *e = cJSON_AddObjectToObject(root, "error");
		bool ok = cJSON_AddStringToObject(e, "message", m) != NULL;
		ok &= cJSON_AddStringToObject(e, "type", t) != NULL;
		ok &= (param ? cJSON_AddStringToObject(e, "param", param) : cJSON_AddNullToObject(e, "param")) != NULL;
		ok &= (c ? cJSON_AddStringToObject(e, "code", c) : cJSON_AddNullToObject(e, "code")) != NULL;
		if (!ok) {
			cJSON_Delete(root);
			return NULL;
		}
		return root;
	}
	const char *dt = "invalid_request_error", *dm = "Invalid request.";
	switch (status) {
	case 401: dt = "authentication_error"; dm = "invalid x-api-key"; break;
	case 402:
		dt = "billing_error";
		dm = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
		     "to upgrade or purchase credits.";
		break;
	case 403: dt = "permission_error"; dm = "Your API key does not have permission to use the specified resource."; break;
	case 404:
		dt = "not_found_error";
		snprintf(text, sizeof(text), "model: %s", model);
		dm = text;
		break;
	case 413: dt = "request_too_large"; dm = "Request exceeds the maximum allowed number of bytes."; break;
	case 429:
		dt = "rate_limit_error";
		dm = "Number of request tokens has exceeded your per-minute rate limit "
		     "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. "
		     "Please reduce the prompt length or the maximum tokens requested, or try again later. You may "
		     "also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a "
		     "rate limit increase.";
		break;
	case 503:
	case 529: dt = "overloaded_error"; dm = "Overloaded"; break;
	default:
		if (status >= 500) {
			dt = "api_error";
			dm = "Internal server error";
		}
	}
	cJSON *root = cJSON_CreateObject();
	bool ok = cJSON_AddStringToObject(root, "type", "error") != NULL;
	cJSON *e = cJSON_AddObjectToObject(root, "error");
	ok &= cJSON_AddStringToObject(e, "type", t ? t : dt) != NULL;
	ok &= cJSON_AddStringToObject(e, "message", m ? m : dm) != NULL;
	ok &= cJSON_AddStringToObject(root, "request_id", rid) != NULL;
	if (!ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

int pc_mock_plan_error(pc_mock_api_t api, int status, const char *message, uint64_t seq,
		       pc_mock_plan_t *out)
{
	if (!out || status < 200 || status > 599)
		return PC_EINVAL;
	*out = (pc_mock_plan_t){0};
	char rid[48];
	request_id(rid, sizeof(rid), api, seq);
	cJSON *b = error_body(api, status, "invalid_request_error", NULL, message, NULL, "mock-model", rid);
	int rc = plan_json(out, b, status, api, seq, NULL);
	if (rc)
		pc_mock_plan_free(out);
	return rc;
}

static int plan_step_error(pc_mock_plan_t *pl, const pc_mock_step_t *st, pc_mock_api_t api,
			   const cJSON *body, uint64_t seq)
{
	char rid[48], text[256];
	request_id(rid, sizeof(rid), api, seq);
	const char *model = model_of(body);
	cJSON *b;
	int status = st->status;
	if (st->kind == K_OVERFLOW) {
		status = 400;
		int64_t max = st->max_tokens >= 0 ? st->max_tokens : api == PC_MOCK_OPENAI ? 128000 : 200000;
		int64_t got = st->prompt_tokens >= 0 ? st->prompt_tokens : max + 1 + (int64_t)input_words(body);
		if (api == PC_MOCK_OPENAI) {
			snprintf(text, sizeof(text), "This model's maximum context length is %" PRId64 " tokens. "
				 "However, your messages resulted in %" PRId64 " tokens. Please reduce the length of "
				 "the messages.", max, got);
			b = error_body(api, 400, "invalid_request_error", "context_length_exceeded", text,
				       "messages", model, rid);
		} else {
			snprintf(text, sizeof(text), "prompt is too long: %" PRId64 " tokens > %" PRId64 " maximum",
				 got, max);
			b = error_body(api, 400, "invalid_request_error", NULL, text, NULL, model, rid);
		}
	} else {
		b = error_body(api, status, st->etype, st->code, st->message, NULL, model, rid);
	}
	pl->head_wait_ms = st->ttft_ms;
	return plan_json(pl, b, status, api, seq, st);
}

static int plan_stall(pc_mock_plan_t *pl, const pc_mock_step_t *st, pc_mock_api_t api, bool stream,
		      uint64_t seq)
{
	char rid[48];
	request_id(rid, sizeof(rid), api, seq);
	pl->status = 200;
	pl->send_head = !st->before_headers;
	pl->streamed = true;
	pl->finish = st->ms ? PC_MOCK_ABORT : PC_MOCK_HANG;
	pl->finish_wait_ms = st->ms;
	buf_t h = {0};
	plan_headers(api, rid, stream ? "text/event-stream" : "application/json", st, &h);
	pl->headers = h.p;
	return h.err;
}

/* Cuts the JSON of event `i` in half (its line end stays), shifting the
 * events after it. */
static void cut_event_json(answer_t *a, size_t i)
{
	event_t *e = &a->ev[i];
	char *start = a->out.p + e->off;
	char *data = memmem(start, e->len, "data: ", 6);
	if (!data)
		return;
	size_t json_off = (size_t)(data + 6 - start), json_len = e->len - json_off - 2;
	size_t drop = json_len - json_len / 2;
	char *from = start + json_off + json_len / 2;
	memmove(from, from + drop, a->out.len - (size_t)(from + drop - a->out.p) + 1);
	a->out.len -= drop;
	e->len -= drop;
	for (size_t k = i + 1; k < a->ev_count; k++)
		a->ev[k].off -= drop;
}

/*
 * Replaces the events from `at` on with the provider's in-stream error, as
 * each sends it: OpenAI a data line with its error JSON (a 500's, "server
 * error"), Anthropic an `error` event (a 529's, "Overloaded", its usual
 * one). The step's message and type replace the defaults.
 */
static void stream_error(answer_t *a, size_t at)
{
	const pc_mock_step_t *st = a->st;
	bool oai = a->api == PC_MOCK_OPENAI;
	cJSON *b = error_body(a->api, oai ? 500 : 529, st->etype, st->code, st->message, NULL, a->model,
			      a->req_id);
	if (at < a->ev_count) {
		a->out.len = a->ev[at].off;
		a->out.p[a->out.len] = '\0';
		a->ev_count = at;
	}
	ev_json(a, 0, oai ? NULL : "error", b);
}

/* Applies the step's fault to the events and cuts them into writes.
 * Counts are pieces: K pieces go out whole, with what goes with them. */
static int plan_stream(pc_mock_plan_t *pl, answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	size_t kept = a->ev_count, partial = 0, k = st->fault_at;
	size_t pieces = a->group_count;
	if (pieces && a->groups[pieces - 1].piece == NO_PIECE)
		pieces--;
	switch (st->fault) {
	case F_DISCONNECT:
		kept = k < a->group_count ? a->groups[k].start : kept;
		pl->finish = PC_MOCK_ABORT;
		break;
	case F_STALL:
		kept = k < a->group_count ? a->groups[k].start : kept;
		pl->finish = st->stall_ms ? PC_MOCK_ABORT : PC_MOCK_HANG;
		pl->finish_wait_ms = st->stall_ms;
		break;
	case F_BAD_JSON:
		/* The K-th piece (the first by default), or the finish when
		 * there are not that many. */
		cut_event_json(a, k < pieces ? a->groups[k].piece : a->finish_ev);
		break;
	case F_TRUNCATED:
		kept--; /* never the terminator */
		if (st->fault_at_set && k < a->group_count) {
			kept = a->groups[k].start;
			partial = a->ev[kept].len / 2;
		}
		break;
	case F_STREAM_ERROR:
		/* K pieces, then the error event in place of the rest */
		kept = k < pieces ? a->groups[k].start : a->finish_ev;
		stream_error(a, kept);
		if (a->err)
			return a->err;
		kept = a->ev_count;
		break;
	}
	pl->writes = calloc(kept + 1, sizeof(*pl->writes));
	if (!pl->writes)
		return PC_ENOMEM;
	for (size_t i = 0; i <= kept; i++) {
		size_t len = i < kept ? a->ev[i].len : partial;
		if (i == kept && !len)
			break;
		pc_mock_write_t *w = pl->write_count ? &pl->writes[pl->write_count - 1] : NULL;
		if (!w || a->ev[i].wait_ms) {
			w = &pl->writes[pl->write_count++];
			*w = (pc_mock_write_t){.wait_ms = a->ev[i].wait_ms, .off = a->ev[i].off};
		}
		w->len += len;
		w->events++;
	}
	pl->body_len = pl->write_count ? pl->writes[pl->write_count - 1].off +
					 pl->writes[pl->write_count - 1].len : 0;
	pl->body = a->out.p;
	a->out.p = NULL;
	return 0;
}

/* A whole answer in one JSON body, sent after the time the stream would
 * have taken. */
static int plan_oneshot(pc_mock_plan_t *pl, answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	uint64_t timed = piece_count(a->reasoning, st->chunks) + piece_count(a->text, st->chunks);
	for (size_t i = 0; i < st->tool_count; i++)
		timed += 1 + piece_count(st->tools[i].args, st->arg_chunks);
	uint64_t total = st->ttft_ms + (timed > 1 ? (timed - 1) / (st->burst ? st->burst : 1) * st->delay_ms : 0);
	cJSON *obj = a->api == PC_MOCK_OPENAI ? openai_message(a) : anthropic_message(a);
	int rc = plan_json(pl, obj, 200, a->api, a->seq, st);
	if (rc)
		return rc;
	pl->head_wait_ms = total > MAX_MS ? MAX_MS : (uint32_t)total;
	switch (st->fault) {
	case F_DISCONNECT:
		pl->send_head = false;
		pl->finish = PC_MOCK_ABORT;
		break;
	case F_STALL:
		pl->send_head = false;
		pl->head_wait_ms = 0;
		pl->finish = st->stall_ms ? PC_MOCK_ABORT : PC_MOCK_HANG;
		pl->finish_wait_ms = st->stall_ms;
		break;
	case F_BAD_JSON:
	case F_TRUNCATED:
		pl->body_len /= 2;
		break;
	}
	return 0;
}

static const char *finish_reason(const pc_mock_step_t *st, pc_mock_api_t api)
{
	const char *f = st->finish ? st->finish : st->tool_count ? "tool_calls" : "stop";
	if (api == PC_MOCK_OPENAI)
		return f;
	if (!strcmp(f, "length"))
		return "max_tokens";
	if (!strcmp(f, "tool_calls"))
		return "tool_use";
	if (!strcmp(f, "content_filter"))
		return "refusal";
	if (!strcmp(f, "error"))
		return "error"; /* no Anthropic value: sent as is, an unknown stop reason */
	return "end_turn";
}

static int answer_init(answer_t *a, const pc_mock_step_t *st, pc_mock_api_t api, const cJSON *body,
		       uint64_t seq, int64_t created)
{
	*a = (answer_t){.api = api, .st = st, .seq = seq, .created = created};
	a->model = model_of(body);
	const cJSON *so = cJSON_GetObjectItemCaseSensitive(body, "stream_options");
	a->include_usage = api == PC_MOCK_OPENAI &&
			   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
	a->reasoning = st->reasoning;
	a->text = st->text;
	if (st->kind == K_TEXT && !st->text) {
		int rc = echo_text(body, &a->echo);
		if (rc)
			return rc;
		a->text = a->echo;
	}
	a->finish = finish_reason(st, api);
	if (api == PC_MOCK_OPENAI)
		make_id(a->id, sizeof(a->id), "chatcmpl-", 29, seq, 1);
	else
		make_id(a->id, sizeof(a->id), "msg_01", 22, seq, 2);
	request_id(a->req_id, sizeof(a->req_id), api, seq);
	if (st->tool_count && !(a->tool_ids = calloc(st->tool_count, sizeof(char *))))
		return PC_ENOMEM;
	for (size_t i = 0; i < st->tool_count; i++) {
		if (st->tools[i].id)
			a->tool_ids[i] = dup_str(st->tools[i].id);
		else if ((a->tool_ids[i] = malloc(40)))
			make_id(a->tool_ids[i], 40, api == PC_MOCK_OPENAI ? "call_" : "toolu_01",
				api == PC_MOCK_OPENAI ? 24 : 22, seq, 100 + i);
		if (!a->tool_ids[i])
			return PC_ENOMEM;
	}
	/* Usage: the step's numbers, else words counted. */
	uint64_t out = word_count(a->text ? a->text : "", a->text ? strlen(a->text) : 0);
	uint64_t reasoning = a->reasoning ? word_count(a->reasoning, strlen(a->reasoning)) : 0;
	for (size_t i = 0; i < st->tool_count; i++)
		out += word_count(st->tools[i].args, strlen(st->tools[i].args));
	int64_t computed[U_COUNT] = {
		[U_INPUT] = (int64_t)input_words(body),
		[U_OUTPUT] = (int64_t)(out + reasoning),
		[U_REASONING] = (int64_t)reasoning,
	};
	for (int u = 0; u < U_COUNT; u++)
		a->usage[u] = st->usage[u] >= 0 ? st->usage[u] : computed[u];
	if (api == PC_MOCK_OPENAI) {
		buf_puts(&a->head, "{\"id\":");
		buf_json_str(&a->head, a->id, strlen(a->id));
		buf_printf(&a->head, ",\"object\":\"chat.completion.chunk\",\"created\":%" PRId64 ",\"model\":",
			   created);
		buf_json_str(&a->head, a->model, strlen(a->model));
		buf_puts(&a->head, ",\"system_fingerprint\":\"fp_mock\",\"choices\":");
	}
	return a->head.err;
}

static void answer_free(answer_t *a)
{
	for (size_t i = 0; a->tool_ids && i < a->st->tool_count; i++)
		free(a->tool_ids[i]);
	free(a->tool_ids);
	free(a->echo);
	free(a->head.p);
	free(a->out.p);
	free(a->ev);
	free(a->groups);
}

int pc_mock_plan_build(const pc_mock_step_t *step, pc_mock_api_t api, const cJSON *body, uint64_t seq,
		       int64_t created, pc_mock_plan_t *out)
{
	if (!out || !body)
		return PC_EINVAL;
	const pc_mock_step_t *st = step ? step : &echo_step;
	*out = (pc_mock_plan_t){0};
	bool stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "stream"));
	int rc;
	if (st->kind == K_ERROR || st->kind == K_OVERFLOW) {
		rc = plan_step_error(out, st, api, body, seq);
	} else if (st->kind == K_STALL) {
		rc = plan_stall(out, st, api, stream, seq);
	} else {
		answer_t a;
		rc = answer_init(&a, st, api, body, seq, created);
		if (!rc && stream) {
			if (api == PC_MOCK_OPENAI)
				openai_stream(&a);
			else
				anthropic_stream(&a);
			rc = a.err ? a.err : a.out.err;
			out->status = 200;
			out->send_head = true;
			out->streamed = true;
			buf_t h = {0};
			plan_headers(api, a.req_id, "text/event-stream", st, &h);
			out->headers = h.p;
			rc = rc ? rc : h.err;
			if (!rc)
				rc = plan_stream(out, &a);
		} else if (!rc) {
			rc = plan_oneshot(out, &a);
		}
		answer_free(&a);
	}
	if (rc)
		pc_mock_plan_free(out);
	return rc;
}

int pc_mock_plan_models(const pc_mock_scenario_t *sc, pc_mock_api_t api, uint64_t seq,
			int64_t created, pc_mock_plan_t *out)
{
	if (!out)
		return PC_EINVAL;
	*out = (pc_mock_plan_t){0};
	static const char *const dflt[] = {"mock-model"};
	const char *const *names = sc && sc->model_count ? (const char *const *)sc->models : dflt;
	size_t n = sc && sc->model_count ? sc->model_count : 1;
	char stamp[32];
	time_t t = (time_t)created;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm))
		return PC_EINVAL;
	cJSON *root = cJSON_CreateObject();
	bool ok = api == PC_MOCK_ANTHROPIC || cJSON_AddStringToObject(root, "object", "list") != NULL;
	cJSON *data = cJSON_AddArrayToObject(root, "data");
	for (size_t i = 0; ok && i < n; i++) {
		cJSON *m = push_obj(data);
		ok &= m != NULL;
		if (api == PC_MOCK_OPENAI) {
			ok &= cJSON_AddStringToObject(m, "id", names[i]) != NULL;
			ok &= cJSON_AddStringToObject(m, "object", "model") != NULL;
			ok &= cJSON_AddNumberToObject(m, "created", (double)created) != NULL;
			ok &= cJSON_AddStringToObject(m, "owned_by", "pincer-mock") != NULL;
		} else {
			ok &= cJSON_AddStringToObject(m, "type", "model") != NULL;
			ok &= cJSON_AddStringToObject(m, "id", names[i]) != NULL;
			ok &= cJSON_AddStringToObject(m, "display_name", names[i]) != NULL;
			ok &= cJSON_AddStringToObject(m, "created_at", stamp) != NULL;
		}
	}
	if (api == PC_MOCK_ANTHROPIC) {
		ok &= cJSON_AddFalseToObject(root, "has_more") != NULL;
		ok &= cJSON_AddStringToObject(root, "first_id", names[0]) != NULL;
		ok &= cJSON_AddStringToObject(root, "last_id", names[n - 1]) != NULL;
	}
	if (!ok) {
		cJSON_Delete(root);
		root = NULL;
	}
	int rc = plan_json(out, root, 200, api, seq, NULL);
	if (rc)
		pc_mock_plan_free(out);
	return rc;
}

void pc_mock_plan_free(pc_mock_plan_t *p)
{
	if (!p)
		return;
	free(p->headers);
	free(p->body);
	free(p->writes);
	*p = (pc_mock_plan_t){0};
}
