/*
 * The session's pure policies (agents/session/): queue modes, caps,
 * debounce and what runs next (§6.3, priorities §1.1), and stalled-session
 * diagnostics (§9.2). Table-driven; a small simulator at the end drives
 * the queue policy through a busy run the way the session actor will.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/session/diagnostics.h"
#include "agents/session/queue_policy.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ================= names, settings ================= */

Test(queue_policy, mode_parse_table)
{
	static const struct {
		const char *s;
		int rc;
		pc_queue_mode_t mode;
	} rows[] = {
		{"steer", 0, PC_QUEUE_STEER},
		{"Steering", 0, PC_QUEUE_STEER},
		{" queue ", 0, PC_QUEUE_STEER},
		{"queued", 0, PC_QUEUE_STEER},
		{"followup", 0, PC_QUEUE_FOLLOWUP},
		{"follow-ups", 0, PC_QUEUE_FOLLOWUP},
		{"FOLLOWUPS", 0, PC_QUEUE_FOLLOWUP},
		{"collect", 0, PC_QUEUE_COLLECT},
		{"coalesce", 0, PC_QUEUE_COLLECT},
		{"interrupt", 0, PC_QUEUE_INTERRUPT},
		{"interrupts", 0, PC_QUEUE_INTERRUPT},
		{"abort", 0, PC_QUEUE_INTERRUPT},
		{"steer-backlog", 0, PC_QUEUE_STEER_BACKLOG},
		{"steer+backlog", 0, PC_QUEUE_STEER_BACKLOG},
		{"steer_backlog", 0, PC_QUEUE_STEER_BACKLOG},
		{"steerx", PC_ENOTFOUND, 0},
		{"", PC_ENOTFOUND, 0},
		{"follow up", PC_ENOTFOUND, 0},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_queue_mode_t m = (pc_queue_mode_t)99;
		cr_assert_eq(pc_queue_mode_parse(rows[i].s, &m), rows[i].rc, "\"%s\"", rows[i].s);
		if (rows[i].rc == 0)
			cr_assert_eq(m, rows[i].mode, "\"%s\"", rows[i].s);
	}
	pc_queue_mode_t m;
	cr_assert_eq(pc_queue_mode_parse(NULL, &m), PC_EINVAL);
	static const char *const names[] = {"steer", "followup", "collect", "interrupt", "steer-backlog"};
	for (int i = 0; i < PC_QUEUE_MODE_COUNT; i++) {
		cr_assert_str_eq(pc_queue_mode_name((pc_queue_mode_t)i), names[i]);
		cr_assert_eq(pc_queue_mode_parse(names[i], &m), 0);
		cr_assert_eq(m, (pc_queue_mode_t)i);
	}
	cr_assert_str_eq(pc_queue_mode_name(PC_QUEUE_MODE_COUNT), "unknown");
}

Test(queue_policy, drop_parse_table)
{
	static const struct {
		const char *s;
		int rc;
		pc_queue_drop_t d;
	} rows[] = {
		{"old", 0, PC_QUEUE_DROP_OLD},      {"oldest", 0, PC_QUEUE_DROP_OLD},
		{"new", 0, PC_QUEUE_DROP_NEW},      {"Newest", 0, PC_QUEUE_DROP_NEW},
		{"summarize", 0, PC_QUEUE_DROP_SUMMARIZE}, {"summarise", PC_ENOTFOUND, 0},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_queue_drop_t d = (pc_queue_drop_t)99;
		cr_assert_eq(pc_queue_drop_parse(rows[i].s, &d), rows[i].rc, "\"%s\"", rows[i].s);
		if (rows[i].rc == 0)
			cr_assert_eq(d, rows[i].d);
	}
	cr_assert_str_eq(pc_queue_drop_name(PC_QUEUE_DROP_SUMMARIZE), "summarize");
	cr_assert_str_eq(pc_queue_drop_name(PC_QUEUE_DROP_COUNT), "unknown");
}

Test(queue_policy, priority_for_trigger_table)
{
	static const struct {
		const char *trigger;
		pc_queue_priority_t want;
	} rows[] = {
		{"user", PC_QUEUE_FOREGROUND},      {"manual", PC_QUEUE_FOREGROUND},
		{"cron", PC_QUEUE_BACKGROUND},      {"heartbeat", PC_QUEUE_BACKGROUND},
		{"memory", PC_QUEUE_BACKGROUND},    {"overflow", PC_QUEUE_BACKGROUND},
		{"webhook", PC_QUEUE_NORMAL},       {NULL, PC_QUEUE_NORMAL},
	};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_queue_priority_for_trigger(rows[i].trigger), rows[i].want, "row %zu", i);
}

Test(queue_policy, settings_resolve)
{
	pc_queue_settings_t s;
	cr_assert_eq(pc_queue_settings_resolve(NULL, 0, &s), 0);
	cr_assert_eq(s.mode, PC_QUEUE_STEER);
	cr_assert_eq(s.debounce_ms, 500);
	cr_assert_eq(s.cap, 20);
	cr_assert_eq(s.drop, PC_QUEUE_DROP_SUMMARIZE);

	/* inline override, per channel, plugin default, global config */
	const pc_queue_layer_t layers[] = {
		{.mode = "bogus", .debounce_ms = -1, .cap = 0, .drop = NULL},
		{.mode = "collect", .debounce_ms = -1, .cap = -5, .drop = "nope"},
		{.mode = "followup", .debounce_ms = 0, .cap = 3, .drop = NULL},
		{.mode = NULL, .debounce_ms = 2000, .cap = 7, .drop = "new"},
	};
	cr_assert_eq(pc_queue_settings_resolve(layers, N_OF(layers), &s), 0);
	cr_assert_eq(s.mode, PC_QUEUE_COLLECT, "first valid mode wins; unknown names skipped");
	cr_assert_eq(s.debounce_ms, 0, "0 is a valid debounce");
	cr_assert_eq(s.cap, 3, "cap < 1 is ignored");
	cr_assert_eq(s.drop, PC_QUEUE_DROP_NEW);
	cr_assert_eq(pc_queue_settings_resolve(NULL, 1, &s), PC_EINVAL);
	cr_assert_eq(pc_queue_settings_resolve(layers, 1, NULL), PC_EINVAL);
}

/* ================= arrival ================= */

static const pc_queue_item_t three[] = {
	{"m1", "first", "chan:a", PC_QUEUE_NORMAL, 100},
	{"m2", "second", "chan:a", PC_QUEUE_NORMAL, 200},
	{"m3", "third", "chan:a", PC_QUEUE_NORMAL, 300},
};

Test(queue_policy, on_message_table)
{
	static const struct {
		const char *name;
		uint32_t cap;
		pc_queue_drop_t drop;
		size_t queued; /* the first `queued` of `three` */
		pc_run_phase_t phase;
		pc_queue_mode_t mode;
		bool heartbeat;
		const char *id;
		bool seen;
		pc_queue_action_t want;
		size_t drop_count;
		bool summarize, also_enqueue;
	} rows[] = {
		{"free session runs now", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_IDLE, PC_QUEUE_FOLLOWUP, false, "x",
		 false, PC_QUEUE_RUN_NOW, 0, false, false},
		{"free session, heartbeat runs", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_IDLE, PC_QUEUE_STEER, true, NULL,
		 false, PC_QUEUE_RUN_NOW, 0, false, false},
		{"backlog is busy: no overtaking", 20, PC_QUEUE_DROP_SUMMARIZE, 1, PC_RUN_IDLE, PC_QUEUE_FOLLOWUP, false,
		 "x", false, PC_QUEUE_ENQUEUE, 0, false, false},
		{"heartbeat while busy dropped", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_STREAMING, PC_QUEUE_STEER, true,
		 NULL, false, PC_QUEUE_DROP, 0, false, false},
		{"duplicate queued id dropped", 20, PC_QUEUE_DROP_SUMMARIZE, 2, PC_RUN_STREAMING, PC_QUEUE_FOLLOWUP,
		 false, "m2", false, PC_QUEUE_DROP, 0, false, false},
		{"recently seen id dropped", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_STREAMING, PC_QUEUE_STEER, false,
		 "old", true, PC_QUEUE_DROP, 0, false, false},
		{"steer into streaming run", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_STREAMING, PC_QUEUE_STEER, false,
		 "x", false, PC_QUEUE_INJECT, 0, false, false},
		{"steer while compacting waits", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_COMPACTING, PC_QUEUE_STEER,
		 false, "x", false, PC_QUEUE_ENQUEUE, 0, false, false},
		{"steer while starting waits", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_STARTING, PC_QUEUE_STEER, false,
		 "x", false, PC_QUEUE_ENQUEUE, 0, false, false},
		{"steer while ending waits", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_ENDING, PC_QUEUE_STEER, false, "x",
		 false, PC_QUEUE_ENQUEUE, 0, false, false},
		{"steer-backlog injects and queues", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_STREAMING,
		 PC_QUEUE_STEER_BACKLOG, false, "x", false, PC_QUEUE_INJECT, 0, false, true},
		{"steer-backlog, full new-policy queue", 2, PC_QUEUE_DROP_NEW, 2, PC_RUN_STREAMING,
		 PC_QUEUE_STEER_BACKLOG, false, "x", false, PC_QUEUE_INJECT, 0, false, false},
		{"followup while streaming", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_STREAMING, PC_QUEUE_FOLLOWUP, false,
		 "x", false, PC_QUEUE_ENQUEUE, 0, false, false},
		{"collect while streaming", 20, PC_QUEUE_DROP_SUMMARIZE, 3, PC_RUN_STREAMING, PC_QUEUE_COLLECT, false,
		 "x", false, PC_QUEUE_ENQUEUE, 0, false, false},
		{"interrupt aborts the active run", 20, PC_QUEUE_DROP_SUMMARIZE, 0, PC_RUN_STREAMING,
		 PC_QUEUE_INTERRUPT, false, "x", false, PC_QUEUE_ABORT_THEN_RUN, 0, false, false},
		{"interrupt while compacting", 20, PC_QUEUE_DROP_SUMMARIZE, 1, PC_RUN_COMPACTING, PC_QUEUE_INTERRUPT,
		 false, "x", false, PC_QUEUE_ABORT_THEN_RUN, 0, false, false},
		{"interrupt with only a backlog", 20, PC_QUEUE_DROP_SUMMARIZE, 2, PC_RUN_IDLE, PC_QUEUE_INTERRUPT, false,
		 "x", false, PC_QUEUE_RUN_NOW, 0, false, false},
		{"cap: summarize drops one", 3, PC_QUEUE_DROP_SUMMARIZE, 3, PC_RUN_STREAMING, PC_QUEUE_FOLLOWUP, false,
		 "x", false, PC_QUEUE_ENQUEUE, 1, true, false},
		{"cap: old drops the surplus", 1, PC_QUEUE_DROP_OLD, 3, PC_RUN_STREAMING, PC_QUEUE_COLLECT, false, "x",
		 false, PC_QUEUE_ENQUEUE, 3, false, false},
		{"cap: new refuses", 3, PC_QUEUE_DROP_NEW, 3, PC_RUN_STREAMING, PC_QUEUE_FOLLOWUP, false, "x", false,
		 PC_QUEUE_REFUSE, 0, false, false},
		{"below the cap", 3, PC_QUEUE_DROP_NEW, 2, PC_RUN_STREAMING, PC_QUEUE_FOLLOWUP, false, "x", false,
		 PC_QUEUE_ENQUEUE, 0, false, false},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_queue_settings_t s;
		pc_queue_settings_default(&s);
		s.cap = rows[i].cap;
		s.drop = rows[i].drop;
		pc_queue_view_t q = {.items = three, .n = rows[i].queued, .last_enqueue_ms = 300};
		pc_queue_incoming_t msg = {.mode = rows[i].mode, .priority = PC_QUEUE_NORMAL,
					   .heartbeat = rows[i].heartbeat, .message_id = rows[i].id,
					   .seen_recently = rows[i].seen};
		pc_queue_decision_t d;
		cr_assert_eq(pc_queue_on_message(&s, &q, rows[i].phase, &msg, 1000, &d), 0);
		cr_assert_eq(d.action, rows[i].want, "%s: action %d (%s)", rows[i].name, d.action, d.detail);
		cr_assert_eq(d.drop_count, rows[i].drop_count, "%s", rows[i].name);
		cr_assert_eq(d.summarize, rows[i].summarize, "%s", rows[i].name);
		cr_assert_eq(d.also_enqueue, rows[i].also_enqueue, "%s", rows[i].name);
		cr_assert(d.detail && *d.detail, "%s", rows[i].name);
		if (d.action == PC_QUEUE_ENQUEUE)
			cr_assert_eq(d.drain_at_ms, 1000 + PC_QUEUE_DEFAULT_DEBOUNCE_MS, "%s", rows[i].name);
	}
}

Test(queue_policy, on_message_bad_arguments)
{
	pc_queue_settings_t s;
	pc_queue_settings_default(&s);
	pc_queue_view_t q = {0}, broken = {.items = NULL, .n = 2};
	pc_queue_incoming_t msg = {.mode = PC_QUEUE_STEER};
	pc_queue_decision_t d;
	cr_assert_eq(pc_queue_on_message(NULL, &q, PC_RUN_IDLE, &msg, 0, &d), PC_EINVAL);
	cr_assert_eq(pc_queue_on_message(&s, &broken, PC_RUN_IDLE, &msg, 0, &d), PC_EINVAL);
	msg.mode = PC_QUEUE_MODE_COUNT;
	cr_assert_eq(pc_queue_on_message(&s, &q, PC_RUN_IDLE, &msg, 0, &d), PC_EINVAL);
}

/* ================= choosing ================= */

Test(queue_policy, victims_table)
{
	static const struct {
		int prio[6];
		size_t n, count;
		size_t want[6];
		size_t got;
	} rows[] = {
		{{0, 0, 0}, 3, 1, {0}, 1},                         /* the oldest */
		{{0, 0, 0}, 3, 2, {0, 1}, 2},
		{{1, 0, -1, 0}, 4, 1, {2}, 1},                     /* background first */
		{{1, 0, -1, 0}, 4, 2, {1, 2}, 2},                  /* then the oldest normal */
		{{1, 0, -1, 0}, 4, 3, {1, 2, 3}, 3},
		{{1, 1, 0}, 3, 2, {0, 2}, 2},                      /* foreground last */
		{{-1, 1}, 2, 5, {0, 1}, 2},                        /* never more than the queue */
		{{-3, 0, -3}, 3, 2, {0, 2}, 2},                    /* any lower level first */
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_queue_item_t items[6];
		for (size_t k = 0; k < rows[i].n; k++)
			items[k] = (pc_queue_item_t){.prompt = "p", .priority = rows[i].prio[k]};
		pc_queue_view_t q = {.items = items, .n = rows[i].n};
		size_t idx[6] = {99, 99, 99, 99, 99, 99};
		cr_assert_eq(pc_queue_victims(&q, rows[i].count, idx), rows[i].got, "row %zu", i);
		for (size_t k = 0; k < rows[i].got; k++)
			cr_assert_eq(idx[k], rows[i].want[k], "row %zu, victim %zu", i, k);
	}
	cr_assert_eq(pc_queue_victims(NULL, 1, NULL), 0);
}

Test(queue_policy, pick_table)
{
	static const struct {
		int prio[4];
		size_t n, want;
	} rows[] = {
		{{0, 0, 0}, 3, 0}, {{0, 1, 1}, 3, 1}, {{-1, 0, 1, 0}, 4, 2}, {{-1, -1}, 2, 0},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_queue_item_t items[4];
		for (size_t k = 0; k < rows[i].n; k++)
			items[k] = (pc_queue_item_t){.prompt = "p", .priority = rows[i].prio[k]};
		pc_queue_view_t q = {.items = items, .n = rows[i].n};
		size_t idx = 99;
		cr_assert_eq(pc_queue_pick(&q, &idx), 0);
		cr_assert_eq(idx, rows[i].want, "row %zu", i);
	}
	pc_queue_view_t empty = {0};
	size_t idx;
	cr_assert_eq(pc_queue_pick(&empty, &idx), PC_ENOTFOUND);
	cr_assert_eq(pc_queue_pick(NULL, &idx), PC_EINVAL);
}

Test(queue_policy, next_table)
{
	static const pc_queue_item_t mixed[] = {
		{"a", "one", "chan:a", PC_QUEUE_NORMAL, 100},
		{"b", "two", "chan:b", PC_QUEUE_FOREGROUND, 200},
	};
	static const pc_queue_item_t unrouted[] = {
		{"a", "one", "chan:a", PC_QUEUE_NORMAL, 100},
		{"b", "two", NULL, PC_QUEUE_NORMAL, 200},
	};
	static const struct {
		const char *name;
		pc_queue_mode_t mode;
		const pc_queue_item_t *items;
		size_t n;
		uint32_t dropped;
		bool individual;
		int64_t now;
		pc_queue_next_kind_t want;
		size_t index;
		int64_t wait_until;
		bool out_individual;
	} rows[] = {
		{"empty", PC_QUEUE_FOLLOWUP, NULL, 0, 0, false, 5000, PC_QUEUE_NEXT_IDLE, 0, 0, false},
		{"debounce", PC_QUEUE_FOLLOWUP, three, 3, 0, false, 700, PC_QUEUE_NEXT_WAIT, 0, 800, false},
		{"debounce edge", PC_QUEUE_FOLLOWUP, three, 3, 0, false, 800, PC_QUEUE_NEXT_RUN_ITEM, 0, 0, false},
		{"followup: oldest", PC_QUEUE_FOLLOWUP, three, 3, 0, false, 5000, PC_QUEUE_NEXT_RUN_ITEM, 0, 0, false},
		{"followup: priority", PC_QUEUE_FOLLOWUP, mixed, 2, 0, false, 5000, PC_QUEUE_NEXT_RUN_ITEM, 1, 0,
		 false},
		{"followup: overflow summary first", PC_QUEUE_FOLLOWUP, three, 3, 2, false, 5000,
		 PC_QUEUE_NEXT_RUN_OVERFLOW, 0, 0, false},
		{"only an overflow summary", PC_QUEUE_STEER, NULL, 0, 4, false, 5000, PC_QUEUE_NEXT_RUN_OVERFLOW, 0, 0,
		 false},
		{"collect: one batch", PC_QUEUE_COLLECT, three, 3, 2, false, 5000, PC_QUEUE_NEXT_RUN_BATCH, 0, 0,
		 false},
		{"collect: unknown routes do not split", PC_QUEUE_COLLECT, unrouted, 2, 0, false, 5000,
		 PC_QUEUE_NEXT_RUN_BATCH, 0, 0, false},
		{"collect: cross-channel goes one by one", PC_QUEUE_COLLECT, mixed, 2, 0, false, 5000,
		 PC_QUEUE_NEXT_RUN_ITEM, 1, 0, true},
		{"collect: stays one by one", PC_QUEUE_COLLECT, three, 3, 0, true, 5000, PC_QUEUE_NEXT_RUN_ITEM, 0, 0,
		 true},
		{"collect: only drops left", PC_QUEUE_COLLECT, NULL, 0, 1, false, 5000, PC_QUEUE_NEXT_RUN_OVERFLOW, 0,
		 0, false},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_queue_settings_t s;
		pc_queue_settings_default(&s);
		s.mode = rows[i].mode;
		s.debounce_ms = 500;
		pc_queue_view_t q = {.items = rows[i].items, .n = rows[i].n, .dropped = rows[i].dropped,
				     .last_enqueue_ms = 300, .individual = rows[i].individual};
		pc_queue_next_t nx;
		cr_assert_eq(pc_queue_next(&s, &q, rows[i].now, &nx), 0, "%s", rows[i].name);
		cr_assert_eq(nx.kind, rows[i].want, "%s: kind %d", rows[i].name, nx.kind);
		if (nx.kind == PC_QUEUE_NEXT_RUN_ITEM)
			cr_assert_eq(nx.index, rows[i].index, "%s", rows[i].name);
		if (nx.kind == PC_QUEUE_NEXT_WAIT)
			cr_assert_eq(nx.wait_until_ms, rows[i].wait_until, "%s", rows[i].name);
		cr_assert_eq(nx.individual, rows[i].out_individual, "%s", rows[i].name);
	}
}

/* ================= prompts ================= */

Test(queue_policy, summary_line_table)
{
	char a200[201], a160[161], a158b[200], want158[200];
	memset(a200, 'a', 200);
	a200[200] = '\0';
	memset(a160, 'a', 160);
	a160[160] = '\0';
	memset(a158b, 'a', 158);
	strcpy(a158b + 158, " bbbbbbbbbb");
	memset(want158, 'a', 158);
	strcpy(want158 + 158, "\u2026");
	char want200[200];
	memset(want200, 'a', 159);
	strcpy(want200 + 159, "\u2026");
	static char e200[402];
	for (int i = 0; i < 200; i++)
		memcpy(e200 + 2 * i, "\xc3\xa9", 2);
	e200[400] = '\0';
	static char wante[400];
	for (int i = 0; i < 159; i++)
		memcpy(wante + 2 * i, "\xc3\xa9", 2);
	strcpy(wante + 318, "\u2026");
	const struct {
		const char *in, *want;
	} rows[] = {
		{"  a  b\n\t c  ", "a b c"},
		{"", ""},
		{a160, a160},
		{a200, want200},
		{a158b, want158},
		{e200, wante},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char *out;
		cr_assert_eq(pc_queue_summary_line(rows[i].in, &out), 0);
		cr_assert_str_eq(out, rows[i].want, "row %zu: \"%s\"", i, out);
		free(out);
	}
	char *out;
	cr_assert_eq(pc_queue_summary_line(NULL, &out), PC_EINVAL);
}

Test(queue_policy, overflow_prompt_table)
{
	static const char *const lines[] = {"one", "two", "three"};
	static const struct {
		uint32_t dropped;
		size_t n;
		uint32_t cap;
		const char *want;
	} rows[] = {
		{0, 3, 0, NULL},
		{1, 0, 0, "[Queue overflow] Dropped 1 message due to cap."},
		{3, 3, 0, "[Queue overflow] Dropped 3 messages due to cap.\nSummary:\n- one\n- two\n- three"},
		{5, 3, 2, "[Queue overflow] Dropped 5 messages due to cap.\nSummary:\n- two\n- three"},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char *out = (char *)1;
		cr_assert_eq(pc_queue_overflow_prompt(rows[i].dropped, lines, rows[i].n, rows[i].cap, &out), 0);
		if (!rows[i].want) {
			cr_assert_null(out);
			continue;
		}
		cr_assert_str_eq(out, rows[i].want, "row %zu: \"%s\"", i, out);
		free(out);
	}
	char *out;
	cr_assert_eq(pc_queue_overflow_prompt(1, NULL, 2, 0, &out), PC_EINVAL);
}

Test(queue_policy, collect_prompt)
{
	char *out;
	cr_assert_eq(pc_queue_collect_prompt(three, 2, NULL, &out), 0);
	cr_assert_str_eq(out, "[Queued messages while agent was busy]\n\n---\nQueued #1\nfirst\n\n---\nQueued #2\nsecond");
	free(out);
	cr_assert_eq(pc_queue_collect_prompt(three, 1, "[Queue overflow] Dropped 1 message due to cap.", &out), 0);
	cr_assert_str_eq(out, "[Queued messages while agent was busy]\n\n[Queue overflow] Dropped 1 message due to "
			      "cap.\n\n---\nQueued #1\nfirst");
	free(out);
	cr_assert_eq(pc_queue_collect_prompt(NULL, 1, NULL, &out), PC_EINVAL);
}

/* ================= the policy driving a queue ================= */

/* A session queue as the actor will keep it, driven only by the policy. */
typedef struct sim {
	pc_queue_item_t items[8];
	char *lines[8];
	size_t n, n_lines;
	uint32_t dropped;
	int64_t last;
	bool individual;
} sim_t;

static void sim_arrive(sim_t *q, const pc_queue_settings_t *s, pc_run_phase_t phase, const char *id,
		       const char *prompt, int prio, int64_t now, pc_queue_action_t want)
{
	pc_queue_view_t v = {q->items, q->n, q->dropped, q->last, q->individual};
	pc_queue_incoming_t msg = {.mode = s->mode, .priority = prio, .message_id = id};
	pc_queue_decision_t d;
	cr_assert_eq(pc_queue_on_message(s, &v, phase, &msg, now, &d), 0);
	cr_assert_eq(d.action, want, "%s: %s", id, d.detail);
	if (d.action != PC_QUEUE_ENQUEUE)
		return;
	size_t idx[8];
	size_t k = pc_queue_victims(&v, d.drop_count, idx);
	cr_assert_eq(k, d.drop_count);
	while (k--) {
		if (d.summarize) {
			cr_assert_eq(pc_queue_summary_line(q->items[idx[k]].prompt, &q->lines[q->n_lines++]), 0);
			q->dropped++;
		}
		memmove(&q->items[idx[k]], &q->items[idx[k] + 1], (q->n - idx[k] - 1) * sizeof(q->items[0]));
		q->n--;
	}
	q->items[q->n++] = (pc_queue_item_t){id, prompt, "chan:a", prio, now};
	q->last = now;
}

Test(queue_policy, collect_drain_simulation)
{
	pc_queue_settings_t s;
	pc_queue_settings_default(&s);
	s.mode = PC_QUEUE_COLLECT;
	s.cap = 3;
	sim_t q = {0};
	/* The run is busy; five messages arrive; the cap keeps three. */
	sim_arrive(&q, &s, PC_RUN_STREAMING, "m1", "first   one", PC_QUEUE_NORMAL, 1000, PC_QUEUE_ENQUEUE);
	sim_arrive(&q, &s, PC_RUN_STREAMING, "m2", "second", PC_QUEUE_FOREGROUND, 1100, PC_QUEUE_ENQUEUE);
	sim_arrive(&q, &s, PC_RUN_STREAMING, "m2", "second again", PC_QUEUE_NORMAL, 1150, PC_QUEUE_DROP);
	sim_arrive(&q, &s, PC_RUN_STREAMING, "m3", "third", PC_QUEUE_NORMAL, 1200, PC_QUEUE_ENQUEUE);
	sim_arrive(&q, &s, PC_RUN_STREAMING, "m4", "fourth", PC_QUEUE_NORMAL, 1300, PC_QUEUE_ENQUEUE);
	sim_arrive(&q, &s, PC_RUN_STREAMING, "m5", "fifth", PC_QUEUE_NORMAL, 1400, PC_QUEUE_ENQUEUE);
	cr_assert_eq(q.n, 3);
	cr_assert_eq(q.dropped, 2);
	cr_assert_str_eq(q.items[0].message_id, "m2", "the foreground message survives");
	cr_assert_str_eq(q.lines[0], "first one");
	cr_assert_str_eq(q.lines[1], "third");

	/* The run ends inside the debounce window: wait, then one batch. */
	pc_queue_view_t v = {q.items, q.n, q.dropped, q.last, q.individual};
	pc_queue_next_t nx;
	cr_assert_eq(pc_queue_next(&s, &v, 1500, &nx), 0);
	cr_assert_eq(nx.kind, PC_QUEUE_NEXT_WAIT);
	cr_assert_eq(nx.wait_until_ms, 1900);
	cr_assert_eq(pc_queue_next(&s, &v, nx.wait_until_ms, &nx), 0);
	cr_assert_eq(nx.kind, PC_QUEUE_NEXT_RUN_BATCH);
	char *summary, *prompt;
	cr_assert_eq(pc_queue_overflow_prompt(q.dropped, (const char *const *)q.lines, q.n_lines, s.cap, &summary), 0);
	cr_assert_eq(pc_queue_collect_prompt(q.items, q.n, summary, &prompt), 0);
	cr_assert_str_eq(prompt, "[Queued messages while agent was busy]\n\n"
				 "[Queue overflow] Dropped 2 messages due to cap.\nSummary:\n- first one\n- third\n\n"
				 "---\nQueued #1\nsecond\n\n---\nQueued #2\nfourth\n\n---\nQueued #3\nfifth");
	free(summary);
	free(prompt);
	for (size_t i = 0; i < q.n_lines; i++)
		free(q.lines[i]);

	/* The batch ran and took everything: the lane is free. */
	pc_queue_view_t empty = {0};
	cr_assert_eq(pc_queue_next(&s, &empty, 5000, &nx), 0);
	cr_assert_eq(nx.kind, PC_QUEUE_NEXT_IDLE);
	ASSERT_NO_LEAKS();
}

/* ================= §9.2 diagnostics ================= */

Test(diagnostics, thresholds_table)
{
	static const struct {
		uint64_t configured, want;
	} warn[] = {
		{0, 120000},          {999, 120000},          {1000, 1000},
		{86400000, 86400000}, {86400001, 120000},     {30000, 30000},
	};
	for (size_t i = 0; i < N_OF(warn); i++)
		cr_assert_eq(pc_diag_warn_ms(warn[i].configured), warn[i].want, "warn row %zu", i);
	static const struct {
		uint64_t warn, configured, want;
	} abrt[] = {
		{120000, 0, 360000},  /* 3 × 2 min = 6 min */
		{60000, 0, 300000},   /* the 5 min floor */
		{100000, 0, 300000},
		{200000, 0, 600000},
		{120000, 50000, 120000},  /* never below warn */
		{120000, 400000, 400000},
	};
	for (size_t i = 0; i < N_OF(abrt); i++)
		cr_assert_eq(pc_diag_abort_ms(abrt[i].warn, abrt[i].configured), abrt[i].want, "abort row %zu", i);
}

#define MIN_ ((int64_t)60000)

Test(diagnostics, classify_table)
{
	static const struct {
		const char *name;
		bool processing, has_run;
		pc_diag_activity_t act;
		uint32_t queued;
		int64_t started, progress, now;
		pc_diag_class_t cls;
		pc_diag_recovery_t rec;
		const char *reason;
	} rows[] = {
		{"idle", false, false, PC_DIAG_ACT_NONE, 3, 0, 0, 60 * MIN_, PC_DIAG_OK, PC_DIAG_RECOVER_NONE, "idle"},
		{"young run", true, true, PC_DIAG_ACT_MODEL_CALL, 0, 0, 0, MIN_, PC_DIAG_OK, PC_DIAG_RECOVER_NONE,
		 "progressing"},
		{"long but progressing", true, true, PC_DIAG_ACT_TOOL_CALL, 0, 0, 9 * MIN_, 10 * MIN_,
		 PC_DIAG_LONG_RUNNING, PC_DIAG_RECOVER_NONE, "active_run_progressing"},
		{"silent model call below abort", true, true, PC_DIAG_ACT_MODEL_CALL, 0, 0, 0, 5 * MIN_,
		 PC_DIAG_LONG_RUNNING, PC_DIAG_RECOVER_NONE, "silent_model_call"},
		{"blocked tool below abort", true, true, PC_DIAG_ACT_TOOL_CALL, 0, 0, MIN_, 6 * MIN_ + MIN_ - 1,
		 PC_DIAG_LONG_RUNNING, PC_DIAG_RECOVER_NONE, "tool_call_without_progress"},
		{"run without progress below abort", true, true, PC_DIAG_ACT_NONE, 2, 0, 0, 3 * MIN_,
		 PC_DIAG_LONG_RUNNING, PC_DIAG_RECOVER_NONE, "run_without_progress"},
		{"model call at abort", true, true, PC_DIAG_ACT_MODEL_CALL, 0, 0, 0, 6 * MIN_, PC_DIAG_STALLED,
		 PC_DIAG_RECOVER_ABORT_RUN, "stalled_model_call"},
		{"blocked tool past abort", true, true, PC_DIAG_ACT_TOOL_CALL, 0, 0, MIN_, 8 * MIN_, PC_DIAG_STALLED,
		 PC_DIAG_RECOVER_ABORT_RUN, "blocked_tool_call"},
		{"stalled run, queue kept", true, true, PC_DIAG_ACT_NONE, 4, 0, 0, 7 * MIN_, PC_DIAG_STALLED,
		 PC_DIAG_RECOVER_ABORT_RUN, "stalled_agent_run"},
		{"queued work without a run", true, false, PC_DIAG_ACT_NONE, 2, 0, 0, 2 * MIN_, PC_DIAG_STUCK,
		 PC_DIAG_RECOVER_RELEASE_LANE, "queued_work_without_active_run"},
		{"ownerless activity with a queue", true, false, PC_DIAG_ACT_TOOL_CALL, 1, 0, 0, 2 * MIN_,
		 PC_DIAG_STUCK, PC_DIAG_RECOVER_RELEASE_LANE, "queued_work_without_active_run"},
		{"processing with nothing", true, false, PC_DIAG_ACT_NONE, 0, 0, 0, 2 * MIN_, PC_DIAG_STUCK,
		 PC_DIAG_RECOVER_RELEASE_LANE, "processing_without_active_run"},
		{"ownerless model call", true, false, PC_DIAG_ACT_MODEL_CALL, 0, 0, 0, 3 * MIN_, PC_DIAG_STALLED,
		 PC_DIAG_RECOVER_NONE, "ownerless_model_call"},
		{"ownerless tool past abort", true, false, PC_DIAG_ACT_TOOL_CALL, 0, 0, 0, 6 * MIN_, PC_DIAG_STALLED,
		 PC_DIAG_RECOVER_RELEASE_LANE, "ownerless_tool_call"},
		{"warn edge", true, false, PC_DIAG_ACT_NONE, 1, 0, 0, 2 * MIN_ - 1, PC_DIAG_OK, PC_DIAG_RECOVER_NONE,
		 "progressing"},
		{"clock went back", true, true, PC_DIAG_ACT_MODEL_CALL, 0, 10 * MIN_, 0, MIN_, PC_DIAG_OK,
		 PC_DIAG_RECOVER_NONE, "progressing"},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_diag_input_t in = {
			.processing = rows[i].processing,
			.has_run = rows[i].has_run,
			.activity = rows[i].act,
			.queued = rows[i].queued,
			.started_ms = rows[i].started,
			.last_progress_ms = rows[i].progress,
			.now_ms = rows[i].now,
			.warn_ms = pc_diag_warn_ms(0),
			.abort_ms = pc_diag_abort_ms(pc_diag_warn_ms(0), 0),
			.generation = 7,
		};
		pc_diag_result_t r;
		cr_assert_eq(pc_diag_classify(&in, &r), 0);
		cr_assert_eq(r.cls, rows[i].cls, "%s: got %s", rows[i].name, pc_diag_class_name(r.cls));
		cr_assert_eq(r.recovery, rows[i].rec, "%s", rows[i].name);
		cr_assert_str_eq(r.reason, rows[i].reason, "%s", rows[i].name);
		cr_assert(r.keep_queued, "%s: recovery never discards queued messages", rows[i].name);
		cr_assert_eq(r.idle_if_generation, 7, "%s", rows[i].name);
	}
	cr_assert_eq(pc_diag_classify(NULL, NULL), PC_EINVAL);
	cr_assert_str_eq(pc_diag_class_name(PC_DIAG_LONG_RUNNING), "session.long_running");
	cr_assert_str_eq(pc_diag_class_name(PC_DIAG_STALLED), "session.stalled");
	cr_assert_str_eq(pc_diag_class_name(PC_DIAG_STUCK), "session.stuck");
	cr_assert_str_eq(pc_diag_class_name(PC_DIAG_OK), "ok");
}

Test(diagnostics, ages_from_last_progress)
{
	pc_diag_input_t in = {
		.processing = true, .has_run = true, .activity = PC_DIAG_ACT_MODEL_CALL,
		.started_ms = 0, .last_progress_ms = 4 * MIN_, .now_ms = 9 * MIN_,
		.warn_ms = 120000, .abort_ms = 360000,
	};
	pc_diag_result_t r;
	cr_assert_eq(pc_diag_classify(&in, &r), 0);
	cr_assert_eq(r.age_ms, (uint64_t)(5 * MIN_));
	cr_assert_eq(r.run_ms, (uint64_t)(9 * MIN_));
	cr_assert_eq(r.cls, PC_DIAG_LONG_RUNNING, "5 min silent < 6 min abort");
	in.now_ms = 10 * MIN_;
	cr_assert_eq(pc_diag_classify(&in, &r), 0);
	cr_assert_eq(r.cls, PC_DIAG_STALLED);
}

Test(diagnostics, warning_backoff_table)
{
	static const struct {
		uint32_t repeats;
		int64_t last, now;
		bool want;
	} rows[] = {
		{0, 0, 119999, false}, {0, 0, 120000, true},  {1, 0, 239999, false}, {1, 0, 240000, true},
		{2, 0, 480000, true},  {3, 0, 959999, false}, {6, 0, 7680000, true}, {40, 0, 7679999, false},
		{40, 0, 7680000, true}, {0, 500, 100, false},
	};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_diag_should_warn(rows[i].repeats, rows[i].last, rows[i].now, 120000), rows[i].want,
			     "row %zu", i);
}
