/*
 * libFuzzer target for tool-call loop detection (agents/tools/loop_detect.c).
 * See fuzz/README.md.
 *
 * Input layout: bytes 0-4 are the config (flags, a repeat count, history
 * size, warning, critical and global thresholds), then operations of two
 * bytes or more, each run the repeat count times: check a call, record an
 * outcome, or both, with a tool name, arguments, an outcome text and a
 * call id from small alphabets (or arguments parsed from the input). A model of the history, written from the header alone,
 * predicts every verdict (action, detector, count, log, paired tool) and
 * the window size; the target traps when the library disagrees, when a
 * verdict breaks a promise (message wording, NUL termination), or when
 * pc_json_stable of any arguments is not canonical JSON of the same value.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agents/tools/loop_detect.h"
#include "runtime/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			__builtin_trap();                                                          \
	} while (0)

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_RUNS 4096u

/* ---- alphabets ------------------------------------------------------------------------- */

/* 99 bytes, then a 3-byte code point across byte 100, where messages cut names. */
#define LONG_NAME                                                                                  \
	"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn" \
	"\xe4\xb8\xad\xc3\xa9tail"

static const char *const tools[8] = {"read", "exec", "process", "command_status", "ghost", "Grep", "", LONG_NAME};

/* The last slot stands for arguments parsed from the input. */
static const char *const args_texts[7] = {
	NULL,
	"{}",
	"{\"a\":1,\"b\":[1,2]}",
	"{\"b\":[1,2.0],\"a\":1.0}",
	"{\"action\":\"poll\",\"id\":\"p1\"}",
	"{\"action\":\"log\"}",
	"{\"action\":\"poll\",\"action\":\"kill\"}",
};

/* Outcome texts, and the tool each says does not exist (lowercased), as
 * an error; NULL when it says no such thing. */
static const struct {
	const char *text;
	const char *missing;
} results[16] = {
	{NULL, NULL},
	{"", NULL},
	{"ok", NULL},
	{"ok 2", NULL},
	{"Unknown tool: ghost", "ghost"},
	{"Tool \"Ghost\" not found", "ghost"},
	{"tool ghost is not available", "ghost"},
	{"unknown tool:'grep'", "grep"},
	{"Tool grep not found. Available: read", "grep"},
	{"unknown tool", NULL},
	{"file not found", NULL},
	{"Unknown tool: GHOST.", "ghost."},
	{"The tool ghost is not available right now", "ghost"},
	{"TOOL   'ghost'   NOT FOUND", "ghost"},
	{"ok\nUnknown tool:\tghost", "ghost"},
	{"error", NULL},
};

static const char *const ids[4] = {NULL, "c1", "c2", "c3"};

/* ---- pc_json_stable ------------------------------------------------------------------------ */

static unsigned depth_of(const cJSON *v)
{
	unsigned d = 0;
	for (const cJSON *c = v ? v->child : NULL; c; c = c->next) {
		unsigned k = depth_of(c);
		d = k > d ? k : d;
	}
	return d + 1;
}

static int kind(const cJSON *v)
{
	return v ? v->type & 0xFF : cJSON_NULL;
}

static int key_cmp(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
	return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

/* A stable sort of an object's members by key (insertion sort: small). */
static const cJSON **sorted_members(const cJSON *o, size_t *n)
{
	*n = 0;
	for (const cJSON *m = o->child; m; m = m->next)
		(*n)++;
	const cJSON **v = calloc(*n ? *n : 1, sizeof(*v));
	CHECK(v);
	size_t k = 0;
	for (const cJSON *m = o->child; m; m = m->next) {
		size_t i = k++;
		while (i > 0 && key_cmp(&v[i - 1], &m) > 0) {
			v[i] = v[i - 1];
			i--;
		}
		v[i] = m;
	}
	return v;
}

/* `back` (parsed from the stable text) is `orig` with sorted keys and
 * non-finite numbers as null. */
static void check_same(const cJSON *orig, const cJSON *back)
{
	int k = kind(orig);
	if (k == cJSON_Number && !isfinite(orig->valuedouble)) {
		CHECK(kind(back) == cJSON_NULL);
		return;
	}
	if (k == cJSON_Invalid)
		k = cJSON_NULL;
	CHECK(kind(back) == k);
	if (k == cJSON_Number) {
		CHECK(back->valuedouble == orig->valuedouble);
		CHECK(back->valuedouble != 0 || !signbit(back->valuedouble)); /* -0 as 0 */
	} else if (k == cJSON_String) {
		CHECK(strcmp(back->valuestring, orig->valuestring ? orig->valuestring : "") == 0);
	} else if (k == cJSON_Array) {
		const cJSON *a = orig->child, *b = back->child;
		for (; a && b; a = a->next, b = b->next)
			check_same(a, b);
		CHECK(!a && !b);
	} else if (k == cJSON_Object) {
		size_t n = 0;
		const cJSON **m = sorted_members(orig, &n);
		const cJSON *b = back->child;
		for (size_t i = 0; i < n; i++, b = b->next) {
			CHECK(b && strcmp(b->string, m[i]->string ? m[i]->string : "") == 0);
			check_same(m[i], b);
		}
		CHECK(!b);
		free(m);
	}
}

/* No white space outside strings. */
static void check_compact(const char *s)
{
	bool in_str = false;
	for (const char *p = s; *p; p++) {
		if (in_str) {
			if (*p == '\\')
				p++;
			else if (*p == '"')
				in_str = false;
		} else {
			CHECK(*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t');
			in_str = *p == '"';
		}
	}
}

static bool has_duplicate_keys(const cJSON *v)
{
	for (const cJSON *c = v->child; c; c = c->next) {
		if (has_duplicate_keys(c))
			return true;
		for (const cJSON *d = c->next; d && cJSON_IsObject(v); d = d->next)
			if (strcmp(c->string ? c->string : "", d->string ? d->string : "") == 0)
				return true;
	}
	return false;
}

/* Every object's members in the opposite order. */
static void reverse_members(cJSON *v)
{
	for (cJSON *c = v->child; c; c = c->next)
		reverse_members(c);
	if (!cJSON_IsObject(v))
		return;
	cJSON *list = NULL;
	while (v->child) {
		cJSON *c = cJSON_DetachItemViaPointer(v, v->child);
		c->next = list;
		list = c;
	}
	while (list) {
		cJSON *c = list;
		list = c->next;
		c->next = NULL;
		CHECK(cJSON_AddItemToArray(v, c));
	}
}

/* pc_json_stable(v): NULL exactly when v nests too deep; otherwise
 * compact JSON of the same value, keys sorted, that re-stabilises to
 * itself and does not depend on member order. Returns the text, or NULL when too deep (the caller frees). */
static char *checked_stable(const cJSON *v)
{
	char *s = pc_json_stable(v);
	if (depth_of(v) > PC_LOOP_MAX_JSON_DEPTH) {
		CHECK(s == NULL);
		return NULL;
	}
	CHECK(s != NULL);
	check_compact(s);
	cJSON *back = cJSON_ParseWithOpts(s, NULL, true);
	CHECK(back != NULL);
	check_same(v, back);
	char *again = pc_json_stable(back);
	CHECK(again && strcmp(again, s) == 0);
	free(again);
	cJSON_Delete(back);
	if (!has_duplicate_keys(v)) {
		/* member order does not matter (duplicates keep theirs) */
		cJSON *rev = cJSON_Duplicate(v, true);
		CHECK(rev);
		reverse_members(rev);
		char *r = pc_json_stable(rev);
		CHECK(r && strcmp(r, s) == 0);
		free(r);
		cJSON_Delete(rev);
	}
	return s;
}

/* ---- the model ---------------------------------------------------------------------------- */

typedef struct entry {
	const char *tool;
	char *args; /* the stable text; NULL arguments count as {} */
	const char *id;
	bool has_result, is_error;
	const char *text;
	const char *missing; /* the tool an error said does not exist */
} entry_t;

typedef struct wkey {
	char *key;
	uint32_t bucket;
} wkey_t;

typedef struct model {
	pc_loop_config_t cfg; /* normalized */
	entry_t *e;           /* oldest first */
	size_t n;
	wkey_t keys[PC_LOOP_MAX_WARNING_KEYS + 1];
	size_t nkeys;
} model_t;

typedef struct call {
	const char *tool;
	const cJSON *args;
	const char *stable; /* NULL: too deep */
	const char *id;
} call_t;

static bool same_call(const entry_t *e, const call_t *c)
{
	return strcmp(e->tool, c->tool) == 0 && strcmp(e->args, c->stable) == 0;
}

static bool same_entry_call(const entry_t *a, const entry_t *b)
{
	return strcmp(a->tool, b->tool) == 0 && strcmp(a->args, b->args) == 0;
}

static bool same_outcome(const entry_t *a, const entry_t *b)
{
	return a->is_error == b->is_error && strcmp(a->text, b->text) == 0;
}

static bool is_poll(const call_t *c)
{
	if (strcmp(c->tool, "command_status") == 0)
		return true;
	if (strcmp(c->tool, "process") != 0 || !cJSON_IsObject(c->args))
		return false;
	const char *a = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c->args, "action"));
	return a && (strcmp(a, "poll") == 0 || strcmp(a, "log") == 0);
}

static char *cat(const char *const *parts, size_t n)
{
	size_t len = 1;
	for (size_t i = 0; i < n; i++)
		len += strlen(parts[i]);
	char *s = malloc(len);
	CHECK(s);
	s[0] = '\0';
	for (size_t i = 0; i < n; i++)
		strcat(s, parts[i]);
	return s;
}

/* Appends, dropping the oldest when the window is full. */
static entry_t *model_push(model_t *m)
{
	if (m->n == m->cfg.history_size) {
		free(m->e[0].args);
		memmove(&m->e[0], &m->e[1], (m->n - 1) * sizeof(m->e[0]));
		m->n--;
	}
	entry_t *e = &m->e[m->n++];
	memset(e, 0, sizeof(*e));
	return e;
}

/* Whether a warning under key reaches a bucket not logged yet; takes key. */
static bool model_bucket(model_t *m, char *key, uint32_t count)
{
	uint32_t bucket = count / PC_LOOP_WARNING_BUCKET_SIZE;
	size_t i = 0;
	while (i < m->nkeys && strcmp(m->keys[i].key, key) != 0)
		i++;
	uint32_t last = i < m->nkeys ? m->keys[i].bucket : 0;
	bool passed = bucket > last;
	if (passed && i < m->nkeys) {
		m->keys[i].bucket = bucket;
	} else if (passed) {
		m->keys[m->nkeys++] = (wkey_t){key, bucket};
		key = NULL;
		if (m->nkeys > PC_LOOP_MAX_WARNING_KEYS) {
			free(m->keys[0].key);
			memmove(&m->keys[0], &m->keys[1], (m->nkeys - 1) * sizeof(m->keys[0]));
			m->nkeys--;
		}
	}
	free(key);
	return passed;
}

typedef struct expect {
	pc_loop_action_t action;
	const char *detector;
	uint32_t count;
	const entry_t *paired; /* ping_pong */
	char *key;             /* a warning's */
} expect_t;

static void expect_set(expect_t *x, pc_loop_action_t a, const char *d, uint32_t count)
{
	x->action = a;
	x->detector = d;
	x->count = count;
}

static uint32_t unknown_streak(const model_t *m, const char *tool)
{
	uint32_t n = 0;
	const char *name = NULL;
	for (size_t i = m->n; i-- > 0;) {
		const entry_t *e = &m->e[i];
		if (strcmp(e->tool, tool) != 0 || !e->missing || (name && strcmp(name, e->missing) != 0))
			break;
		name = e->missing;
		n++;
	}
	return n;
}

/* Identical outcomes of this call, newest first; *latest the newest. */
static uint32_t progress_streak(const model_t *m, const call_t *c, const entry_t **latest)
{
	uint32_t n = 0;
	*latest = NULL;
	for (size_t i = m->n; i-- > 0;) {
		const entry_t *e = &m->e[i];
		if (!e->has_result || !same_call(e, c))
			continue;
		if (*latest && !same_outcome(e, *latest))
			break;
		if (!*latest)
			*latest = e;
		n++;
	}
	return n;
}

/* The ping-pong count for call c (0: none), with its evidence. */
static uint32_t ping_pong(const model_t *m, const call_t *c, bool *evidence)
{
	*evidence = false;
	if (m->n == 0)
		return 0;
	const entry_t *a = &m->e[m->n - 1], *b = NULL;
	for (size_t i = m->n - 1; i-- > 0 && !b;)
		if (!same_entry_call(&m->e[i], a))
			b = &m->e[i];
	if (!b || !same_call(b, c))
		return 0;
	size_t tail = 0;
	while (tail < m->n && same_entry_call(&m->e[m->n - 1 - tail], tail % 2 ? b : a))
		tail++;
	if (tail < 2)
		return 0;
	const entry_t *ra = NULL, *rb = NULL;
	bool ok = true;
	for (size_t i = m->n - tail; i < m->n && ok; i++) {
		const entry_t *e = &m->e[i];
		const entry_t **side = same_entry_call(e, a) ? &ra : &rb;
		ok = e->has_result && (!*side || same_outcome(*side, e));
		if (ok && !*side)
			*side = e;
	}
	*evidence = ok && ra && rb;
	return (uint32_t)tail + 1;
}

static uint32_t occurrences(const model_t *m, const call_t *c)
{
	uint32_t n = 0;
	for (size_t i = 0; i < m->n; i++)
		n += same_call(&m->e[i], c);
	return n;
}

static char *call_key(const char *tool, const char *args)
{
	const char *parts[] = {tool, "\x1f", args};
	return cat(parts, COUNT(parts));
}

/* The detectors in the header's order. */
static void model_detect(const model_t *m, const call_t *c, expect_t *x)
{
	const pc_loop_config_t *cfg = &m->cfg;
	memset(x, 0, sizeof(*x));
	uint32_t unknown = unknown_streak(m, c->tool);
	if (unknown >= PC_LOOP_UNKNOWN_TOOL_THRESHOLD) {
		expect_set(x, PC_LOOP_BLOCK, "unknown_tool_repeat", unknown);
		return;
	}
	const entry_t *latest = NULL;
	uint32_t np = progress_streak(m, c, &latest);
	bool poll = is_poll(c);
	if (np >= cfg->global_threshold) {
		expect_set(x, PC_LOOP_BLOCK, "global_circuit_breaker", np);
		return;
	}
	if (poll && cfg->known_poll_no_progress && np >= cfg->critical_threshold) {
		expect_set(x, PC_LOOP_BLOCK, "known_poll_no_progress", np);
		return;
	}
	if (poll && cfg->known_poll_no_progress && np >= cfg->warning_threshold) {
		expect_set(x, PC_LOOP_WARN, "known_poll_no_progress", np);
		const char *parts[] = {"poll\x1f", c->tool, "\x1f", c->stable, "\x1f", latest->is_error ? "E" : "S",
				       latest->text};
		x->key = cat(parts, COUNT(parts));
		return;
	}
	bool evidence = false;
	uint32_t pp = cfg->ping_pong ? ping_pong(m, c, &evidence) : 0;
	if (pp && pp >= cfg->critical_threshold && evidence) {
		expect_set(x, PC_LOOP_BLOCK, "ping_pong", pp);
		x->paired = &m->e[m->n - 1];
		return;
	}
	if (pp && pp >= cfg->warning_threshold) {
		expect_set(x, PC_LOOP_WARN, "ping_pong", pp);
		x->paired = &m->e[m->n - 1];
		char *ka = call_key(c->tool, c->stable), *kb = call_key(x->paired->tool, x->paired->args);
		bool order = strcmp(ka, kb) <= 0;
		const char *parts[] = {"pair\x1f", order ? ka : kb, "\x1e", order ? kb : ka};
		x->key = cat(parts, COUNT(parts));
		free(ka);
		free(kb);
		return;
	}
	uint32_t seen = poll || !cfg->generic_repeat ? 0 : occurrences(m, c);
	if (seen >= cfg->warning_threshold) {
		expect_set(x, PC_LOOP_WARN, "generic_repeat", seen);
		const char *parts[] = {"generic\x1f", c->tool, "\x1f", c->stable};
		x->key = cat(parts, COUNT(parts));
	}
}

/* ---- checks against the library ------------------------------------------------------------ */

static bool utf8_valid(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	while (*s) {
		size_t k = *s < 0x80 ? 0 : (*s & 0xE0) == 0xC0 ? 1 : (*s & 0xF0) == 0xE0 ? 2 : (*s & 0xF8) == 0xF0 ? 3 : 9;
		if (k == 9)
			return false;
		for (size_t j = 1; j <= k; j++)
			if ((s[j] & 0xC0) != 0x80)
				return false;
		s += k + 1;
	}
	return true;
}

static void check_verdict_shape(const pc_loop_verdict_t *v)
{
	CHECK(memchr(v->message, 0, sizeof(v->message)) != NULL);
	CHECK(memchr(v->paired_tool, 0, sizeof(v->paired_tool)) != NULL);
	switch (v->action) {
	case PC_LOOP_NONE:
		CHECK(v->detector == NULL && v->count == 0 && !v->log);
		CHECK(v->message[0] == '\0' && v->paired_tool[0] == '\0');
		return;
	case PC_LOOP_WARN: CHECK(strncmp(v->message, "WARNING: ", 9) == 0); break;
	case PC_LOOP_BLOCK: CHECK(strncmp(v->message, "CRITICAL: ", 10) == 0 && v->log); break;
	default: CHECK(0);
	}
	CHECK(v->detector);
	char num[16];
	snprintf(num, sizeof(num), "%u", v->count);
	CHECK(strstr(v->message, num) != NULL);
	CHECK(utf8_valid(v->message)); /* every name of the alphabets is valid UTF-8 */
	if (strcmp(v->detector, "ping_pong") != 0)
		CHECK(v->paired_tool[0] == '\0');
}

/* Checks the call against the model; returns the action. */
static pc_loop_action_t check(model_t *m, pc_loop_history_t *h, const call_t *c)
{
	pc_loop_verdict_t v;
	memset(&v, 0x5A, sizeof(v));
	int rc = pc_loop_check(h, c->tool, c->args, c->id, &v);
	if (!m->cfg.enabled || !c->stable) {
		CHECK(rc == (m->cfg.enabled ? PC_EINVAL : 0));
		CHECK(v.action == PC_LOOP_NONE);
		check_verdict_shape(&v);
		return PC_LOOP_NONE;
	}
	CHECK(rc == 0);
	check_verdict_shape(&v);
	expect_t x;
	model_detect(m, c, &x);
	CHECK(v.action == x.action && v.count == x.count);
	CHECK(x.detector ? strcmp(v.detector, x.detector) == 0 : v.detector == NULL);
	if (x.paired) {
		/* the tool, or for a long name a non-empty cut of it */
		size_t n = strlen(v.paired_tool), full = strlen(x.paired->tool);
		CHECK(strncmp(v.paired_tool, x.paired->tool, n) == 0 && utf8_valid(v.paired_tool));
		CHECK(n == full || (full > 100 && n > 0));
	}
	if (x.action == PC_LOOP_WARN)
		CHECK(v.log == model_bucket(m, x.key, x.count));
	else
		free(x.key);
	if (x.action != PC_LOOP_BLOCK) {
		entry_t *e = model_push(m);
		e->tool = c->tool;
		e->args = strdup(c->stable);
		CHECK(e->args);
		e->id = c->id;
	}
	return x.action;
}

static void record(model_t *m, pc_loop_history_t *h, const call_t *c, size_t result, bool is_error)
{
	int rc = pc_loop_record_outcome(h, c->tool, c->args, c->id, results[result].text, is_error);
	if (!m->cfg.enabled || !c->stable) {
		CHECK(rc == (m->cfg.enabled ? PC_EINVAL : 0));
		return;
	}
	CHECK(rc == 0);
	entry_t *e = NULL;
	for (size_t i = m->n; i-- > 0 && !e;) {
		entry_t *p = &m->e[i];
		if (!p->has_result && same_call(p, c) && (!c->id || (p->id && strcmp(p->id, c->id) == 0)))
			e = p;
	}
	if (!e) {
		e = model_push(m);
		e->tool = c->tool;
		e->args = strdup(c->stable);
		CHECK(e->args);
		e->id = c->id;
	}
	e->has_result = true;
	e->is_error = is_error;
	e->text = results[result].text ? results[result].text : "";
	e->missing = is_error ? results[result].missing : NULL;
}

/* ---- the target ------------------------------------------------------------------------------- */

/* The header's normalization, on the fuzzed config. */
static void normalized(const pc_loop_config_t *in, pc_loop_config_t *out)
{
	*out = *in;
	if (!out->history_size)
		out->history_size = PC_LOOP_HISTORY_SIZE;
	if (out->history_size > PC_LOOP_MAX_HISTORY)
		out->history_size = PC_LOOP_MAX_HISTORY;
	if (!out->warning_threshold)
		out->warning_threshold = PC_LOOP_WARNING_THRESHOLD;
	if (!out->critical_threshold)
		out->critical_threshold = PC_LOOP_CRITICAL_THRESHOLD;
	if (!out->global_threshold)
		out->global_threshold = PC_LOOP_GLOBAL_THRESHOLD;
	if (out->critical_threshold < out->warning_threshold + 1)
		out->critical_threshold = out->warning_threshold + 1;
	if (out->global_threshold < out->critical_threshold + 1)
		out->global_threshold = out->critical_threshold + 1;
}

static void config_of(const uint8_t *b, pc_loop_config_t *c)
{
	*c = (pc_loop_config_t){
		.enabled = !(b[0] & 1),
		.generic_repeat = !(b[0] & 2),
		.known_poll_no_progress = !(b[0] & 4),
		.ping_pong = !(b[0] & 8),
		.history_size = b[1] == 255 ? 5000u : b[1] % 48u,
		.warning_threshold = b[2] % 16u,
		.critical_threshold = b[3] % 24u,
		.global_threshold = b[4] % 40u,
	};
}

/* The fixed arguments, parsed and stabilised once. */
static cJSON *fixed_args[COUNT(args_texts)];
static char *fixed_stable[COUNT(args_texts)];

static void init_fixed(void)
{
	static bool done;
	if (done)
		return;
	for (size_t i = 0; i < COUNT(args_texts); i++) {
		fixed_args[i] = args_texts[i] ? cJSON_Parse(args_texts[i]) : NULL;
		CHECK(!args_texts[i] || fixed_args[i]);
		fixed_stable[i] = args_texts[i] ? checked_stable(fixed_args[i]) : strdup("{}");
		CHECK(fixed_stable[i]);
	}
	CHECK(strcmp(fixed_stable[2], fixed_stable[3]) == 0); /* key order and 2.0 do not matter */
	CHECK(strcmp(fixed_stable[0], fixed_stable[1]) == 0); /* NULL reads as {} */
	done = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 5)
		return 0;
	init_fixed();
	pc_loop_config_t cfg;
	config_of(data, &cfg);
	model_t m = {0};
	normalized(&cfg, &m.cfg);
	pc_loop_config_t lib = cfg;
	pc_loop_config_normalize(&lib);
	CHECK(lib.enabled == m.cfg.enabled && lib.history_size == m.cfg.history_size &&
	      lib.warning_threshold == m.cfg.warning_threshold && lib.critical_threshold == m.cfg.critical_threshold &&
	      lib.global_threshold == m.cfg.global_threshold && lib.generic_repeat == m.cfg.generic_repeat &&
	      lib.known_poll_no_progress == m.cfg.known_poll_no_progress && lib.ping_pong == m.cfg.ping_pong);
	m.e = calloc(m.cfg.history_size, sizeof(*m.e));
	CHECK(m.e);
	pc_loop_history_t *h = NULL;
	CHECK(pc_loop_history_new(&cfg, &h) == 0 && h);

	/* each operation runs 1, 2, 5 or 11 times: long patterns from short
	 * inputs; at most MAX_RUNS in all, as each scans a window of up to 1024 */
	static const unsigned repeat[4] = {1, 2, 5, 11};
	unsigned reps = repeat[(data[0] >> 4) & 3];
	size_t at = 5, runs = 0;
	while (at + 2 <= size && runs < MAX_RUNS) {
		uint8_t op = data[at], p = data[at + 1];
		at += 2;
		call_t c = {.tool = tools[(op >> 2) & 7], .id = ids[(p >> 4) & 3]};
		cJSON *parsed = NULL;
		char *stable = NULL;
		size_t a = op >> 5;
		if (a < COUNT(args_texts)) {
			c.args = fixed_args[a];
			c.stable = fixed_stable[a];
		} else {
			/* a length byte (255: the rest), then that much JSON text (not JSON: NULL args) */
			size_t len = at < size ? data[at++] : 0;
			len = len < size - at && len != 255 ? len : size - at;
			char *text = malloc(len + 1);
			CHECK(text);
			memcpy(text, data + at, len);
			text[len] = '\0';
			at += len;
			parsed = cJSON_Parse(text);
			free(text);
			c.args = parsed;
			stable = parsed ? checked_stable(parsed) : strdup("{}");
			CHECK(stable || parsed);
			c.stable = stable;
		}
		size_t result = p & 15;
		for (unsigned k = 0; k < reps && runs++ < MAX_RUNS; k++) {
			switch (op & 3) {
			case 0: check(&m, h, &c); break;
			case 1: record(&m, h, &c, result, false); break;
			case 2: record(&m, h, &c, result, true); break;
			default:
				/* the agent loop's order: check, run unless blocked, record */
				if (check(&m, h, &c) != PC_LOOP_BLOCK)
					record(&m, h, &c, result, p & 64);
			}
			CHECK(pc_loop_history_count(h) == m.n);
			CHECK(m.n <= m.cfg.history_size);
		}
		cJSON_Delete(parsed);
		free(stable);
	}
	pc_loop_history_free(h);
	for (size_t i = 0; i < m.n; i++)
		free(m.e[i].args);
	for (size_t i = 0; i < m.nkeys; i++)
		free(m.keys[i].key);
	free(m.e);
	return 0;
}
