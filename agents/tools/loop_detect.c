/*
 * Tool-call loop detection (loop_detect.h): a ring of the run's latest
 * calls, scanned by each detector before a call runs.
 */
#include "io/io.h"
#include "loop_detect.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#define HASH_HEX 64u
/* "error:" + the hex digest */
#define RESULT_MAX (6u + HASH_HEX + 1u)
/* Tool names in messages are cut to this many bytes (an unknown tool's
 * name comes from the model and may be anything). */
#define NAME_IN_MESSAGE 100u

typedef struct rec {
	char *tool;
	char *sig;     /* tool + ":" + sha256 hex of the stable arguments */
	char *call_id; /* NULL when the call had none */
	bool has_result;
	char result[RESULT_MAX];
	char *unknown_tool; /* the outcome said this tool does not exist */
} rec_t;

typedef struct warn_key {
	char *key;
	uint32_t bucket;
} warn_key_t;

struct pc_loop_history {
	pc_loop_config_t cfg;
	rec_t *ring; /* cfg.history_size slots */
	size_t head; /* the oldest */
	size_t count;
	warn_key_t keys[PC_LOOP_MAX_WARNING_KEYS + 1]; /* in insertion order */
	size_t nkeys;
};

/* ---- config ------------------------------------------------------------------- */

void pc_loop_config_default(pc_loop_config_t *c)
{
	if (!c)
		return;
	*c = (pc_loop_config_t){
		.enabled = false,
		.history_size = PC_LOOP_HISTORY_SIZE,
		.warning_threshold = PC_LOOP_WARNING_THRESHOLD,
		.critical_threshold = PC_LOOP_CRITICAL_THRESHOLD,
		.global_threshold = PC_LOOP_GLOBAL_THRESHOLD,
		.generic_repeat = true,
		.known_poll_no_progress = true,
		.ping_pong = true,
	};
}

void pc_loop_config_normalize(pc_loop_config_t *c)
{
	if (!c)
		return;
	if (c->history_size == 0)
		c->history_size = PC_LOOP_HISTORY_SIZE;
	if (c->history_size > PC_LOOP_MAX_HISTORY)
		c->history_size = PC_LOOP_MAX_HISTORY;
	if (c->warning_threshold == 0)
		c->warning_threshold = PC_LOOP_WARNING_THRESHOLD;
	if (c->critical_threshold == 0)
		c->critical_threshold = PC_LOOP_CRITICAL_THRESHOLD;
	if (c->global_threshold == 0)
		c->global_threshold = PC_LOOP_GLOBAL_THRESHOLD;
	/* room for the two "+ 1" below */
	if (c->warning_threshold > UINT32_MAX - 2)
		c->warning_threshold = UINT32_MAX - 2;
	if (c->critical_threshold <= c->warning_threshold)
		c->critical_threshold = c->warning_threshold + 1;
	if (c->global_threshold <= c->critical_threshold)
		c->global_threshold = c->critical_threshold + 1;
}

/* ---- stable JSON ---------------------------------------------------------------- */

static void put_string(pc__buf_t *b, const char *s)
{
	pc__buf_append(b, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		const char *esc = NULL;
		char u[8];
		switch (*p) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\b': esc = "\\b"; break;
		case '\f': esc = "\\f"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		default:
			if (*p < 0x20) {
				snprintf(u, sizeof(u), "\\u%04x", *p);
				esc = u;
			}
		}
		if (esc)
			pc__buf_append_str(b, esc);
		else
			pc__buf_append(b, (const char *)p, 1);
	}
	pc__buf_append(b, "\"", 1);
}

/* The shortest text that reads back as d; JSON has no NaN or infinity. */
static void put_number(pc__buf_t *b, double d)
{
	char buf[40];
	if (!isfinite(d)) {
		pc__buf_append_str(b, "null");
		return;
	}
	if (d == floor(d) && fabs(d) < 1e15) {
		snprintf(buf, sizeof(buf), "%.0f", d == 0 ? 0.0 : d);
	} else {
		for (int prec = 1; prec <= 17; prec++) {
			snprintf(buf, sizeof(buf), "%.*g", prec, d);
			if (strtod(buf, NULL) == d)
				break;
		}
	}
	pc__buf_append_str(b, buf);
}

static int member_cmp(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
	if (x == y)
		return 0;
	int c = strcmp(x->string ? x->string : "", y->string ? y->string : "");
	if (c)
		return c;
	/* duplicate keys: keep their order (qsort is not stable) */
	for (const cJSON *p = x->next; p; p = p->next)
		if (p == y)
			return -1;
	return 1;
}

static void put_value(pc__buf_t *b, const cJSON *v, unsigned depth);

static void put_object(pc__buf_t *b, const cJSON *v, unsigned depth)
{
	size_t n = 0;
	for (const cJSON *m = v->child; m; m = m->next)
		n++;
	const cJSON **members = calloc(n ? n : 1, sizeof(*members));
	if (!members) {
		b->err = PC_ENOMEM;
		return;
	}
	n = 0;
	for (const cJSON *m = v->child; m; m = m->next)
		members[n++] = m;
	qsort(members, n, sizeof(*members), member_cmp);
	pc__buf_append(b, "{", 1);
	for (size_t i = 0; i < n && !b->err; i++) {
		if (i)
			pc__buf_append(b, ",", 1);
		put_string(b, members[i]->string);
		pc__buf_append(b, ":", 1);
		put_value(b, members[i], depth + 1);
	}
	pc__buf_append(b, "}", 1);
	free(members);
}

static void put_value(pc__buf_t *b, const cJSON *v, unsigned depth)
{
	if (depth > PC_LOOP_MAX_JSON_DEPTH) {
		b->err = PC_EINVAL;
		return;
	}
	switch (v ? v->type & 0xFF : cJSON_NULL) {
	case cJSON_False: pc__buf_append_str(b, "false"); break;
	case cJSON_True: pc__buf_append_str(b, "true"); break;
	case cJSON_Number: put_number(b, v->valuedouble); break;
	case cJSON_String: put_string(b, v->valuestring); break;
	case cJSON_Raw: pc__buf_append_str(b, v->valuestring ? v->valuestring : "null"); break;
	case cJSON_Array:
		pc__buf_append(b, "[", 1);
		for (const cJSON *e = v->child; e && !b->err; e = e->next) {
			put_value(b, e, depth + 1);
			if (e->next)
				pc__buf_append(b, ",", 1);
		}
		pc__buf_append(b, "]", 1);
		break;
	case cJSON_Object: put_object(b, v, depth); break;
	default: pc__buf_append_str(b, "null"); break; /* null, and a value of no JSON type */
	}
}

static int stable(const cJSON *v, char **out)
{
	pc__buf_t b = {0};
	put_value(&b, v, 1);
	if (b.err) {
		free(b.p);
		return b.err;
	}
	*out = b.p;
	return 0;
}

char *pc_json_stable(const cJSON *v)
{
	char *s = NULL;
	return stable(v, &s) == 0 ? s : NULL;
}

/* ---- hashing ---------------------------------------------------------------------- */

static int sha256_hex(const char *s, size_t n, char hex[HASH_HEX + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (!EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return PC_ENOMEM; /* libcrypto fails only for want of memory here */
	for (unsigned i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* tool + ":" + sha256(stable(args)), args NULL read as {}. Caller frees. */
static int call_sig(const char *tool, const cJSON *args, char **out)
{
	char *text = NULL, hex[HASH_HEX + 1];
	int rc = args ? stable(args, &text) : 0;
	if (rc == 0)
		rc = sha256_hex(text ? text : "{}", text ? strlen(text) : 2, hex);
	free(text);
	if (rc)
		return rc;
	size_t n = strlen(tool) + 1 + HASH_HEX + 1;
	*out = malloc(n);
	if (!*out)
		return PC_ENOMEM;
	snprintf(*out, n, "%s:%s", tool, hex);
	return 0;
}

/* ---- the ring ---------------------------------------------------------------------- */

static rec_t *rec_at(const pc_loop_history_t *h, size_t i) /* 0 = the oldest */
{
	return &h->ring[(h->head + i) % h->cfg.history_size];
}

static void rec_clear(rec_t *r)
{
	free(r->tool);
	free(r->sig);
	free(r->call_id);
	free(r->unknown_tool);
	memset(r, 0, sizeof(*r));
}

/* The slot for a new newest entry (the caller fills it), dropping the
 * oldest when the window is full. */
static rec_t *push(pc_loop_history_t *h)
{
	if (h->count == h->cfg.history_size) {
		rec_clear(rec_at(h, 0));
		h->head = (h->head + 1) % h->cfg.history_size;
		h->count--;
	}
	return rec_at(h, h->count++);
}

int pc_loop_history_new(const pc_loop_config_t *c, pc_loop_history_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_loop_history_t *h = calloc(1, sizeof(*h));
	if (!h)
		return PC_ENOMEM;
	if (c)
		h->cfg = *c;
	else
		pc_loop_config_default(&h->cfg);
	pc_loop_config_normalize(&h->cfg);
	h->ring = calloc(h->cfg.history_size, sizeof(*h->ring));
	if (!h->ring) {
		free(h);
		return PC_ENOMEM;
	}
	*out = h;
	return 0;
}

void pc_loop_history_free(pc_loop_history_t *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->count; i++)
		rec_clear(rec_at(h, i));
	for (size_t i = 0; i < h->nkeys; i++)
		free(h->keys[i].key);
	free(h->ring);
	free(h);
}

size_t pc_loop_history_count(const pc_loop_history_t *h)
{
	return h ? h->count : 0;
}

/* ---- detectors -------------------------------------------------------------------- */

static bool is_poll_call(const char *tool, const cJSON *args)
{
	if (strcmp(tool, "command_status") == 0)
		return true;
	if (strcmp(tool, "process") != 0 || !cJSON_IsObject(args))
		return false;
	const char *action = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "action"));
	return action && (strcmp(action, "poll") == 0 || strcmp(action, "log") == 0);
}

static bool same_call(const rec_t *r, const char *tool, const char *sig)
{
	return strcmp(r->tool, tool) == 0 && strcmp(r->sig, sig) == 0;
}

typedef struct streak {
	uint32_t count;
	const char *latest; /* the latest outcome, NULL when none */
} streak_t;

/* Identical outcomes of this call, newest first, up to the first that differs. */
static streak_t no_progress_streak(const pc_loop_history_t *h, const char *tool, const char *sig)
{
	streak_t s = {0, NULL};
	for (size_t i = h->count; i-- > 0;) {
		const rec_t *r = rec_at(h, i);
		if (!r->has_result || !same_call(r, tool, sig))
			continue;
		if (!s.latest)
			s.latest = r->result;
		else if (strcmp(r->result, s.latest) != 0)
			break;
		s.count++;
	}
	return s;
}

typedef struct pingpong {
	uint32_t count;
	bool no_progress; /* every call of the tail has an outcome, stable on each side */
	const rec_t *paired; /* the newest call, which the new one alternates with */
} pingpong_t;

static bool tail_evidence(const pc_loop_history_t *h, size_t tail, const char *a)
{
	const char *hash_a = NULL, *hash_b = NULL;
	for (size_t i = h->count - tail; i < h->count; i++) {
		const rec_t *r = rec_at(h, i);
		if (!r->has_result)
			return false;
		const char **side = strcmp(r->sig, a) == 0 ? &hash_a : &hash_b;
		if (!*side)
			*side = r->result;
		else if (strcmp(*side, r->result) != 0)
			return false;
	}
	/* stable outcomes seen on both sides */
	return hash_a && hash_b;
}

static pingpong_t ping_pong(const pc_loop_history_t *h, const char *sig)
{
	pingpong_t p = {0, false, NULL};
	if (h->count == 0)
		return p;
	const rec_t *last = rec_at(h, h->count - 1);
	const char *other = NULL;
	for (size_t i = h->count - 1; i-- > 0;) {
		if (strcmp(rec_at(h, i)->sig, last->sig) != 0) {
			other = rec_at(h, i)->sig;
			break;
		}
	}
	if (!other)
		return p;
	size_t tail = 0;
	for (size_t i = h->count; i-- > 0;) {
		const char *want = tail % 2 == 0 ? last->sig : other;
		if (strcmp(rec_at(h, i)->sig, want) != 0)
			break;
		tail++;
	}
	if (tail < 2 || strcmp(sig, other) != 0)
		return p;
	p.count = (uint32_t)tail + 1; /* tail <= PC_LOOP_MAX_HISTORY */
	p.no_progress = tail_evidence(h, tail, last->sig);
	p.paired = last;
	return p;
}

static uint32_t occurrences(const pc_loop_history_t *h, const char *tool, const char *sig)
{
	uint32_t n = 0;
	for (size_t i = 0; i < h->count; i++)
		n += same_call(rec_at(h, i), tool, sig);
	return n;
}

/* The newest outcomes of this tool name that all said the same tool does
 * not exist. */
static uint32_t unknown_tool_streak(const pc_loop_history_t *h, const char *tool, const char **name)
{
	uint32_t n = 0;
	*name = NULL;
	for (size_t i = h->count; i-- > 0;) {
		const rec_t *r = rec_at(h, i);
		if (strcmp(r->tool, tool) != 0 || !r->unknown_tool)
			break;
		if (*name && strcmp(*name, r->unknown_tool) != 0)
			break;
		*name = r->unknown_tool;
		n++;
	}
	return n;
}

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
	       c == '-';
}

static bool space_char(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

static const char *skip_quote(const char *p)
{
	return *p == '"' || *p == '\'' ? p + 1 : p;
}

static size_t name_len(const char *p)
{
	size_t n = 0;
	while (name_char(p[n]))
		n++;
	return n;
}

/* "unknown tool[:\s]+['"]?NAME": where NAME starts, or NULL. */
static const char *after_prefix(const char *text, size_t *len)
{
	for (const char *p = text; *p; p++) {
		if (strncasecmp(p, "unknown tool", 12) != 0)
			continue;
		const char *q = p + 12;
		if (*q != ':' && !space_char(*q))
			continue;
		while (*q == ':' || space_char(*q))
			q++;
		q = skip_quote(q);
		if ((*len = name_len(q)) > 0)
			return q;
	}
	return NULL;
}

/* "tool\s+['"]?NAME['"]?\s+(not found|is not available)": NAME, or NULL. */
static const char *before_suffix(const char *text, size_t *len)
{
	for (const char *p = text; *p; p++) {
		if (strncasecmp(p, "tool", 4) != 0 || !space_char(p[4]))
			continue;
		const char *q = p + 4;
		while (space_char(*q))
			q++;
		q = skip_quote(q);
		size_t n = name_len(q);
		const char *r = skip_quote(q + n);
		if (n == 0 || !space_char(*r))
			continue;
		while (space_char(*r))
			r++;
		if (strncasecmp(r, "not found", 9) == 0 || strncasecmp(r, "is not available", 16) == 0) {
			*len = n;
			return q;
		}
	}
	return NULL;
}

/* The tool an error says does not exist, as OpenClaw reads its errors
 * ("Unknown tool: x", "Tool \"x\" not found", "tool x is not available";
 * case-insensitive), lowercased into *out; *out stays NULL when the text
 * says no such thing. */
static int unknown_tool_name(const char *text, char **out)
{
	size_t n = 0;
	const char *p = after_prefix(text, &n);
	if (!p)
		p = before_suffix(text, &n);
	*out = NULL;
	if (!p)
		return 0;
	char *s = malloc(n + 1);
	if (!s)
		return PC_ENOMEM;
	for (size_t i = 0; i < n; i++)
		s[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] - 'A' + 'a' : p[i]);
	s[n] = '\0';
	*out = s;
	return 0;
}

/* ---- verdicts ---------------------------------------------------------------------- */

/* A name cut to NAME_IN_MESSAGE bytes at a UTF-8 boundary. */
static void short_name(const char *name, char out[NAME_IN_MESSAGE + 1])
{
	size_t n = strlen(name);
	if (n > NAME_IN_MESSAGE) {
		n = NAME_IN_MESSAGE;
		while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
			n--;
	}
	memcpy(out, name, n);
	out[n] = '\0';
}

static void verdict(pc_loop_verdict_t *v, pc_loop_action_t action, const char *detector, uint32_t count,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void verdict(pc_loop_verdict_t *v, pc_loop_action_t action, const char *detector, uint32_t count,
		    const char *fmt, ...)
{
	v->action = action;
	v->detector = detector;
	v->count = count;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v->message, sizeof(v->message), fmt, ap);
	va_end(ap);
}

/* A warning key (as OpenClaw spells them): the parts joined. Caller frees. */
static char *join(const char *const *parts, size_t n)
{
	pc__buf_t k = {0};
	for (size_t i = 0; i < n; i++)
		pc__buf_append_str(&k, parts[i]);
	if (k.err) {
		free(k.p);
		return NULL;
	}
	return k.p;
}

static char *pair_key(const char *x, const char *y)
{
	bool in_order = strcmp(x, y) <= 0;
	const char *parts[] = {"pingpong:", in_order ? x : y, "|", in_order ? y : x};
	return join(parts, 4);
}

static char *poll_key(const char *tool, const char *sig, const char *latest)
{
	const char *parts[] = {"poll:", tool, ":", sig, ":", latest ? latest : "none"};
	return join(parts, 6);
}

static char *generic_key(const char *tool, const char *sig)
{
	const char *parts[] = {"generic:", tool, ":", sig};
	return join(parts, 4);
}

/* The detectors in order; sets *v, and *key for a warning. */
static int detect(const pc_loop_history_t *h, const char *tool, const cJSON *args, const char *sig,
		  pc_loop_verdict_t *v, char **key)
{
	const pc_loop_config_t *c = &h->cfg;
	char name[NAME_IN_MESSAGE + 1];
	short_name(tool, name);
	const char *missing = NULL;
	uint32_t unknown = unknown_tool_streak(h, tool, &missing);
	if (unknown >= PC_LOOP_UNKNOWN_TOOL_THRESHOLD) {
		char miss[NAME_IN_MESSAGE + 1];
		short_name(missing, miss);
		verdict(v, PC_LOOP_BLOCK, "unknown_tool_repeat", unknown,
			"CRITICAL: attempted unavailable tool %s %u times. Stop retrying that missing tool and "
			"answer without it.", miss, unknown);
		return 0;
	}
	streak_t np = no_progress_streak(h, tool, sig);
	bool poll = is_poll_call(tool, args);
	if (np.count >= c->global_threshold) {
		verdict(v, PC_LOOP_BLOCK, "global_circuit_breaker", np.count,
			"CRITICAL: %s has repeated identical no-progress outcomes %u times. Session execution "
			"blocked by global circuit breaker to prevent runaway loops.", name, np.count);
		return 0;
	}
	if (poll && c->known_poll_no_progress && np.count >= c->critical_threshold) {
		verdict(v, PC_LOOP_BLOCK, "known_poll_no_progress", np.count,
			"CRITICAL: Called %s with identical arguments and no progress %u times. This appears to be "
			"a stuck polling loop. Session execution blocked to prevent resource waste.", name, np.count);
		return 0;
	}
	if (poll && c->known_poll_no_progress && np.count >= c->warning_threshold) {
		verdict(v, PC_LOOP_WARN, "known_poll_no_progress", np.count,
			"WARNING: You have called %s %u times with identical arguments and no progress. Stop "
			"polling and either (1) increase wait time between checks, or (2) report the task as "
			"failed if the process is stuck.", name, np.count);
		*key = poll_key(tool, sig, np.latest);
		return *key ? 0 : PC_ENOMEM;
	}
	pingpong_t pp = c->ping_pong ? ping_pong(h, sig) : (pingpong_t){0, false, NULL};
	if (pp.count >= c->critical_threshold && pp.no_progress) {
		verdict(v, PC_LOOP_BLOCK, "ping_pong", pp.count,
			"CRITICAL: You are alternating between repeated tool-call patterns (%u consecutive calls) "
			"with no progress. This appears to be a stuck ping-pong loop. Session execution blocked "
			"to prevent resource waste.", pp.count);
		short_name(pp.paired->tool, v->paired_tool);
		return 0;
	}
	if (pp.count >= c->warning_threshold) {
		verdict(v, PC_LOOP_WARN, "ping_pong", pp.count,
			"WARNING: You are alternating between repeated tool-call patterns (%u consecutive calls). "
			"This looks like a ping-pong loop; stop retrying and report the task as failed.", pp.count);
		short_name(pp.paired->tool, v->paired_tool);
		*key = pair_key(sig, pp.paired->sig);
		return *key ? 0 : PC_ENOMEM;
	}
	uint32_t seen = poll || !c->generic_repeat ? 0 : occurrences(h, tool, sig);
	if (seen >= c->warning_threshold) {
		verdict(v, PC_LOOP_WARN, "generic_repeat", seen,
			"WARNING: You have called %s %u times with identical arguments. If this is not making "
			"progress, stop retrying and report the task as failed.", name, seen);
		*key = generic_key(tool, sig);
		return *key ? 0 : PC_ENOMEM;
	}
	return 0;
}

/* Whether a warning under `key` reached a bucket not logged yet; takes key. */
static bool bucket_passed(pc_loop_history_t *h, char *key, uint32_t count)
{
	uint32_t bucket = count / PC_LOOP_WARNING_BUCKET_SIZE;
	size_t i = 0;
	while (i < h->nkeys && strcmp(h->keys[i].key, key) != 0)
		i++;
	uint32_t last = i < h->nkeys ? h->keys[i].bucket : 0;
	if (bucket <= last) {
		free(key);
		return false;
	}
	if (i < h->nkeys) {
		h->keys[i].bucket = bucket; /* it keeps its place, as in a JS Map */
		free(key);
		return true;
	}
	h->keys[h->nkeys++] = (warn_key_t){key, bucket};
	if (h->nkeys > PC_LOOP_MAX_WARNING_KEYS) {
		free(h->keys[0].key);
		memmove(&h->keys[0], &h->keys[1], (h->nkeys - 1) * sizeof(h->keys[0]));
		h->nkeys--;
	}
	return true;
}

static int dup_opt(const char *s, char **out)
{
	*out = NULL;
	if (s && !(*out = strdup(s)))
		return PC_ENOMEM;
	return 0;
}

int pc_loop_check(pc_loop_history_t *h, const char *tool, const cJSON *args, const char *tool_call_id,
		  pc_loop_verdict_t *out)
{
	if (!h || !tool || !out)
		return PC_EINVAL;
	memset(out, 0, sizeof(*out));
	if (!h->cfg.enabled)
		return 0;
	char *sig = NULL, *key = NULL, *tool_copy = NULL, *id_copy = NULL;
	rec_t *r = NULL;
	int rc = call_sig(tool, args, &sig);
	if (rc == 0)
		rc = detect(h, tool, args, sig, out, &key);
	/* a blocked call never runs: it is not recorded */
	if (rc || out->action == PC_LOOP_BLOCK)
		goto out;
	if ((rc = dup_opt(tool, &tool_copy)) != 0 || (rc = dup_opt(tool_call_id, &id_copy)) != 0)
		goto out;
	if (out->action == PC_LOOP_WARN) {
		out->log = bucket_passed(h, key, out->count);
		key = NULL;
	}
	r = push(h);
	*r = (rec_t){.tool = tool_copy, .sig = sig, .call_id = id_copy};
	tool_copy = sig = id_copy = NULL;
out:
	if (rc)
		memset(out, 0, sizeof(*out));
	else if (out->action == PC_LOOP_BLOCK)
		out->log = true;
	free(sig);
	free(key);
	free(tool_copy);
	free(id_copy);
	return rc;
}

/* The newest call of this identity that still waits for its outcome. */
static rec_t *pending(pc_loop_history_t *h, const char *tool, const char *sig, const char *id)
{
	for (size_t i = h->count; i-- > 0;) {
		rec_t *r = rec_at(h, i);
		if (id && (!r->call_id || strcmp(r->call_id, id) != 0))
			continue;
		if (!r->has_result && same_call(r, tool, sig))
			return r;
	}
	return NULL;
}

int pc_loop_record_outcome(pc_loop_history_t *h, const char *tool, const cJSON *args, const char *tool_call_id,
			   const char *result_text, bool is_error)
{
	if (!h || !tool)
		return PC_EINVAL;
	if (!h->cfg.enabled)
		return 0;
	const char *text = result_text ? result_text : "";
	char hex[HASH_HEX + 1], *sig = NULL, *unknown = NULL, *tool_copy = NULL, *id_copy = NULL;
	rec_t *r = NULL;
	int rc = sha256_hex(text, strlen(text), hex);
	if (rc == 0)
		rc = call_sig(tool, args, &sig);
	if (rc == 0 && is_error)
		rc = unknown_tool_name(text, &unknown);
	if (rc == 0 && !(r = pending(h, tool, sig, tool_call_id)) && (rc = dup_opt(tool, &tool_copy)) == 0)
		rc = dup_opt(tool_call_id, &id_copy);
	if (rc)
		goto out;
	if (!r) { /* no call waits for it: a new entry */
		r = push(h);
		*r = (rec_t){.tool = tool_copy, .sig = sig, .call_id = id_copy};
		tool_copy = sig = id_copy = NULL;
	}
	snprintf(r->result, sizeof(r->result), "%s%s", is_error ? "error:" : "", hex);
	r->has_result = true;
	free(r->unknown_tool);
	r->unknown_tool = unknown;
	unknown = NULL;
out:
	free(sig);
	free(unknown);
	free(tool_copy);
	free(id_copy);
	return rc;
}
