/*
 * Request / reply: pc_ask and pc_reply between actors (correlation ids),
 * pc_ask_sync from threads outside the runtime (replies, timeouts, late
 * replies after a timeout), and the misuse cases.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/actor_internal.h"
#include "pincer.h"
#include "test_util.h"

/* ---- helpers ----------------------------------------------------------- */


/* ---- the server -------------------------------------------------------- */

enum {
	S_DOUBLE = 1,  /* reply value * 2 */
	S_SILENT,      /* keep the requester and corr, reply later on S_LATE */
	S_LATE,        /* answer the kept request (after its asker gave up) */
	S_SLOW,        /* sleep value ms, then reply value */
	S_REPLY_PLAIN, /* pc_reply to a message that was not an ask */
	S_DIE,         /* stop without replying */
	R_ANSWER,      /* the reply type */
};

typedef struct server {
	pc_actor_t *kept;   /* retained requester of an S_SILENT */
	uint64_t kept_corr;
	int plain_rc;       /* result of S_REPLY_PLAIN */
	int stops;
} server_t;

static int reply_u64(const pc_msg_t *req, uint64_t v)
{
	pc_msg_t *r = pc_msg_new(R_ANSWER, sizeof(v));
	if (!r)
		return PC_ENOMEM;
	memcpy(pc_msg_data(r), &v, sizeof(v));
	/* PC_ESTOPPED: the asker gave up (pc_ask_sync timed out). Not our
	 * failure. */
	int rc = pc_reply(req, r);
	return rc == PC_ESTOPPED ? 0 : rc;
}

static int server_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	server_t *s = state;
	switch (m->type) {
	case S_DOUBLE:
		return reply_u64(m, pc_msg_u64(m) * 2);
	case S_SILENT:
		pc_actor_release(s->kept);
		s->kept = pc_actor_retain(m->reply_to);
		s->kept_corr = m->corr;
		return 0;
	case S_LATE: {
		if (!s->kept)
			return 0;
		pc_msg_t *r = pc_msg_new(R_ANSWER, 8);
		memset(pc_msg_data(r), 0, 8);
		r->corr = s->kept_corr;
		pc_send(s->kept, r); /* the asker may be gone: a dead letter */
		pc_actor_release(s->kept);
		s->kept = NULL;
		return 0;
	}
	case S_DIE:
		pc_exit(ctx, PC_EXIT_NORMAL);
		return 0;
	case S_SLOW:
		sleep_ms((unsigned)pc_msg_u64(m));
		return reply_u64(m, pc_msg_u64(m));
	case S_REPLY_PLAIN: {
		pc_msg_t *r = pc_msg_new(R_ANSWER, 64); /* freed by pc_reply: LSan */
		STORE(s->plain_rc, pc_reply(m, r));
		return 0;
	}
	default:
		return 0;
	}
}

static void server_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	server_t *s = state;
	pc_actor_release(s->kept);
	s->kept = NULL;
	INC(s->stops);
}

static const pc_behavior_t server_behavior = {"server", server_receive, server_stop};

static pc_actor_t *spawn_server(pc_runtime_t *rt, server_t *s)
{
	memset(s, 0, sizeof(*s));
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &server_behavior, s, &a), 0);
	return a;
}

static pc_msg_t *req_u64(uint32_t type, uint64_t v)
{
	pc_msg_t *m = pc_msg_new(type, sizeof(v)); /* used on workers: no cr_assert */
	if (m)
		memcpy(pc_msg_data(m), &v, sizeof(v));
	return m;
}

/* ---- pc_ask / pc_reply between actors ---------------------------------- */

enum { A_GO = 100, A_ASK_SYNC, A_ASK_NULL, A_ASK_DEAD };
enum { ASKS = 200 };

typedef struct asker {
	pc_actor_t *server;
	uint64_t corr[ASKS];
	int answered[ASKS];
	int replies;
	int mismatched;
	int rc;
} asker_t;

static int asker_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	asker_t *a = state;
	switch (m->type) {
	case A_GO:
		for (int i = 0; i < ASKS; i++) {
			uint64_t corr = 0;
			int rc = pc_ask(ctx, a->server, req_u64(S_DOUBLE, (uint64_t)i), &corr);
			if (rc != 0 || corr == 0)
				return rc ? rc : -1;
			for (int j = 0; j < i; j++)
				if (a->corr[j] == corr)
					return -2; /* correlation ids must be fresh */
			a->corr[i] = corr;
		}
		return 0;
	case R_ANSWER: {
		int i = -1;
		for (int j = 0; j < ASKS; j++)
			if (a->corr[j] == m->corr)
				i = j;
		if (i < 0 || a->answered[i] || pc_msg_u64(m) != (uint64_t)i * 2 || m->reply_to)
			INC(a->mismatched);
		else
			a->answered[i] = 1;
		INC(a->replies);
		return 0;
	}
	case A_ASK_SYNC: {
		pc_msg_t *reply = (pc_msg_t *)1;
		int rc = pc_ask_sync(a->server, req_u64(S_DOUBLE, 1), 1000, &reply);
		if (reply)
			rc = -100; /* *reply must be cleared */
		STORE(a->rc, rc);
		return 0;
	}
	case A_ASK_NULL: {
		uint64_t corr = 0;
		STORE(a->rc, pc_ask(ctx, NULL, req_u64(S_DOUBLE, 1), &corr));
		return 0;
	}
	case A_ASK_DEAD: {
		STORE(a->rc, pc_ask(ctx, a->server, req_u64(S_DOUBLE, 1), NULL));
		return 0;
	}
	default:
		return 0;
	}
}

static const pc_behavior_t asker_behavior = {"asker", asker_receive, NULL};

Test(ask, ask_and_reply_between_actors)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	asker_t *a = calloc(1, sizeof(*a));
	a->server = server;
	pc_actor_t *asker = NULL;
	cr_assert_eq(pc_spawn(rt, &asker_behavior, a, &asker), 0);
	cr_assert_eq(pc_send_u64(asker, A_GO, 0), 0);
	AWAIT(LOAD(a->replies) == ASKS, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(a->mismatched), 0);
	for (int i = 0; i < ASKS; i++)
		cr_assert(a->answered[i], "ask %d unanswered", i);
	cr_assert_not(pc_actor_stopped(asker), "asker failed");
	pc_actor_release(asker);
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt);
	free(a);
}

Test(ask, reply_to_a_plain_message_is_einval)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	STORE(s.plain_rc, 1);
	cr_assert_eq(pc_send_u64(server, S_REPLY_PLAIN, 0), 0);
	AWAIT(LOAD(s.plain_rc) != 1, 5000);
	cr_assert_eq(LOAD(s.plain_rc), PC_EINVAL);
	cr_assert_eq(pc_reply(NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_reply(NULL, pc_msg_new(1, 8)), PC_EINVAL); /* freed: LSan */
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt);
}

/* pc_ask with a bad target keeps no reference to the asker. */
Test(ask, failed_ask_leaks_no_reference)
{
	pc_runtime_t *rt = start_rt(2);
	for (int dead = 0; dead < 2; dead++) {
		server_t s;
		pc_actor_t *server = spawn_server(rt, &s);
		if (dead) {
			cr_assert_eq(pc_actor_stop(server, PC_EXIT_NORMAL), 0);
			AWAIT(LOAD(s.stops) == 1, 5000);
		}
		asker_t *a = calloc(1, sizeof(*a));
		a->server = server;
		pc_actor_t *asker = NULL;
		cr_assert_eq(pc_spawn(rt, &asker_behavior, a, &asker), 0);
		STORE(a->rc, 1);
		cr_assert_eq(pc_send_u64(asker, dead ? A_ASK_DEAD : A_ASK_NULL, 0), 0);
		AWAIT(LOAD(a->rc) != 1, 5000);
		cr_assert_eq(LOAD(a->rc), dead ? PC_ESTOPPED : PC_EINVAL);
		cr_assert_eq(pc_actor_stop(asker, PC_EXIT_NORMAL), 0);
		cr_assert_eq(pc_actor_stop(server, PC_EXIT_NORMAL) == PC_ESTOPPED, dead);
		pc_actor_release(asker);
		pc_actor_release(server);
		quiesce(rt);
		cr_assert_eq(live_count(rt), 0, "the asker is still referenced");
		free(a);
	}
	FREE_RUNTIME_CHECKED(rt);
}

/* ---- pc_ask_sync ------------------------------------------------------- */

Test(ask, ask_sync_gets_the_reply)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	for (uint64_t i = 0; i < 50; i++) {
		pc_msg_t *reply = NULL;
		cr_assert_eq(pc_ask_sync(server, req_u64(S_DOUBLE, i), 5000, &reply), 0);
		cr_assert_not_null(reply);
		cr_assert_eq(reply->type, R_ANSWER);
		cr_assert_eq(pc_msg_u64(reply), i * 2);
		cr_assert_neq(reply->corr, 0);
		cr_assert_null(reply->reply_to);
		pc_msg_free(reply);
	}
	/* Waiting for ever works too. */
	pc_msg_t *reply = NULL;
	cr_assert_eq(pc_ask_sync(server, req_u64(S_SLOW, 20), -1, &reply), 0);
	cr_assert_eq(pc_msg_u64(reply), 20);
	pc_msg_free(reply);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1, "the waiter actors are reclaimed");
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt);
}

Test(ask, ask_sync_times_out_and_late_reply_is_harmless)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	uint64_t dead0 = stats(rt).dead_letters;
	uint64_t t0 = now_ms();
	pc_msg_t *reply = (pc_msg_t *)1;
	cr_assert_eq(pc_ask_sync(server, req_u64(S_SILENT, 0), 60, &reply), PC_ETIMEDOUT);
	cr_assert_geq(now_ms() - t0, 60, "returned before the timeout");
	cr_assert_null(reply);
	/* The server answers now: dropped, freed, and nothing else breaks. */
	cr_assert_eq(pc_send_u64(server, S_LATE, 0), 0);
	quiesce(rt);
	cr_assert_eq(stats(rt).dead_letters, dead0 + 1);
	cr_assert_eq(live_count(rt), 1);
	/* A zero timeout with no answer. */
	cr_assert_eq(pc_ask_sync(server, req_u64(S_SILENT, 0), 0, &reply), PC_ETIMEDOUT);
	/* And the server still answers the next caller. */
	cr_assert_eq(pc_ask_sync(server, req_u64(S_DOUBLE, 21), 5000, &reply), 0);
	cr_assert_eq(pc_msg_u64(reply), 42);
	pc_msg_free(reply);
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt); /* the kept requester is released by the stop handler */
}

/* A target that stops without replying ends even an endless wait. */
Test(ask, ask_sync_target_stops_without_reply)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	pc_msg_t *reply = (pc_msg_t *)1;
	cr_assert_eq(pc_ask_sync(server, req_u64(S_DIE, 0), -1, &reply), PC_ESTOPPED);
	cr_assert_null(reply);
	cr_assert_eq(LOAD(s.stops), 1);
	/* Asking the stopped actor fails at once too. */
	cr_assert_eq(pc_ask_sync(server, req_u64(S_DOUBLE, 1), -1, &reply), PC_ESTOPPED);
	cr_assert_null(reply);
	quiesce(rt);
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt);
}

/* A huge timeout means "wait", not "already expired". */
Test(ask, ask_sync_huge_timeout)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	int64_t timeouts[] = {INT64_MAX, INT64_MAX / 1000, (int64_t)1 << 50};
	for (int i = 0; i < 3; i++) {
		pc_msg_t *reply = NULL;
		cr_assert_eq(pc_ask_sync(server, req_u64(S_SLOW, 10), timeouts[i], &reply), 0, "timeout %lld",
			     (long long)timeouts[i]);
		cr_assert_eq(pc_msg_u64(reply), 10);
		pc_msg_free(reply);
	}
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt);
}

/* Replies that arrive right around the timeout: either outcome is fine,
 * nothing may crash or leak. */
Test(ask, ask_sync_reply_racing_timeout)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	int ok = 0, timedout = 0;
	for (int i = 0; i < 40; i++) {
		pc_msg_t *reply = NULL;
		int rc = pc_ask_sync(server, req_u64(S_SLOW, (uint64_t)(i % 4)), i % 4, &reply);
		if (rc == 0) {
			ok++;
			cr_assert_eq(pc_msg_u64(reply), (uint64_t)(i % 4));
			pc_msg_free(reply);
		} else {
			cr_assert_eq(rc, PC_ETIMEDOUT, "round %d: %s", i, pc_strerror(rc));
			cr_assert_null(reply);
			timedout++;
		}
	}
	cr_assert_eq(ok + timedout, 40);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt);
}

Test(ask, ask_sync_errors)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	pc_msg_t *reply = (pc_msg_t *)1;
	cr_assert_eq(pc_ask_sync(NULL, req_u64(S_DOUBLE, 1), 100, &reply), PC_EINVAL);
	cr_assert_null(reply);
	cr_assert_eq(pc_ask_sync(server, NULL, 100, &reply), PC_EINVAL);
	cr_assert_eq(pc_ask_sync(server, req_u64(S_DOUBLE, 1), 100, NULL), PC_EINVAL);
	cr_assert_eq(pc_actor_stop(server, PC_EXIT_NORMAL), 0);
	AWAIT(LOAD(s.stops) == 1, 5000);
	cr_assert_eq(pc_ask_sync(server, req_u64(S_DOUBLE, 1), 100, &reply), PC_ESTOPPED);
	cr_assert_null(reply);
	pc_actor_release(server);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
}

Test(ask, ask_sync_on_worker_is_estate)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	asker_t *a = calloc(1, sizeof(*a));
	a->server = server;
	pc_actor_t *asker = NULL;
	cr_assert_eq(pc_spawn(rt, &asker_behavior, a, &asker), 0);
	STORE(a->rc, 1);
	cr_assert_eq(pc_send_u64(asker, A_ASK_SYNC, 0), 0);
	AWAIT(LOAD(a->rc) != 1, 5000);
	cr_assert_eq(LOAD(a->rc), PC_ESTATE);
	pc_actor_release(asker);
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt); /* LSan: the refused request was freed */
	free(a);
}

/* From the blocking pool, which may block: allowed. */
typedef struct pool_job {
	pc_actor_t *server;
	int rc;
	uint64_t value;
	int done;
} pool_job_t;

static pc_msg_t *pool_ask(void *arg)
{
	pool_job_t *j = arg;
	pc_msg_t *reply = NULL;
	j->rc = pc_ask_sync(j->server, req_u64(S_DOUBLE, 8), 5000, &reply);
	if (reply)
		j->value = pc_msg_u64(reply);
	pc_msg_free(reply);
	STORE(j->done, 1);
	return NULL;
}

Test(ask, ask_sync_from_blocking_pool)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	pool_job_t j = {server, 1, 0, 0};
	cr_assert_eq(pc_blocking_submit(rt, pool_ask, NULL, &j, NULL), 0);
	AWAIT(LOAD(j.done) == 1, 5000);
	cr_assert_eq(j.rc, 0);
	cr_assert_eq(j.value, 16);
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt);
}

/* Several outside threads asking at once. */
typedef struct caller {
	pc_actor_t *server;
	int n;
	int bad;
} caller_t;

static void *caller_main(void *arg)
{
	caller_t *c = arg;
	for (int i = 0; i < c->n; i++) {
		pc_msg_t *reply = NULL;
		uint64_t v = (uint64_t)i * 3 + 1;
		if (pc_ask_sync(c->server, req_u64(S_DOUBLE, v), 10000, &reply) != 0 || pc_msg_u64(reply) != v * 2)
			c->bad++;
		pc_msg_free(reply);
	}
	return NULL;
}

Test(ask, concurrent_ask_sync)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	enum { T = 3 };
	caller_t c[T];
	pthread_t th[T];
	for (int i = 0; i < T; i++) {
		c[i] = (caller_t){server, 150, 0};
		pthread_create(&th[i], NULL, caller_main, &c[i]);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(c[i].bad, 0);
	}
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt);
}

/* A forwarder that passes every question on with pc_ask_as: the server
 * answers the original asker directly, with its correlation id. */
static int forward_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	pc_actor_t *server = state;
	if (!m->reply_to)
		return 0;
	return pc_ask_as(server, req_u64(S_DOUBLE, pc_msg_u64(m)), m->reply_to, m->corr);
}

Test(ask, ask_as_forwards_the_question)
{
	pc_runtime_t *rt = start_rt(2);
	server_t s;
	pc_actor_t *server = spawn_server(rt, &s);
	static const pc_behavior_t fwd_b = {"forwarder", forward_receive, NULL};
	pc_actor_t *fwd = NULL;
	cr_assert_eq(pc_spawn(rt, &fwd_b, server, &fwd), 0);
	for (uint64_t i = 1; i <= 20; i++) {
		pc_msg_t *reply = NULL;
		cr_assert_eq(pc_ask_sync(fwd, req_u64(S_DOUBLE, i), 5000, &reply), 0);
		cr_assert_eq(pc_msg_u64(reply), i * 2, "the server answered the first asker");
		pc_msg_free(reply);
	}
	cr_assert_eq(pc_ask_as(NULL, pc_msg_new(S_DOUBLE, 8), server, 1), PC_EINVAL);
	cr_assert_eq(pc_ask_as(server, pc_msg_new(S_DOUBLE, 8), NULL, 1), PC_EINVAL);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 2, "the waiters and their references are released");
	pc_actor_release(fwd);
	pc_actor_release(server);
	FREE_RUNTIME_CHECKED(rt);
}
