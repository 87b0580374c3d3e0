/*
 * supervised_counter: let it crash.
 *
 * A counter runs under a supervisor, registered as "counter". We count to
 * three, make the counter crash, and find it again by name: the supervisor
 * has started a fresh incarnation (with fresh state) under the same name.
 * Clients never hold on to an incarnation; they look the name up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pincer/pincer.h>

enum {
	INCR = 1, /* add one */
	GET,      /* an ask: reply with the current value */
	CRASH,    /* fail on purpose */
};

static int counter_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	uint64_t *value = state;
	switch (msg->type) {
	case INCR:
		(*value)++;
		return 0;
	case GET: {
		pc_msg_t *r = pc_msg_new(GET, sizeof(*value));
		if (!r)
			return PC_ENOMEM;
		memcpy(pc_msg_data(r), value, sizeof(*value));
		pc_reply(msg, r);
		return 0;
	}
	case CRASH:
		/* Any negative return stops the actor with PC_EXIT_ERROR; its
		 * supervisor hears of it and restarts it. No cleanup code here:
		 * the stop handler still runs. */
		printf("counter: crashing with value %llu\n", (unsigned long long)*value);
		return PC_EINVAL;
	default:
		return 0;
	}
}

static void counter_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	free(state);
}

static const pc_behavior_t counter = {"counter", counter_receive, counter_stop};

/* How the supervisor (re)starts the child: every incarnation starts from
 * the same initial state. */
static int start_counter(pc_runtime_t *rt, void *arg, pc_actor_t **out)
{
	(void)arg;
	uint64_t *value = calloc(1, sizeof(*value));
	if (!value)
		return PC_ENOMEM;
	int rc = pc_spawn(rt, &counter, value, out);
	if (rc != 0)
		free(value);
	return rc;
}

/* Asks whoever is registered as "counter" now for its value. */
static int get_value(pc_runtime_t *rt, uint64_t *value, uint64_t *id)
{
	pc_actor_t *c = pc_whereis(rt, "counter"); /* a reference of our own */
	if (!c)
		return PC_ENOTFOUND;
	*id = pc_actor_id(c);
	pc_msg_t *reply = NULL;
	int rc = pc_ask_sync(c, pc_msg_new(GET, 0), 5000, &reply);
	if (rc == 0)
		*value = pc_msg_u64(reply);
	pc_msg_free(reply);
	pc_actor_release(c);
	return rc;
}

static int send_to_counter(pc_runtime_t *rt, uint32_t type)
{
	pc_actor_t *c = pc_whereis(rt, "counter");
	int rc = c ? pc_send_u64(c, type, 0) : PC_ENOTFOUND;
	pc_actor_release(c);
	return rc;
}

int main(void)
{
	pc_runtime_t *rt = NULL;
	if (pc_runtime_new(NULL, &rt) != 0 || pc_runtime_start(rt) != 0)
		return 1;

	/* Up to 3 restarts in 5 s; one more and the supervisor gives up (and
	 * would itself fail, for its own supervisor to handle). */
	pc_child_spec_t child = {"counter", start_counter, NULL, PC_CHILD_PERMANENT};
	pc_supervisor_spec_t spec = {PC_SUP_ONE_FOR_ONE, 3, 5000, &child, 1};
	pc_actor_t *sup = NULL;
	if (pc_supervisor_start(rt, &spec, &sup) != 0) {
		pc_runtime_free(rt);
		return 1;
	}
	/* The supervisor starts its children from its own first message: wait
	 * until the runtime has nothing left to do. */
	pc_runtime_wait_quiescent(rt, 5000);

	for (int i = 0; i < 3; i++)
		send_to_counter(rt, INCR);
	uint64_t before = 0, after = 99, id1 = 0, id2 = 0;
	int ok = get_value(rt, &before, &id1) == 0 && before == 3;
	printf("main: counter #%llu counted to %llu\n", (unsigned long long)id1, (unsigned long long)before);

	send_to_counter(rt, CRASH);
	/* Quiescent again means the crash was handled and the restart done. */
	pc_runtime_wait_quiescent(rt, 5000);

	ok = ok && get_value(rt, &after, &id2) == 0 && after == 0 && id2 != id1;
	printf("main: \"counter\" is now #%llu, restarted from %llu\n", (unsigned long long)id2,
	       (unsigned long long)after);

	pc_actor_release(sup);
	pc_runtime_free(rt); /* stops the supervisor, which stops the counter */
	printf("%s\n", ok ? "ok" : "unexpected result");
	return ok ? 0 : 1;
}
