/*
 * The store's read answers as messages and their readers (store.h):
 * history snapshots, session and run listings, open runs, usage records,
 * paired devices and cluster nodes, each packed by the backend into one
 * message with its strings, and read back by the caller without copying.
 */
#include "store_internal.h"
#include "io/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* ---- read payloads (history, session listings) ---- */

/* Appends n strings (NULL = absent) to the byte area; their offsets go to
 * off[]. */
static int strs_put(pc__store_strs_t *a, const char *const *str, const size_t *len, int n, uint32_t *off)
{
	size_t need = 0;
	for (int k = 0; k < n; k++)
		need += str[k] ? len[k] + 1 : 0;
	if (need > PC_MSG_MAX_PAYLOAD - a->len)
		return PC_STORE_ETOOBIG;
	if (PC__GROW(a->bytes, a->cap, a->len + need, 4096))
		return PC_ENOMEM;
	for (int k = 0; k < n; k++) {
		if (!str[k]) {
			off[k] = PC__STR_NULL;
			continue;
		}
		off[k] = (uint32_t)a->len;
		memcpy(a->bytes + a->len, str[k], len[k]);
		a->bytes[a->len + len[k]] = 0;
		a->len += len[k] + 1;
	}
	return 0;
}

/* A reply of `type`: `head` (hsize bytes), the entries, the strings; NULL
 * when it would not fit a message or on ENOMEM. */
static pc_msg_t *payload_msg(uint32_t type, const void *head, size_t hsize, const void *ents, size_t esize,
			     const pc__store_strs_t *strs)
{
	size_t size = hsize + esize + strs->len;
	pc_msg_t *m = size <= PC_MSG_MAX_PAYLOAD ? pc_msg_new(type, size) : NULL;
	if (m) {
		char *p = pc_msg_data(m);
		memcpy(p, head, hsize);
		if (esize)
			memcpy(p + hsize, ents, esize);
		if (strs->len)
			memcpy(p + hsize + esize, strs->bytes, strs->len);
	}
	return m;
}

/* Appends entry `e` (`size` bytes, its `n` string offsets `off_at` bytes
 * in) with its strings. PC_ENOMEM. */
static int rows_add(pc__store_rows_t *r, const void *e, size_t size, size_t off_at, const char *const *str,
		    const size_t *len, int n)
{
	if (pc__grow(&r->ents, &r->cap, r->n + 1, size, 64))
		return PC_ENOMEM;
	char *d = (char *)r->ents + r->n * size;
	memcpy(d, e, size);
	uint32_t off[PC__STORE_ROW_STRS_MAX];
	int rc = strs_put(&r->strs, str, len, n, off);
	if (rc != 0)
		return rc;
	memcpy(d + off_at, off, (size_t)n * sizeof(off[0]));
	r->n++;
	return 0;
}

static void rows_clear(pc__store_rows_t *r)
{
	free(r->ents);
	free(r->strs.bytes);
	*r = (pc__store_rows_t){0};
}

/* The reply of `type`: `head`, then the entries and their strings. The
 * rows are freed either way. NULL on ENOMEM. */
static pc_msg_t *rows_finish(pc__store_rows_t *r, uint32_t type, const void *head, size_t hsize, size_t size)
{
	pc_msg_t *m = payload_msg(type, head, hsize, r->ents, r->n * size, &r->strs);
	rows_clear(r);
	return m;
}

int pc__store_hist_session(pc__store_hist_builder_t *b, const char *str[3], const size_t len[3], int64_t created_ms,
			   int64_t updated_ms)
{
	b->head.created_ms = created_ms;
	b->head.updated_ms = updated_ms;
	return strs_put(&b->rows.strs, str, len, 3, b->head.sess_off);
}

int pc__store_hist_add(pc__store_hist_builder_t *b, int64_t seq, int64_t created_ms,
		       const char *str[PC__STORE_HIST_STRS], const size_t len[PC__STORE_HIST_STRS])
{
	pc__store_hist_ent_t e = {.seq = seq, .created_ms = created_ms};
	return rows_add(&b->rows, &e, sizeof(e), offsetof(pc__store_hist_ent_t, off), str, len,
			PC__STORE_HIST_STRS);
}

pc_msg_t *pc__store_hist_finish(pc__store_hist_builder_t *b, int64_t last_seq)
{
	pc__store_hist_t h = b->head;
	h.rc = 0;
	h.count = (uint32_t)b->rows.n;
	h.last_seq = last_seq;
	pc_msg_t *m = rows_finish(&b->rows, PC_STORE_MSG_HISTORY, &h, sizeof(h), sizeof(pc__store_hist_ent_t));
	pc__store_hist_clear(b);
	return m;
}

void pc__store_hist_clear(pc__store_hist_builder_t *b)
{
	rows_clear(&b->rows);
	*b = (pc__store_hist_builder_t){0};
}

int pc__store_list_add(pc__store_list_builder_t *b, const pc__store_list_ent_t *e,
		       const char *str[PC__STORE_LIST_STRS], const size_t len[PC__STORE_LIST_STRS])
{
	return rows_add(&b->rows, e, sizeof(*e), offsetof(pc__store_list_ent_t, off), str, len, PC__STORE_LIST_STRS);
}

pc_msg_t *pc__store_list_finish(pc__store_list_builder_t *b, bool more)
{
	pc__store_list_t h = {.count = (uint32_t)b->rows.n, .more = more};
	return rows_finish(&b->rows, PC_STORE_MSG_SESSIONS, &h, sizeof(h), sizeof(pc__store_list_ent_t));
}

void pc__store_list_clear(pc__store_list_builder_t *b)
{
	rows_clear(&b->rows);
}

pc_msg_t *pc__store_list_error(uint32_t type, int rc)
{
	pc__store_list_t h = {.rc = rc};
	pc__store_strs_t none = {0};
	return payload_msg(type, &h, sizeof(h), NULL, 0, &none);
}

pc_msg_t *pc__store_hist_error(int rc)
{
	pc__store_hist_t h = {.rc = rc};
	pc__store_strs_t none = {0};
	return payload_msg(PC_STORE_MSG_HISTORY, &h, sizeof(h), NULL, 0, &none);
}

/* The n strings at offsets `off` of `bytes` (NULL where absent). */
static void strs_get(const char *bytes, const uint32_t *off, int n, const char **out)
{
	for (int k = 0; k < n; k++)
		out[k] = off[k] == PC__STR_NULL ? NULL : bytes + off[k];
}

struct pc_store_history {
	size_t n;
	int64_t last_seq;
	pc__store_hist_t head;
	const pc__store_hist_ent_t *ents;
	const char *bytes;
	pc_msg_t *msg; /* the payload the pointers point into */
};

/* Wraps history reply `m` (owned; taken on success) as a snapshot. */
int pc__store_history_adopt(pc_msg_t *m, pc_store_history_t **out)
{
	*out = NULL;
	if (!m || m->type != PC_STORE_MSG_HISTORY || m->size < sizeof(pc__store_hist_t))
		return PC_EINVAL;
	pc__store_hist_t h;
	memcpy(&h, pc_msg_cdata(m), sizeof(h));
	if (h.rc != 0)
		return h.rc;
	if (h.count > (m->size - sizeof(h)) / sizeof(pc__store_hist_ent_t))
		return PC_EINVAL;
	pc_store_history_t *hs = calloc(1, sizeof(*hs));
	if (!hs)
		return PC_ENOMEM;
	const char *p = pc_msg_cdata(m);
	hs->msg = m;
	hs->n = h.count;
	hs->last_seq = h.last_seq;
	hs->head = h;
	hs->ents = (const pc__store_hist_ent_t *)(const void *)(p + sizeof(h));
	hs->bytes = p + sizeof(h) + h.count * sizeof(pc__store_hist_ent_t);
	*out = hs;
	return 0;
}

int pc_store_history_take(const pc_msg_t *m, pc_store_history_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!m)
		return PC_EINVAL;
	pc_msg_t *copy = pc_msg_new(m->type, m->size);
	if (!copy)
		return PC_ENOMEM;
	memcpy(pc_msg_data(copy), pc_msg_cdata(m), m->size);
	int rc = pc__store_history_adopt(copy, out);
	if (rc != 0)
		pc_msg_free(copy);
	return rc;
}

size_t pc_store_history_count(const pc_store_history_t *h)
{
	return h ? h->n : 0;
}

int64_t pc_store_history_last_seq(const pc_store_history_t *h)
{
	return h ? h->last_seq : 0;
}

void pc_store_history_session(const pc_store_history_t *h, pc_store_session_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!h)
		return;
	const char *f[3];
	strs_get(h->bytes, h->head.sess_off, 3, f);
	*out = (pc_store_session_t){f[0], f[1], f[2], h->head.created_ms, h->head.updated_ms};
}

void pc_store_history_get(const pc_store_history_t *h, size_t i, pc_store_msg_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!h || i >= h->n)
		return;
	const pc__store_hist_ent_t *e = &h->ents[i];
	const char *f[PC__STORE_HIST_STRS];
	strs_get(h->bytes, e->off, PC__STORE_HIST_STRS, f);
	/* stored JSON was checked on its way in */
	*out = (pc_store_msg_t){.seq = e->seq, .created_ms = e->created_ms, .role = f[0], .content = f[1],
				.tool_call_ids = f[2], .run_id = f[3], .idem_key = f[4], .json_checked = true};
}

void pc_store_history_free(pc_store_history_t *h)
{
	if (!h)
		return;
	pc_msg_free(h->msg);
	free(h);
}

/* A listing reply taken by the caller: its header, entries and strings
 * point into msg. The public listings are this, typed. */
typedef struct listing {
	pc__store_list_t head;
	const void *ents;
	const char *bytes;
	pc_msg_t *msg; /* the payload the pointers point into */
} listing_t;

struct pc_store_sessions {
	listing_t l;
};

struct pc_store_open_runs {
	listing_t l;
};

struct pc_store_devices {
	listing_t l;
};

struct pc_store_nodes {
	listing_t l;
};

/* A copy of listing reply `m` of `type` (entries of ent_size bytes) as a
 * new listing (*out, the caller's: listing_free). Returns the reply's code
 * when the read failed. */
static int listing_take(const pc_msg_t *m, uint32_t type, size_t ent_size, listing_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!m || m->type != type || m->size < sizeof(pc__store_list_t))
		return PC_EINVAL;
	pc__store_list_t head;
	memcpy(&head, pc_msg_cdata(m), sizeof(head));
	if (head.rc != 0)
		return head.rc;
	if (head.count > (m->size - sizeof(head)) / ent_size)
		return PC_EINVAL;
	listing_t *l = calloc(1, sizeof(*l));
	pc_msg_t *copy = l ? pc_msg_new(m->type, m->size) : NULL;
	if (!copy) {
		free(l);
		return PC_ENOMEM;
	}
	memcpy(pc_msg_data(copy), pc_msg_cdata(m), m->size);
	const char *p = pc_msg_cdata(copy);
	*l = (listing_t){head, p + sizeof(head), p + sizeof(head) + head.count * ent_size, copy};
	*out = l;
	return 0;
}

static void listing_free(listing_t *l)
{
	if (!l)
		return;
	pc_msg_free(l->msg);
	free(l);
}

int pc_store_sessions_take(const pc_msg_t *m, pc_store_sessions_t **out)
{
	return listing_take(m, PC_STORE_MSG_SESSIONS, sizeof(pc__store_list_ent_t), (listing_t **)out);
}

size_t pc_store_sessions_count(const pc_store_sessions_t *s)
{
	return s ? s->l.head.count : 0;
}

bool pc_store_sessions_more(const pc_store_sessions_t *s)
{
	return s && s->l.head.more;
}

void pc_store_sessions_get(const pc_store_sessions_t *s, size_t i, pc_store_session_entry_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!s || i >= s->l.head.count)
		return;
	const pc__store_list_ent_t *e = (const pc__store_list_ent_t *)s->l.ents + i;
	const char *f[PC__STORE_LIST_STRS];
	strs_get(s->l.bytes, e->off, PC__STORE_LIST_STRS, f);
	*out = (pc_store_session_entry_t){f[0], f[1], f[2], e->created_ms, e->updated_ms, e->last_seq, e->runs, f[3],
					  f[4]};
}

void pc_store_sessions_free(pc_store_sessions_t *s)
{
	listing_free((listing_t *)s);
}

/* ---- open runs ---- */

int pc__store_runs_add(pc__store_runs_builder_t *b, const pc__store_run_ent_t *e, const char *str[4],
		       const size_t len[4])
{
	return rows_add(&b->rows, e, sizeof(*e), offsetof(pc__store_run_ent_t, off), str, len, 4);
}

pc_msg_t *pc__store_runs_finish(pc__store_runs_builder_t *b)
{
	pc__store_list_t h = {.count = (uint32_t)b->rows.n};
	return rows_finish(&b->rows, PC_STORE_MSG_RUNS, &h, sizeof(h), sizeof(pc__store_run_ent_t));
}

void pc__store_runs_clear(pc__store_runs_builder_t *b)
{
	rows_clear(&b->rows);
}

int pc_store_open_runs_take(const pc_msg_t *m, pc_store_open_runs_t **out)
{
	return listing_take(m, PC_STORE_MSG_RUNS, sizeof(pc__store_run_ent_t), (listing_t **)out);
}

size_t pc_store_open_runs_count(const pc_store_open_runs_t *r)
{
	return r ? r->l.head.count : 0;
}

void pc_store_open_runs_get(const pc_store_open_runs_t *r, size_t i, pc_store_open_run_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!r || i >= r->l.head.count)
		return;
	const pc__store_run_ent_t *e = (const pc__store_run_ent_t *)r->l.ents + i;
	const char *f[4];
	strs_get(r->l.bytes, e->off, 4, f);
	*out = (pc_store_open_run_t){f[0], f[1], f[2], f[3], e->accepted_ms, e->started != 0};
}

void pc_store_open_runs_free(pc_store_open_runs_t *r)
{
	listing_free((listing_t *)r);
}

/* ---- paired devices ---- */

int pc__store_devices_add(pc__store_devices_builder_t *b, const pc__store_device_ent_t *e, const char *str[4],
			  const size_t len[4])
{
	return rows_add(&b->rows, e, sizeof(*e), offsetof(pc__store_device_ent_t, off), str, len, 4);
}

pc_msg_t *pc__store_devices_finish(pc__store_devices_builder_t *b)
{
	pc__store_list_t h = {.count = (uint32_t)b->rows.n};
	return rows_finish(&b->rows, PC_STORE_MSG_DEVICES, &h, sizeof(h), sizeof(pc__store_device_ent_t));
}

void pc__store_devices_clear(pc__store_devices_builder_t *b)
{
	rows_clear(&b->rows);
}

int pc_store_devices_take(const pc_msg_t *m, pc_store_devices_t **out)
{
	return listing_take(m, PC_STORE_MSG_DEVICES, sizeof(pc__store_device_ent_t), (listing_t **)out);
}

size_t pc_store_devices_count(const pc_store_devices_t *l)
{
	return l ? l->l.head.count : 0;
}

void pc_store_devices_get(const pc_store_devices_t *l, size_t i, pc_store_device_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!l || i >= l->l.head.count)
		return;
	const pc__store_device_ent_t *e = (const pc__store_device_ent_t *)l->l.ents + i;
	const char *f[4];
	strs_get(l->l.bytes, e->off, 4, f);
	*out = (pc_store_device_t){f[0], f[1], f[2], f[3], e->approved_ms, e->issued_ms, false};
}

void pc_store_devices_free(pc_store_devices_t *l)
{
	listing_free((listing_t *)l);
}

/* ---- cluster nodes ---- */

int pc__store_nodes_add(pc__store_nodes_builder_t *b, const pc__store_node_ent_t *e, const char *str[3],
			const size_t len[3])
{
	return rows_add(&b->rows, e, sizeof(*e), offsetof(pc__store_node_ent_t, off), str, len, 3);
}

pc_msg_t *pc__store_nodes_finish(pc__store_nodes_builder_t *b)
{
	pc__store_list_t h = {.count = (uint32_t)b->rows.n};
	return rows_finish(&b->rows, PC_STORE_MSG_NODES, &h, sizeof(h), sizeof(pc__store_node_ent_t));
}

void pc__store_nodes_clear(pc__store_nodes_builder_t *b)
{
	rows_clear(&b->rows);
}

int pc_store_nodes_take(const pc_msg_t *m, pc_store_nodes_t **out)
{
	return listing_take(m, PC_STORE_MSG_NODES, sizeof(pc__store_node_ent_t), (listing_t **)out);
}

size_t pc_store_nodes_count(const pc_store_nodes_t *l)
{
	return l ? l->l.head.count : 0;
}

void pc_store_nodes_get(const pc_store_nodes_t *l, size_t i, pc_store_node_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!l || i >= l->l.head.count)
		return;
	const pc__store_node_ent_t *e = (const pc__store_node_ent_t *)l->l.ents + i;
	const char *f[3];
	strs_get(l->l.bytes, e->off, 3, f);
	*out = (pc_store_node_t){f[0], f[1], f[2], e->started_ms, e->heartbeat_ms, e->expires_ms, e->live != 0};
}

void pc_store_nodes_free(pc_store_nodes_t *l)
{
	listing_free((listing_t *)l);
}

/* ---- usage records ---- */

int pc__store_usage_add(pc__store_usage_builder_t *b, const pc__store_usage_ent_t *e, const char *str[4],
		       const size_t len[4])
{
	return rows_add(&b->rows, e, sizeof(*e), offsetof(pc__store_usage_ent_t, off), str, len, 4);
}

pc_msg_t *pc__store_usage_finish(pc__store_usage_builder_t *b, bool more)
{
	pc__store_usage_head_t h = b->head;
	h.rc = 0;
	h.count = (uint32_t)b->rows.n;
	h.more = more;
	pc_msg_t *m = rows_finish(&b->rows, PC_STORE_MSG_USAGE, &h, sizeof(h), sizeof(pc__store_usage_ent_t));
	pc__store_usage_clear(b);
	return m;
}

void pc__store_usage_clear(pc__store_usage_builder_t *b)
{
	rows_clear(&b->rows);
	*b = (pc__store_usage_builder_t){0};
}

pc_msg_t *pc__store_usage_error(int rc)
{
	pc__store_usage_head_t h = {.rc = rc};
	pc__store_strs_t none = {0};
	return payload_msg(PC_STORE_MSG_USAGE, &h, sizeof(h), NULL, 0, &none);
}

struct pc_store_usage_list {
	pc__store_usage_head_t head;
	const pc__store_usage_ent_t *ents;
	const char *bytes;
	pc_msg_t *msg; /* the payload the pointers point into */
};

int pc_store_usage_list_take(const pc_msg_t *m, pc_store_usage_list_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!m || m->type != PC_STORE_MSG_USAGE || m->size < sizeof(int32_t))
		return PC_EINVAL;
	int32_t rc;
	memcpy(&rc, pc_msg_cdata(m), sizeof(rc));
	if (rc != 0)
		return rc;
	pc__store_usage_head_t head;
	if (m->size < sizeof(head))
		return PC_EINVAL;
	memcpy(&head, pc_msg_cdata(m), sizeof(head));
	if (head.count > (m->size - sizeof(head)) / sizeof(pc__store_usage_ent_t))
		return PC_EINVAL;
	pc_store_usage_list_t *l = calloc(1, sizeof(*l));
	pc_msg_t *copy = l ? pc_msg_new(m->type, m->size) : NULL;
	if (!copy) {
		free(l);
		return PC_ENOMEM;
	}
	memcpy(pc_msg_data(copy), pc_msg_cdata(m), m->size);
	const char *p = pc_msg_cdata(copy);
	l->head = head;
	l->ents = (const pc__store_usage_ent_t *)(const void *)(p + sizeof(head));
	l->bytes = p + sizeof(head) + head.count * sizeof(pc__store_usage_ent_t);
	l->msg = copy;
	*out = l;
	return 0;
}

size_t pc_store_usage_list_count(const pc_store_usage_list_t *l)
{
	return l ? l->head.count : 0;
}

void pc_store_usage_list_get(const pc_store_usage_list_t *l, size_t i, pc_store_usage_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!l || i >= l->head.count)
		return;
	const pc__store_usage_ent_t *e = &l->ents[i];
	const char *f[4];
	strs_get(l->bytes, e->off, 4, f);
	*out = (pc_store_usage_t){.run_id = f[0], .session_key = f[1], .attempt = (uint32_t)e->n[0],
				  .call = (uint32_t)e->n[1], .provider = f[2], .model = f[3], .input = e->n[2],
				  .output = e->n[3], .cache_read = e->n[4], .cache_write = e->n[5], .total = e->n[6],
				  .created_ms = e->created_ms};
}

void pc_store_usage_day_get(const pc_store_usage_list_t *l, size_t i, pc_store_usage_day_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!l || i >= l->head.count)
		return;
	const pc__store_usage_ent_t *e = &l->ents[i];
	*out = (pc_store_usage_day_t){.day_ms = e->created_ms, .records = (uint64_t)e->n[0], .input = e->n[2],
				      .output = e->n[3], .cache_read = e->n[4], .cache_write = e->n[5],
				      .total = e->n[6]};
}

void pc_store_usage_list_totals(const pc_store_usage_list_t *l, pc_store_usage_t *out, uint64_t *records)
{
	memset(out, 0, sizeof(*out));
	if (records)
		*records = l ? (uint64_t)l->head.records : 0;
	if (!l)
		return;
	const int64_t *s = l->head.sum;
	*out = (pc_store_usage_t){.input = s[0], .output = s[1], .cache_read = s[2], .cache_write = s[3],
				  .total = s[4], .created_ms = l->head.latest_ms};
}

void pc_store_usage_list_free(pc_store_usage_list_t *l)
{
	if (!l)
		return;
	pc_msg_free(l->msg);
	free(l);
}

int pc_store_reply_get(const pc_msg_t *m, pc_store_reply_t *out)
{
	if (!m || !out || m->type != PC_STORE_MSG_REPLY || m->size < PC__STORE_REPLY_HEAD + 2)
		return PC_EINVAL;
	const char *p = pc_msg_cdata(m), *end = p + m->size;
	const char *id = p + PC__STORE_REPLY_HEAD;
	size_t il = strnlen(id, (size_t)(end - id));
	const char *code = id + il + 1;
	if (code >= end)
		return PC_EINVAL;
	size_t cl = strnlen(code, (size_t)(end - code));
	if (code + cl >= end || il > PC_STORE_ID_MAX || cl > PC_STORE_CODE_MAX)
		return PC_EINVAL;
	memset(out, 0, sizeof(*out));
	memcpy(out, p, PC__STORE_REPLY_HEAD);
	memcpy(out->id, id, il);
	memcpy(out->code, code, cl);
	return 0;
}

const char *const pc__store_run_status_names[PC__STORE_RUN_STATUS_N] = {
	"accepted", "running", "ok", "error", "aborted", "timeout",
};

int pc__store_status_from_name(const char *s)
{
	for (int k = 0; k < PC__STORE_RUN_STATUS_N; k++)
		if (s && strcmp(s, pc__store_run_status_names[k]) == 0)
			return k;
	return PC_STORE_RUN_ERROR;
}
