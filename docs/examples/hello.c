/*
 * hello: the smallest complete embedding of Pincer.
 *
 * A greeter actor keeps a count of the greetings it handled. The main
 * thread sends it a few names, then asks for the count with pc_ask_sync
 * and shuts the runtime down.
 *
 * Build: cc hello.c $(pkg-config --cflags --libs pincer)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pincer/pincer.h>

enum {
	GREET = 1, /* payload: a NUL-terminated name */
	COUNT,     /* an ask: the reply carries the number of greetings */
};

typedef struct greeter {
	uint64_t greeted;
} greeter_t;

static int greeter_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	greeter_t *g = state; /* only this actor touches it: no lock */
	switch (msg->type) {
	case GREET:
		/* The message is borrowed: read it now, never keep the pointer. */
		printf("greeter: hello, %s\n", (const char *)pc_msg_cdata(msg));
		g->greeted++;
		return 0;
	case COUNT: {
		pc_msg_t *r = pc_msg_new(COUNT, sizeof(g->greeted));
		if (!r)
			return PC_ENOMEM; /* a negative return stops this actor */
		memcpy(pc_msg_data(r), &g->greeted, sizeof(g->greeted));
		/* pc_reply routes the answer to whoever asked, with the ask's
		 * correlation id. PC_ESTOPPED would mean the asker gave up
		 * waiting: not a reason for the greeter to fail. */
		pc_reply(msg, r);
		return 0;
	}
	default:
		return 0;
	}
}

/* The stop handler owns the state: it runs exactly once, however the actor
 * stops (here: at runtime shutdown). */
static void greeter_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	printf("greeter: stopping (reason %d), state freed\n", reason);
	free(state);
}

static const pc_behavior_t greeter = {"greeter", greeter_receive, greeter_stop};

static int greet(pc_actor_t *a, const char *name)
{
	size_t n = strlen(name) + 1;
	pc_msg_t *m = pc_msg_new(GREET, n);
	if (!m)
		return PC_ENOMEM;
	memcpy(pc_msg_data(m), name, n);
	return pc_send(a, m); /* ownership of m passes, on every path */
}

int main(void)
{
	pc_runtime_t *rt = NULL;
	if (pc_runtime_new(NULL, &rt) != 0 || pc_runtime_start(rt) != 0) {
		fprintf(stderr, "cannot start the runtime\n");
		return 1;
	}

	greeter_t *state = calloc(1, sizeof(*state));
	pc_actor_t *g = NULL;
	if (!state || pc_spawn(rt, &greeter, state, &g) != 0) {
		free(state); /* on failure the caller keeps the state */
		pc_runtime_free(rt);
		return 1;
	}

	const char *names[] = {"Ada", "Grace", "Edsger"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		greet(g, names[i]);

	/* Messages from one sender arrive in order, so the count asked for
	 * after the three greetings sees all three. pc_ask_sync blocks: it is
	 * for threads outside the runtime only, never for handlers. */
	pc_msg_t *question = pc_msg_new(COUNT, 0);
	pc_msg_t *answer = NULL;
	int rc = pc_ask_sync(g, question, 5000, &answer);
	uint64_t count = rc == 0 ? pc_msg_u64(answer) : 0;
	if (rc == 0)
		printf("main: the greeter has greeted %llu people\n", (unsigned long long)count);
	else
		printf("main: ask failed: %s\n", pc_strerror(rc));
	pc_msg_free(answer); /* a reply from pc_ask_sync belongs to the caller */

	/* Our handle goes before the runtime; the runtime stops the actor. */
	pc_actor_release(g);
	pc_runtime_free(rt);
	return rc == 0 && count == 3 ? 0 : 1;
}
