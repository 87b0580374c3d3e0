/* Spawns an actor through the installed headers and asks it a question. */
#include <pincer/pincer.h>
#include <stdio.h>
#include <string.h>

static int echo(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	(void)state;
	pc_msg_t *reply = pc_msg_new(msg->type, sizeof(uint64_t));
	if (!reply)
		return PC_ENOMEM;
	uint64_t v = pc_msg_u64(msg) * 2;
	memcpy(pc_msg_data(reply), &v, sizeof(v));
	return pc_reply(msg, reply);
}

static const pc_behavior_t echo_behavior = {"echo", echo, NULL};

int main(void)
{
	pc_runtime_t *rt;
	pc_actor_t *a;
	pc_msg_t *q, *r = NULL;
	if (pc_runtime_new(NULL, &rt) || pc_runtime_start(rt) || pc_spawn(rt, &echo_behavior, NULL, &a))
		return 1;
	if (!(q = pc_msg_new(1, sizeof(uint64_t))))
		return 1;
	uint64_t v = 21;
	memcpy(pc_msg_data(q), &v, sizeof(v));
	int rc = pc_ask_sync(a, q, 5000, &r);
	int ok = rc == 0 && pc_msg_u64(r) == 42 && strcmp(pc_version(), PC_VERSION_STRING) == 0;
	printf("pincer %s: ask_sync -> %s\n", pc_version(), ok ? "42" : pc_strerror(rc));
	pc_msg_free(r);
	pc_actor_release(a);
	pc_runtime_free(rt);
	return ok ? 0 : 1;
}
