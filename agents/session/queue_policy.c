/*
 * Queue-mode decisions. The arrival rules, in order:
 *
 *   1. The session is free (no active run and nothing queued): run now.
 *      A queued backlog counts as busy, so a new message cannot overtake
 *      messages already waiting for the debounce (§13.1 #91909).
 *   2. A heartbeat while busy is dropped; so is a message id that is
 *      already queued or in the recent-id cache.
 *   3. interrupt with an active run: abort it, then run this message.
 *      With only a backlog it runs now, ahead of the backlog.
 *   4. steer / steer-backlog while the run streams: inject at the next
 *      boundary (steer-backlog also queues a followup). A run that cannot
 *      take steering (starting, compacting, ending) falls through to 5.
 *   5. Enqueue, applying the cap: "new" refuses the message, "old" and
 *      "summarize" drop the surplus first.
 */
#include "queue_policy.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/io.h"

pc_queue_priority_t pc_queue_priority_for_trigger(const char *trigger)
{
	static const char *const fg[] = {"user", "manual"};
	static const char *const bg[] = {"cron", "heartbeat", "memory", "overflow"};
	if (!trigger)
		return PC_QUEUE_NORMAL;
	for (size_t i = 0; i < sizeof(fg) / sizeof(fg[0]); i++)
		if (strcmp(trigger, fg[i]) == 0)
			return PC_QUEUE_FOREGROUND;
	for (size_t i = 0; i < sizeof(bg) / sizeof(bg[0]); i++)
		if (strcmp(trigger, bg[i]) == 0)
			return PC_QUEUE_BACKGROUND;
	return PC_QUEUE_NORMAL;
}

/* ---- settings ---- */


int pc_queue_settings_resolve(const pc_queue_layer_t *layers, size_t n, pc_queue_settings_t *out)
{
	if (!out || (!layers && n))
		return PC_EINVAL;
	pc_queue_settings_default(out);
	bool mode = false, debounce = false, cap = false, drop = false;
	for (size_t i = 0; i < n; i++) {
		const pc_queue_layer_t *l = &layers[i];
		if (!mode && l->mode && pc_queue_mode_parse(l->mode, &out->mode) == 0)
			mode = true;
		if (!debounce && l->debounce_ms >= 0) {
			out->debounce_ms = l->debounce_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)l->debounce_ms;
			debounce = true;
		}
		if (!cap && l->cap >= 1) {
			out->cap = l->cap > UINT32_MAX ? UINT32_MAX : (uint32_t)l->cap;
			cap = true;
		}
		if (!drop && l->drop && pc_queue_drop_parse(l->drop, &out->drop) == 0)
			drop = true;
	}
	return 0;
}

/* ---- arrival ---- */

/* now + ms without overflow. */
static int64_t later(int64_t now_ms, uint32_t ms)
{
	return now_ms > INT64_MAX - (int64_t)ms ? INT64_MAX : now_ms + (int64_t)ms;
}

static bool already_queued(const pc_queue_view_t *q, const char *id)
{
	if (!id)
		return false;
	for (size_t i = 0; i < q->n; i++)
		if (q->items[i].message_id && strcmp(q->items[i].message_id, id) == 0)
			return true;
	return false;
}

static int decide(pc_queue_decision_t *out, pc_queue_action_t a, const char *detail)
{
	out->action = a;
	out->detail = detail;
	return 0;
}

static int enqueue(const pc_queue_settings_t *s, const pc_queue_view_t *q, int64_t now_ms, pc_queue_decision_t *out,
		   const char *detail)
{
	if (s->cap && q->n >= s->cap) {
		if (s->drop == PC_QUEUE_DROP_NEW)
			return decide(out, PC_QUEUE_REFUSE, "queue full, policy new");
		out->drop_count = q->n - s->cap + 1;
		out->summarize = s->drop == PC_QUEUE_DROP_SUMMARIZE;
	}
	out->drain_at_ms = later(now_ms, s->debounce_ms);
	return decide(out, PC_QUEUE_ENQUEUE, detail);
}

int pc_queue_on_message(const pc_queue_settings_t *s, const pc_queue_view_t *q, pc_run_phase_t phase,
			const pc_queue_incoming_t *msg, int64_t now_ms, pc_queue_decision_t *out)
{
	if (!s || !q || !msg || !out || (q->n && !q->items) || (unsigned)msg->mode >= PC_QUEUE_MODE_COUNT)
		return PC_EINVAL;
	*out = (pc_queue_decision_t){0};
	bool active = phase != PC_RUN_IDLE;
	if (!active && q->n == 0)
		return decide(out, PC_QUEUE_RUN_NOW, "session free");
	if (msg->heartbeat)
		return decide(out, PC_QUEUE_DROP, "heartbeat while busy");
	if (msg->seen_recently || already_queued(q, msg->message_id))
		return decide(out, PC_QUEUE_DROP, "duplicate message id");
	if (msg->mode == PC_QUEUE_INTERRUPT)
		return active ? decide(out, PC_QUEUE_ABORT_THEN_RUN, "interrupt active run")
			      : decide(out, PC_QUEUE_RUN_NOW, "interrupt ahead of backlog");
	if ((msg->mode == PC_QUEUE_STEER || msg->mode == PC_QUEUE_STEER_BACKLOG) && phase == PC_RUN_STREAMING) {
		out->also_enqueue = msg->mode == PC_QUEUE_STEER_BACKLOG;
		if (out->also_enqueue) {
			enqueue(s, q, now_ms, out, "steer with backlog");
			/* A full "new"-policy queue refuses the backlog copy only. */
			out->also_enqueue = out->action == PC_QUEUE_ENQUEUE;
		}
		return decide(out, PC_QUEUE_INJECT, "steer into streaming run");
	}
	return enqueue(s, q, now_ms, out,
		       msg->mode == PC_QUEUE_STEER || msg->mode == PC_QUEUE_STEER_BACKLOG
			       ? "run cannot take steering; followup"
			       : "followup");
}

/* ---- choosing ---- */

size_t pc_queue_victims(const pc_queue_view_t *q, size_t count, size_t *idx)
{
	size_t w = 0;
	if (!q || !idx || (q->n && !q->items))
		return 0;
	bool first = true;
	int done = 0; /* levels up to this one are taken */
	while (w < count && w < q->n) {
		/* The lowest priority level not taken yet. */
		bool found = false;
		int level = 0;
		for (size_t i = 0; i < q->n; i++) {
			int p = q->items[i].priority;
			if ((first || p > done) && (!found || p < level)) {
				level = p;
				found = true;
			}
		}
		if (!found)
			break;
		for (size_t i = 0; i < q->n && w < count; i++)
			if (q->items[i].priority == level)
				idx[w++] = i;
		done = level;
		first = false;
	}
	/* Report in queue order, so the caller can remove back to front. */
	for (size_t a = 1; a < w; a++)
		for (size_t b = a; b > 0 && idx[b - 1] > idx[b]; b--) {
			size_t t = idx[b];
			idx[b] = idx[b - 1];
			idx[b - 1] = t;
		}
	return w;
}

int pc_queue_pick(const pc_queue_view_t *q, size_t *idx)
{
	if (!q || !idx || q->n == 0 || !q->items)
		return q && idx ? PC_ENOTFOUND : PC_EINVAL;
	size_t best = 0;
	for (size_t i = 1; i < q->n; i++)
		if (q->items[i].priority > q->items[best].priority)
			best = i;
	*idx = best;
	return 0;
}

static bool cross_route(const pc_queue_view_t *q)
{
	const char *first = NULL;
	for (size_t i = 0; i < q->n; i++) {
		const char *r = q->items[i].route;
		if (!r)
			continue;
		if (!first)
			first = r;
		else if (strcmp(first, r) != 0)
			return true;
	}
	return false;
}

int pc_queue_next(const pc_queue_settings_t *s, const pc_queue_view_t *q, int64_t now_ms, pc_queue_next_t *out)
{
	if (!s || !q || !out || (q->n && !q->items))
		return PC_EINVAL;
	*out = (pc_queue_next_t){.kind = PC_QUEUE_NEXT_IDLE, .individual = q->individual};
	if (q->n == 0 && q->dropped == 0)
		return 0;
	int64_t quiet = later(q->last_enqueue_ms, s->debounce_ms);
	if (now_ms < quiet) {
		out->kind = PC_QUEUE_NEXT_WAIT;
		out->wait_until_ms = quiet;
		return 0;
	}
	if (s->mode == PC_QUEUE_COLLECT && q->n > 0) {
		if (!q->individual && !cross_route(q)) {
			out->kind = PC_QUEUE_NEXT_RUN_BATCH;
			return 0;
		}
		out->individual = true;
		out->kind = PC_QUEUE_NEXT_RUN_ITEM;
		return pc_queue_pick(q, &out->index);
	}
	if (q->dropped > 0) {
		out->kind = PC_QUEUE_NEXT_RUN_OVERFLOW;
		return 0;
	}
	out->kind = PC_QUEUE_NEXT_RUN_ITEM;
	return pc_queue_pick(q, &out->index);
}

/* ---- prompts ---- */

/* Hands the built text over (an empty one when nothing was added), or
 * the first error. */
static int sb_done(pc__buf_t *b, char **out)
{
	if (pc__buf_append(b, "", 0) != 0) {
		int rc = b->err;
		pc__buf_free(b);
		return rc;
	}
	*out = b->p;
	return 0;
}

int pc_queue_summary_line(const char *prompt, char **out)
{
	if (!prompt || !out)
		return PC_EINVAL;
	pc__buf_t b = {0};
	size_t chars = 0, cut = 0;
	bool space = false;
	for (const char *s = prompt; *s; s++) {
		if (isspace((unsigned char)*s)) {
			space = b.len > 0;
			continue;
		}
		if (space) {
			if (++chars == PC_QUEUE_SUMMARY_LINE_MAX)
				cut = b.len;
			pc__buf_append(&b, " ", 1);
			space = false;
		}
		/* A UTF-8 continuation byte belongs to the character before it. */
		if (((unsigned char)*s & 0xC0) != 0x80 && ++chars == PC_QUEUE_SUMMARY_LINE_MAX)
			cut = b.len;
		pc__buf_append(&b, s, 1);
	}
	if (!b.err && chars > PC_QUEUE_SUMMARY_LINE_MAX) {
		/* Keep MAX - 1 characters, trailing spaces trimmed, then "…". */
		b.len = cut;
		while (b.len > 0 && b.p[b.len - 1] == ' ')
			b.len--;
		b.p[b.len] = '\0';
		pc__buf_append_str(&b, "\u2026");
	}
	return sb_done(&b, out);
}

int pc_queue_overflow_prompt(uint32_t dropped, const char *const *lines, size_t n_lines, uint32_t cap,
			     char **out)
{
	if (!out || (n_lines && !lines))
		return PC_EINVAL;
	*out = NULL;
	if (dropped == 0)
		return 0;
	char title[96];
	snprintf(title, sizeof(title), "[Queue overflow] Dropped %u message%s due to cap.", dropped,
		 dropped == 1 ? "" : "s");
	pc__buf_t b = {0};
	pc__buf_append_str(&b, title);
	size_t from = cap && n_lines > cap ? n_lines - cap : 0;
	if (n_lines > from)
		pc__buf_append_str(&b, "\nSummary:");
	for (size_t i = from; i < n_lines; i++) {
		pc__buf_append_str(&b, "\n- ");
		pc__buf_append_str(&b, lines[i] ? lines[i] : "");
	}
	return sb_done(&b, out);
}

int pc_queue_collect_prompt(const pc_queue_item_t *items, size_t n, const char *overflow_summary, char **out)
{
	if (!out || (n && !items))
		return PC_EINVAL;
	pc__buf_t b = {0};
	pc__buf_append_str(&b, PC_QUEUE_COLLECT_TITLE);
	if (overflow_summary && *overflow_summary) {
		pc__buf_append_str(&b, "\n\n");
		pc__buf_append_str(&b, overflow_summary);
	}
	for (size_t i = 0; i < n; i++) {
		char head[48];
		snprintf(head, sizeof(head), "\n\n---\nQueued #%zu\n", i + 1);
		pc__buf_append_str(&b, head);
		pc__buf_append_str(&b, items[i].prompt ? items[i].prompt : "");
	}
	return sb_done(&b, out);
}
