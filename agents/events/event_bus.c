/*
 * The event layer: immutable reference-counted events, bounded
 * subscriptions, per-run buses and per-session hubs.
 *
 * Locks. Each bus, hub and subscription has its own mutex, always taken in
 * the order bus -> hub -> subscription, never the other way, so no cycle
 * can form. An emit pushes into every subscription while it holds its
 * bus's lock: that is what keeps one run's seq strictly increasing in every
 * reader's buffer when two threads emit on the same bus (pushing after
 * unlocking would let the later seq overtake the earlier one). A push is a
 * few pointer moves under the subscription's lock, so the bus lock is
 * never held for long; notifications to actors are sent after every lock
 * is released.
 *
 * Memory. An event is one allocation: the struct, then run id, session key
 * and data, each NUL-terminated. An emit with nobody to receive it (no
 * subscription on the bus or its hub) allocates nothing, unless it is the
 * terminal event, which the bus keeps for late subscribers.
 *
 * Streamed text. Each bus keeps its assistant and thinking text in a
 * block that only grows at its end: bytes an event can see are never
 * written again, so readers need no lock, only the block's reference the
 * event holds. A block too small is replaced by one twice the current
 * message's size holding that message (the old one lives on while events
 * point into it), so appending costs O(1) amortised and the live blocks
 * of a run hold a few times its longest message at most.
 */
#include "event_bus.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mailbox/atomics.h"
#include "runtime/clock.h"
#include "runtime/sync.h"
#include "io/io.h"

/* ---- shared text ---- */

typedef struct text_block {
	uint32_t refs;
	size_t cap;
	char p[];
} text_block_t;

static text_block_t *block_retain(text_block_t *t)
{
	if (t)
		pc_atomic_faa_u32(&t->refs, 1);
	return t;
}

static void block_release(text_block_t *t)
{
	if (t && pc_atomic_faa_u32(&t->refs, (uint32_t)-1) == 1)
		free(t);
}

/* One stream's text of a run; under its bus's lock. */
typedef struct bus_text {
	text_block_t *blk;
	size_t start, len; /* the current message is blk->p[start..len) */
	uint32_t message;
} bus_text_t;

/* Appends n bytes to the current message, moving it to a larger block
 * when it does not fit. PC_ENOMEM leaves the text as it was. */
static int text_append(bus_text_t *t, const char *p, size_t n)
{
	size_t msg = t->len - t->start;
	if (!t->blk || t->blk->cap - t->len < n) {
		if (n > SIZE_MAX / 4 - msg)
			return PC_ENOMEM;
		size_t cap = (msg + n) * 2 < 256 ? 256 : (msg + n) * 2;
		text_block_t *nb = malloc(sizeof(*nb) + cap);
		if (!nb)
			return PC_ENOMEM;
		nb->refs = 1;
		nb->cap = cap;
		if (msg)
			memcpy(nb->p, t->blk->p + t->start, msg);
		block_release(t->blk);
		t->blk = nb;
		t->start = 0;
		t->len = msg;
	}
	memcpy(t->blk->p + t->len, p, n);
	t->len += n;
	return 0;
}

static void buf_put(void *b, const char *p, size_t n)
{
	pc__buf_append(b, p, n);
}

/* Appends s[0..n) to b as a JSON string. */
static void json_str(pc__buf_t *b, const char *s, size_t n)
{
	pc_json_escape(s, n, buf_put, b);
}

/* ---- events ---- */

typedef struct event_box {
	pc_event_t ev; /* first: a pc_event_t * is an event_box_t * */
	uint32_t refs;
	text_block_t *blk; /* what ev.text points into, or NULL */
	char text[];   /* run_id NUL session_key NUL data NUL */
} event_box_t;

static const char *const stream_names[PC_EVENT_STREAM_COUNT] = {
	[PC_EVENT_LIFECYCLE] = "lifecycle",
	[PC_EVENT_ASSISTANT] = "assistant",
	[PC_EVENT_THINKING] = "thinking",
	[PC_EVENT_TOOL] = "tool",
	[PC_EVENT_COMPACTION] = "compaction",
	[PC_EVENT_LANE] = "lane",
	[PC_EVENT_ERROR] = "error",
	[PC_EVENT_DIAGNOSTIC] = "diagnostic",
};

const char *pc_event_stream_name(pc_event_stream_t s)
{
	return (unsigned)s < PC_EVENT_STREAM_COUNT ? stream_names[s] : "unknown";
}

pc_event_t *pc_event_retain(pc_event_t *e)
{
	if (e)
		pc_atomic_faa_u32(&((event_box_t *)e)->refs, 1);
	return e;
}

void pc_event_release(pc_event_t *e)
{
	if (e && pc_atomic_faa_u32(&((event_box_t *)e)->refs, (uint32_t)-1) == 1) {
		block_release(((event_box_t *)e)->blk);
		free(e);
	}
}

/* A new event with one reference (the caller's), or NULL. */
static pc_event_t *event_new(const char *run_id, size_t run_len, const char *session_key, size_t session_len,
			     pc_event_stream_t stream, const char *data, size_t len, bool droppable, bool terminal,
			     uint64_t seq)
{
	size_t fixed = sizeof(event_box_t) + run_len + 1 + session_len + 1 + 1;
	if (len > SIZE_MAX - fixed)
		return NULL;
	event_box_t *b = malloc(fixed + len);
	if (!b)
		return NULL;
	char *p = b->text;
	memcpy(p, run_id, run_len + 1);
	b->ev.run_id = p;
	p += run_len + 1;
	memcpy(p, session_key, session_len + 1);
	b->ev.session_key = p;
	p += session_len + 1;
	memcpy(p, data, len);
	p[len] = '\0';
	b->ev.data = p;
	b->ev.data_len = len;
	b->ev.seq = seq;
	b->ev.ts_ms = pc__clock_wall_ms();
	b->ev.stream = stream;
	b->ev.droppable = droppable;
	b->ev.terminal = terminal;
	b->ev.text = NULL;
	b->ev.text_len = b->ev.delta_len = 0;
	b->ev.message = 0;
	b->blk = NULL;
	b->refs = 1;
	return &b->ev;
}

/* Gives e the view of t's current message, whose last delta_len bytes
 * are e's delta. */
static void event_view(pc_event_t *e, const bus_text_t *t, size_t delta_len)
{
	event_box_t *b = (event_box_t *)e;
	b->blk = block_retain(t->blk);
	e->text = t->blk->p + t->start;
	e->text_len = t->len - t->start;
	e->delta_len = delta_len;
	e->message = t->message;
}

/* {"text":...,"delta":...} of a view whose delta starts at `from`. */
static void delta_data(pc__buf_t *b, const char *text, size_t text_len, size_t from)
{
	pc__buf_append_str(b, "{\"text\":");
	json_str(b, text, text_len);
	pc__buf_append_str(b, ",\"delta\":");
	json_str(b, text + from, text_len - from);
	pc__buf_append_char(b, '}');
}

int pc_event_delta_to_json(const pc_event_t *e, size_t from, char **out, size_t *len)
{
	if (!e || !out || !e->text || from > e->text_len)
		return PC_EINVAL;
	pc__buf_t b = {0};
	pc__buf_append_str(&b, "{\"runId\":");
	json_str(&b, e->run_id, strlen(e->run_id));
	pc__buf_printf(&b, ",\"seq\":%" PRIu64 ",\"stream\":\"%s\",\"ts\":%" PRId64 ",\"data\":", e->seq,
		       pc_event_stream_name(e->stream), e->ts_ms);
	delta_data(&b, e->text, e->text_len, from);
	if (e->session_key && *e->session_key) {
		pc__buf_append_str(&b, ",\"sessionKey\":");
		json_str(&b, e->session_key, strlen(e->session_key));
	}
	pc__buf_append_char(&b, '}');
	size_t n = b.len;
	char *text = pc__buf_take(&b);
	if (!text)
		return PC_ENOMEM;
	*out = text;
	if (len)
		*len = n;
	return 0;
}

int pc_event_to_json(const pc_event_t *e, char **out, size_t *len)
{
	if (!e || !out)
		return PC_EINVAL;
	int rc = PC_ENOMEM;
	char *text = NULL;
	char seq[24], ts[24];
	/* Numbers go in as raw text: cJSON keeps numbers as doubles and would
	 * print a large seq or timestamp in exponent form. */
	snprintf(seq, sizeof(seq), "%" PRIu64, e->seq);
	snprintf(ts, sizeof(ts), "%" PRId64, e->ts_ms);
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "runId", e->run_id ? e->run_id : "") ||
	    !cJSON_AddRawToObject(o, "seq", seq) ||
	    !cJSON_AddStringToObject(o, "stream", pc_event_stream_name(e->stream)) ||
	    !cJSON_AddRawToObject(o, "ts", ts) ||
	    /* The data is JSON already: embedded as it is, not re-parsed. */
	    !cJSON_AddRawToObject(o, "data", e->data && e->data_len ? e->data : "{}"))
		goto out;
	if (e->session_key && *e->session_key && !cJSON_AddStringToObject(o, "sessionKey", e->session_key))
		goto out;
	if (!(text = pc_json_print(o)))
		goto out;
	*out = text;
	if (len)
		*len = strlen(text);
	rc = 0;
out:
	cJSON_Delete(o);
	return rc;
}

/* ---- subscriptions ---- */

struct pc_event_sub {
	uint32_t refs;
	pthread_mutex_t lock; /* guards everything below but the config */
	pthread_cond_t cond;  /* an event arrived or the subscription closed */
	pc_event_t **ring;    /* `slots` entries, `count` used from `head` */
	size_t slots, head, count;
	size_t droppable;     /* droppable events in the ring */
	size_t waiters;       /* threads in pc_event_sub_wait */
	uint64_t dropped;
	bool closed;
	/* A notification went out and the reader has not emptied the buffer
	 * since: the next push must not send another. */
	bool notified;
	size_t capacity;
	pc_actor_t *notify;
	uint32_t notify_type;
	uint64_t tag;
};


int pc_event_sub_new(const pc_event_sub_config_t *cfg, pc_event_sub_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_event_sub_t *s = calloc(1, sizeof(*s));
	if (!s)
		return PC_ENOMEM;
	int rc = PC_ESYS;
	if (pthread_mutex_init(&s->lock, NULL) != 0)
		goto fail_mutex;
	if ((rc = pc__cond_init_monotonic(&s->cond)) != 0)
		goto fail_cond;
	s->refs = 1;
	s->capacity = cfg && cfg->capacity ? cfg->capacity : PC_EVENT_SUB_DEFAULT_CAPACITY;
	if (cfg && cfg->notify) {
		s->notify = pc_actor_retain(cfg->notify);
		s->notify_type = cfg->notify_type;
		s->tag = cfg->tag;
	}
	*out = s;
	return 0;
fail_cond:
	pthread_mutex_destroy(&s->lock);
fail_mutex:
	free(s);
	return rc;
}

pc_event_sub_t *pc_event_sub_retain(pc_event_sub_t *s)
{
	if (s)
		pc_atomic_faa_u32(&s->refs, 1);
	return s;
}

void pc_event_sub_release(pc_event_sub_t *s)
{
	if (!s || pc_atomic_faa_u32(&s->refs, (uint32_t)-1) != 1)
		return;
	for (size_t i = 0; i < s->count; i++)
		pc_event_release(s->ring[(s->head + i) % s->slots]);
	free(s->ring);
	pc_actor_release(s->notify);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static pc_event_t **ring_at(pc_event_sub_t *s, size_t i)
{
	return &s->ring[(s->head + i) % s->slots];
}

/* Under s->lock: doubles the ring (the events move to its start). The ring
 * grows lazily so a large capacity costs nothing until it is used. */
static int ring_grow(pc_event_sub_t *s)
{
	size_t n = s->slots ? s->slots * 2 : 16;
	if (n < s->slots || n > SIZE_MAX / sizeof(pc_event_t *))
		return PC_ENOMEM;
	pc_event_t **r = malloc(n * sizeof(*r));
	if (!r)
		return PC_ENOMEM;
	for (size_t i = 0; i < s->count; i++)
		r[i] = *ring_at(s, i);
	free(s->ring);
	s->ring = r;
	s->slots = n;
	s->head = 0;
	return 0;
}

/* Under s->lock: removes the i-th oldest event, counted as dropped. The
 * ones before it move up one slot: evictions are of the oldest droppable
 * event, which sits near the head. */
static void ring_drop(pc_event_sub_t *s, size_t i)
{
	pc_event_t *e = *ring_at(s, i);
	for (size_t j = i; j > 0; j--)
		*ring_at(s, j) = *ring_at(s, j - 1);
	s->head = (s->head + 1) % s->slots;
	s->count--;
	if (e->droppable)
		s->droppable--;
	s->dropped++;
	pc_event_release(e);
}

/* Under s->lock: the index of the oldest event matching `droppable`
 * (droppable events) or else the oldest non-terminal one; s->count if none. */
static size_t ring_find_victim(pc_event_sub_t *s, bool droppable)
{
	for (size_t i = 0; i < s->count; i++) {
		const pc_event_t *e = *ring_at(s, i);
		if (droppable ? e->droppable : !e->terminal)
			return i;
	}
	return s->count;
}

/*
 * Buffers one event for the reader (taking a reference), applying the
 * drop policy, and closes the subscription after it if `close_after`.
 * Returns true when the caller must notify the reader's actor: the buffer
 * went from empty (as the reader last left it) to non-empty.
 *
 * Full buffer: the oldest droppable event goes, which is the incoming one
 * when it is a delta and no older delta is buffered. A non-droppable event
 * with no delta to evict grows the buffer past its capacity: these are few
 * (lifecycle, tool, compaction), and losing one would break what a reader
 * knows of the run. Only when memory runs out is a non-droppable event
 * lost: the oldest non-terminal one, or the incoming one if every
 * buffered event is terminal.
 */
static bool sub_push(pc_event_sub_t *s, pc_event_t *e, bool close_after)
{
	bool notify = false;
	pthread_mutex_lock(&s->lock);
	if (s->closed)
		goto out;
	if (s->count >= s->capacity) {
		if (s->droppable > 0) {
			ring_drop(s, ring_find_victim(s, true));
		} else if (e->droppable) {
			s->dropped++;
			goto done;
		}
	}
	if (s->count == s->slots && ring_grow(s) != 0) {
		size_t victim = e->droppable ? s->count : ring_find_victim(s, false);
		if (s->count > 0 && victim < s->count && !e->droppable) {
			ring_drop(s, victim);
		} else {
			s->dropped++;
			goto done;
		}
	}
	*ring_at(s, s->count) = pc_event_retain(e);
	s->count++;
	if (e->droppable)
		s->droppable++;
	if (s->notify && !s->notified) {
		s->notified = true;
		notify = true;
	}
done:
	if (close_after)
		s->closed = true;
	if (s->waiters)
		pthread_cond_broadcast(&s->cond);
out:
	pthread_mutex_unlock(&s->lock);
	return notify;
}

size_t pc_event_sub_take(pc_event_sub_t *s, pc_event_t **out, size_t max)
{
	if (!s || !out || !max)
		return 0;
	pthread_mutex_lock(&s->lock);
	size_t n = s->count < max ? s->count : max;
	for (size_t i = 0; i < n; i++) {
		out[i] = *ring_at(s, i);
		if (out[i]->droppable)
			s->droppable--;
	}
	if (n) {
		s->head = (s->head + n) % s->slots;
		s->count -= n;
	}
	/* Cleared under the same lock a push sets it under: a push that comes
	 * after this take sees the buffer empty and notifies; one before it
	 * had its event taken here. */
	if (s->count == 0)
		s->notified = false;
	pthread_mutex_unlock(&s->lock);
	return n;
}

int pc_event_sub_wait(pc_event_sub_t *s, int64_t timeout_ms)
{
	if (!s)
		return PC_EINVAL;
	struct timespec deadline = pc__timespec_ns(pc__deadline_ns(timeout_ms));
	pthread_mutex_lock(&s->lock);
	s->waiters++;
	bool expired = false;
	while (s->count == 0 && !s->closed && !expired) {
		if (timeout_ms < 0)
			pthread_cond_wait(&s->cond, &s->lock);
		else
			expired = pthread_cond_timedwait(&s->cond, &s->lock, &deadline) != 0;
	}
	s->waiters--;
	int rc = s->count ? 0 : s->closed ? PC_ESTOPPED : PC_ETIMEDOUT;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void pc_event_sub_close(pc_event_sub_t *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->closed = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

bool pc_event_sub_closed(const pc_event_sub_t *s)
{
	if (!s)
		return true;
	/* The lock is state, not value: reading under it is still const use. */
	pc_event_sub_t *m = (pc_event_sub_t *)s;
	pthread_mutex_lock(&m->lock);
	bool closed = m->closed;
	pthread_mutex_unlock(&m->lock);
	return closed;
}

uint64_t pc_event_sub_dropped(const pc_event_sub_t *s)
{
	if (!s)
		return 0;
	pc_event_sub_t *m = (pc_event_sub_t *)s;
	pthread_mutex_lock(&m->lock);
	uint64_t n = m->dropped;
	pthread_mutex_unlock(&m->lock);
	return n;
}

/* ---- notifications ---- */

/* Subscriptions to notify once every lock is released, each retained (a
 * concurrent detach may drop the last other reference meanwhile). */
typedef struct notify_list {
	pc_event_sub_t *local[8];
	pc_event_sub_t **v;
	size_t n, cap;
} notify_list_t;

static void notify_init(notify_list_t *l)
{
	l->v = l->local;
	l->n = 0;
	l->cap = sizeof(l->local) / sizeof(l->local[0]);
}

static void notify_send(pc_event_sub_t *s)
{
	/* A stopped actor simply misses it: nobody is left to read. */
	(void)pc_send_u64(s->notify, s->notify_type, s->tag);
}

static void notify_add(notify_list_t *l, pc_event_sub_t *s)
{
	if (l->n == l->cap) {
		size_t cap = l->cap * 2;
		pc_event_sub_t **v = l->v == l->local ? malloc(cap * sizeof(*v)) : realloc(l->v, cap * sizeof(*v));
		if (!v) {
			/* Out of memory: send now, under the caller's locks.
			 * Slower for the others, but the reader is told. */
			notify_send(s);
			return;
		}
		if (l->v == l->local)
			memcpy(v, l->local, sizeof(l->local));
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = pc_event_sub_retain(s);
}

static void notify_flush(notify_list_t *l)
{
	for (size_t i = 0; i < l->n; i++) {
		notify_send(l->v[i]);
		pc_event_sub_release(l->v[i]);
	}
	if (l->v != l->local)
		free(l->v);
	notify_init(l);
}

/* ---- subscriber arrays ---- */

typedef struct sub_ref {
	pc_event_sub_t *s;
	bool close_on_terminal;
	/* Bit 1 << stream: it had a delta of that stream (which carried the
	 * text so far, for a subscriber that joined a running run). */
	uint8_t caught_up;
} sub_ref_t;

typedef struct sub_array {
	sub_ref_t *v;
	size_t n, cap;
} sub_array_t;

static size_t subs_find(const sub_array_t *a, const pc_event_sub_t *s)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i].s == s)
			return i;
	return a->n;
}

/* Appends `s` (retained). Idempotent: an attached subscription only has its
 * flag updated, so it never receives an event twice. */
static int subs_add(sub_array_t *a, pc_event_sub_t *s, bool close_on_terminal)
{
	size_t i = subs_find(a, s);
	if (i < a->n) {
		a->v[i].close_on_terminal = close_on_terminal;
		return 0;
	}
	if (PC__GROW(a->v, a->cap, a->n + 1, 4))
		return PC_ENOMEM;
	a->v[a->n++] = (sub_ref_t){pc_event_sub_retain(s), close_on_terminal, 0};
	return 0;
}

/* Removes `s` and returns it (the array's reference, for the caller to
 * release outside its lock), or NULL when it was not there. */
static pc_event_sub_t *subs_remove(sub_array_t *a, const pc_event_sub_t *s)
{
	size_t i = subs_find(a, s);
	if (i == a->n)
		return NULL;
	pc_event_sub_t *found = a->v[i].s;
	a->v[i] = a->v[--a->n];
	return found;
}

static void subs_clear(sub_array_t *a)
{
	for (size_t i = 0; i < a->n; i++)
		pc_event_sub_release(a->v[i].s);
	free(a->v);
	*a = (sub_array_t){0};
}

/* ---- hubs ---- */

struct pc_event_hub {
	uint32_t refs;
	pthread_mutex_t lock; /* guards subs */
	sub_array_t subs;
	char session_key[];
};

int pc_event_hub_new(const char *session_key, pc_event_hub_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!session_key)
		session_key = "";
	size_t n = strlen(session_key);
	pc_event_hub_t *h = calloc(1, sizeof(*h) + n + 1);
	if (!h)
		return PC_ENOMEM;
	if (pthread_mutex_init(&h->lock, NULL) != 0) {
		free(h);
		return PC_ESYS;
	}
	memcpy(h->session_key, session_key, n + 1);
	h->refs = 1;
	*out = h;
	return 0;
}

pc_event_hub_t *pc_event_hub_retain(pc_event_hub_t *h)
{
	if (h)
		pc_atomic_faa_u32(&h->refs, 1);
	return h;
}

void pc_event_hub_release(pc_event_hub_t *h)
{
	if (!h || pc_atomic_faa_u32(&h->refs, (uint32_t)-1) != 1)
		return;
	subs_clear(&h->subs);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

int pc_event_hub_attach(pc_event_hub_t *h, pc_event_sub_t *s)
{
	if (!h || !s)
		return PC_EINVAL;
	pthread_mutex_lock(&h->lock);
	int rc = subs_add(&h->subs, s, false);
	pthread_mutex_unlock(&h->lock);
	return rc;
}

void pc_event_hub_detach(pc_event_hub_t *h, pc_event_sub_t *s)
{
	if (!h || !s)
		return;
	pthread_mutex_lock(&h->lock);
	pc_event_sub_t *found = subs_remove(&h->subs, s);
	pthread_mutex_unlock(&h->lock);
	pc_event_sub_release(found);
}

size_t pc_event_hub_subscribers(const pc_event_hub_t *h)
{
	if (!h)
		return 0;
	pc_event_hub_t *m = (pc_event_hub_t *)h;
	pthread_mutex_lock(&m->lock);
	size_t n = m->subs.n;
	pthread_mutex_unlock(&m->lock);
	return n;
}

/* ---- buses ---- */

struct pc_event_bus {
	uint32_t refs;
	pthread_mutex_t lock; /* guards everything below; see the top comment */
	sub_array_t subs;     /* emptied once the terminal event went out */
	uint64_t seq;
	bool ended;
	pc_event_t *terminal; /* kept for late subscribers */
	bus_text_t texts[2];  /* assistant, thinking */
	pc_event_hub_t *hub;
	size_t run_len, session_len;
	const char *session_key; /* points into text */
	char text[];             /* run_id NUL session_key NUL */
};

int pc_event_bus_new(const char *run_id, const char *session_key, pc_event_hub_t *hub, pc_event_bus_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!run_id || !*run_id)
		return PC_EINVAL;
	if (!session_key)
		session_key = "";
	size_t rl = strlen(run_id), sl = strlen(session_key);
	pc_event_bus_t *b = calloc(1, sizeof(*b) + rl + 1 + sl + 1);
	if (!b)
		return PC_ENOMEM;
	if (pthread_mutex_init(&b->lock, NULL) != 0) {
		free(b);
		return PC_ESYS;
	}
	memcpy(b->text, run_id, rl + 1);
	memcpy(b->text + rl + 1, session_key, sl + 1);
	b->session_key = b->text + rl + 1;
	b->run_len = rl;
	b->session_len = sl;
	b->hub = pc_event_hub_retain(hub);
	b->refs = 1;
	*out = b;
	return 0;
}

pc_event_bus_t *pc_event_bus_retain(pc_event_bus_t *b)
{
	if (b)
		pc_atomic_faa_u32(&b->refs, 1);
	return b;
}

void pc_event_bus_release(pc_event_bus_t *b)
{
	if (!b || pc_atomic_faa_u32(&b->refs, (uint32_t)-1) != 1)
		return;
	subs_clear(&b->subs);
	pc_event_release(b->terminal);
	block_release(b->texts[0].blk);
	block_release(b->texts[1].blk);
	pc_event_hub_release(b->hub);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

int pc_event_bus_attach(pc_event_bus_t *b, pc_event_sub_t *s, bool close_on_terminal)
{
	if (!b || !s)
		return PC_EINVAL;
	int rc = 0;
	bool notify = false;
	pthread_mutex_lock(&b->lock);
	if (b->ended) {
		/* Nothing follows the terminal event: hand it over and keep no
		 * reference to the subscription. */
		notify = sub_push(s, b->terminal, close_on_terminal);
		if (notify)
			pc_event_sub_retain(s);
	} else {
		rc = subs_add(&b->subs, s, close_on_terminal);
	}
	pthread_mutex_unlock(&b->lock);
	if (notify) {
		notify_send(s);
		pc_event_sub_release(s);
	}
	return rc;
}

void pc_event_bus_detach(pc_event_bus_t *b, pc_event_sub_t *s)
{
	if (!b || !s)
		return;
	pthread_mutex_lock(&b->lock);
	pc_event_sub_t *found = subs_remove(&b->subs, s);
	pthread_mutex_unlock(&b->lock);
	pc_event_sub_release(found);
}

/* New text for a delta event: the bytes and the stream's text they join. */
typedef struct delta_in {
	const char *p;
	size_t len;
	bus_text_t *text; /* set under the bus's lock */
} delta_in_t;

/* Under the bus's lock: the event a bus subscriber gets for delta event e.
 * Its first delta of a stream carries the text so far in its data (a new
 * event, seq and view shared), later ones e itself; e when memory is short. */
static pc_event_t *event_for(pc_event_bus_t *b, sub_ref_t *r, pc_event_t *e, const delta_in_t *d)
{
	if (!d || (r->caught_up & (1u << e->stream)))
		return pc_event_retain(e);
	r->caught_up |= (uint8_t)(1u << e->stream);
	pc__buf_t data = {0};
	delta_data(&data, e->text, e->text_len, e->text_len - e->delta_len);
	pc_event_t *c = data.err ? NULL
				 : event_new(b->text, b->run_len, b->session_key, b->session_len, e->stream, data.p,
					     data.len, true, false, e->seq);
	pc__buf_free(&data);
	if (!c)
		return pc_event_retain(e);
	c->ts_ms = e->ts_ms;
	event_view(c, d->text, e->delta_len);
	return c;
}

/* pc_event_bus_emit, and for a delta (d not NULL) the append to the run's
 * text, under the same lock: the text and the seq grow in one order. */
static int bus_emit(pc_event_bus_t *b, pc_event_stream_t stream, const char *data, size_t len, bool droppable,
		    bool terminal, delta_in_t *d, uint64_t *seq)
{
	int rc = 0;
	pc_event_t *e = NULL;
	pc__buf_t dd = {0};
	sub_array_t ended_subs = {0};
	notify_list_t nl;
	notify_init(&nl);

	pthread_mutex_lock(&b->lock);
	if (b->ended) {
		rc = PC_ESTATE;
		goto unlock_bus;
	}
	if (b->hub)
		pthread_mutex_lock(&b->hub->lock);
	uint64_t n = b->seq + 1;
	bool receivers = b->subs.n > 0 || (b->hub && b->hub->subs.n > 0);
	if (d) {
		/* Kept even with nobody listening: a later reader reads it whole. */
		d->text = &b->texts[stream == PC_EVENT_THINKING];
		if ((rc = text_append(d->text, d->p, d->len)) != 0)
			goto unlock_hub;
		if (receivers) {
			/* Only the delta is escaped: cheap, so done under the lock. */
			pc__buf_append_str(&dd, "{\"delta\":");
			json_str(&dd, d->p, d->len);
			pc__buf_append_char(&dd, '}');
			data = dd.p;
			len = dd.len;
			if (dd.err) {
				rc = PC_ENOMEM; /* the text keeps the delta; only its event is lost */
				goto unlock_hub;
			}
		}
	}
	if (receivers || terminal) {
		e = event_new(b->text, b->run_len, b->session_key, b->session_len, stream, data, len, droppable,
			      terminal, n);
		if (!e) {
			/* The seq is not consumed: the next event takes it. */
			rc = PC_ENOMEM;
			goto unlock_hub;
		}
		if (d)
			event_view(e, d->text, d->len);
	}
	b->seq = n;
	if (seq)
		*seq = n;
	if (!e)
		goto unlock_hub;
	for (size_t i = 0; i < b->subs.n; i++) {
		pc_event_t *mine = event_for(b, &b->subs.v[i], e, d);
		if (sub_push(b->subs.v[i].s, mine, terminal && b->subs.v[i].close_on_terminal))
			notify_add(&nl, b->subs.v[i].s);
		pc_event_release(mine);
	}
	if (b->hub) {
		sub_array_t *hs = &b->hub->subs;
		for (size_t i = 0; i < hs->n; i++) {
			/* Attached to both: it has the event already. */
			if (subs_find(&b->subs, hs->v[i].s) < b->subs.n)
				continue;
			if (sub_push(hs->v[i].s, e, false))
				notify_add(&nl, hs->v[i].s);
		}
	}
	if (terminal) {
		b->ended = true;
		b->terminal = pc_event_retain(e);
		ended_subs = b->subs;
		b->subs = (sub_array_t){0};
	}
unlock_hub:
	if (b->hub)
		pthread_mutex_unlock(&b->hub->lock);
unlock_bus:
	pthread_mutex_unlock(&b->lock);
	notify_flush(&nl);
	subs_clear(&ended_subs);
	pc_event_release(e);
	pc__buf_free(&dd);
	return rc;
}

int pc_event_bus_emit(pc_event_bus_t *b, pc_event_stream_t stream, const char *data, size_t len,
		      bool droppable, bool terminal, uint64_t *seq)
{
	if (!b || (unsigned)stream >= PC_EVENT_STREAM_COUNT)
		return PC_EINVAL;
	if (!data) {
		data = "{}";
		len = 2;
	} else if (len == 0) {
		len = strlen(data);
	}
	/* The data is handed out as a C string: an embedded NUL would cut it. */
	if (len == 0 || memchr(data, '\0', len))
		return PC_EINVAL;
	/* The terminal event is never a delta: it must not be dropped. */
	if (terminal)
		droppable = false;
	return bus_emit(b, stream, data, len, droppable, terminal, NULL, seq);
}

int pc_event_bus_emit_delta(pc_event_bus_t *b, pc_event_stream_t stream, const char *delta, size_t len,
			    uint64_t *seq)
{
	if (!b || !delta || (stream != PC_EVENT_ASSISTANT && stream != PC_EVENT_THINKING))
		return PC_EINVAL;
	if (len == 0)
		len = strlen(delta);
	if (len == 0 || memchr(delta, '\0', len))
		return PC_EINVAL;
	delta_in_t d = {delta, len, NULL};
	return bus_emit(b, stream, "{}", 2, true, false, &d, seq);
}

void pc_event_bus_text_reset(pc_event_bus_t *b, pc_event_stream_t stream)
{
	if (!b || (stream != PC_EVENT_ASSISTANT && stream != PC_EVENT_THINKING))
		return;
	pthread_mutex_lock(&b->lock);
	bus_text_t *t = &b->texts[stream == PC_EVENT_THINKING];
	if (t->len > t->start) {
		t->start = t->len;
		t->message++;
	}
	pthread_mutex_unlock(&b->lock);
}

bool pc_event_bus_listened(const pc_event_bus_t *b)
{
	if (!b)
		return false;
	pc_event_bus_t *m = (pc_event_bus_t *)b;
	pthread_mutex_lock(&m->lock);
	bool any = m->subs.n > 0;
	if (!any && m->hub) {
		pthread_mutex_lock(&m->hub->lock);
		any = m->hub->subs.n > 0;
		pthread_mutex_unlock(&m->hub->lock);
	}
	pthread_mutex_unlock(&m->lock);
	return any;
}

uint64_t pc_event_bus_seq(const pc_event_bus_t *b)
{
	if (!b)
		return 0;
	pc_event_bus_t *m = (pc_event_bus_t *)b;
	pthread_mutex_lock(&m->lock);
	uint64_t n = m->seq;
	pthread_mutex_unlock(&m->lock);
	return n;
}

bool pc_event_bus_ended(const pc_event_bus_t *b)
{
	if (!b)
		return false;
	pc_event_bus_t *m = (pc_event_bus_t *)b;
	pthread_mutex_lock(&m->lock);
	bool ended = m->ended;
	pthread_mutex_unlock(&m->lock);
	return ended;
}

const char *pc_event_bus_run_id(const pc_event_bus_t *b)
{
	return b ? b->text : NULL;
}
