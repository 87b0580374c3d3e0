/*
 * An "owner" actor for tool tests: it records every PC_MSG_TOOL_DONE it
 * gets under a lock (how many, per tag, the latest one, malformed ones);
 * the test thread polls the record (AWAIT in test_util.h).
 */
#ifndef PC_TESTS_TOOL_OWNER_H
#define PC_TESTS_TOOL_OWNER_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tools/tool.h"

#define MAX_TAGS 1024u

typedef struct rec {
	uint64_t tag;
	pc_tool_status_t status;
	bool is_error;
	bool terminate;
	bool mutating;
	uint64_t duration_us;
	char id[80];
	char name[80];
	char *text;
	size_t text_len;
} rec_t;

typedef struct seen {
	pthread_mutex_t lock;
	uint32_t n;        /* DONE messages, all tags */
	rec_t last;        /* the latest one (text owned) */
	uint32_t per_tag[MAX_TAGS];
	uint32_t bad;      /* malformed DONE messages */
	uint32_t others;   /* messages of any other type */
} seen_t;

static inline int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	seen_t *s = state;
	pthread_mutex_lock(&s->lock);
	if (msg->type == PC_MSG_TOOL_DONE) {
		const pc_tool_done_msg_t *d = pc_msg_cdata(msg);
		if (!d->text || !d->name || !d->tool_call_id || strlen(d->text) != d->text_len)
			s->bad++;
		free(s->last.text);
		s->last = (rec_t){
			.tag = d->tag,
			.status = d->status,
			.is_error = d->is_error,
			.terminate = d->terminate,
			.mutating = d->mutating,
			.duration_us = d->duration_us,
			.text = strdup(d->text ? d->text : ""),
			.text_len = d->text_len,
		};
		snprintf(s->last.id, sizeof(s->last.id), "%s", d->tool_call_id ? d->tool_call_id : "");
		snprintf(s->last.name, sizeof(s->last.name), "%s", d->name ? d->name : "");
		if (d->tag < MAX_TAGS)
			s->per_tag[d->tag]++;
		s->n++;
	} else {
		s->others++;
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static const pc_behavior_t owner_b = {.name = "owner", .receive = owner_receive};

static inline uint32_t done_count(seen_t *s)
{
	pthread_mutex_lock(&s->lock);
	uint32_t n = s->n;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* A copy of the latest DONE; the caller frees .text. */
static inline rec_t last_done(seen_t *s)
{
	pthread_mutex_lock(&s->lock);
	rec_t r = s->last;
	r.text = strdup(s->last.text ? s->last.text : "");
	pthread_mutex_unlock(&s->lock);
	return r;
}

#endif
