/* Requests a route handed to actors of their own (http_server.h). */
#include "http_server.h"

#include <stdlib.h>

#include "id_map.h"

typedef struct handoff {
	pc__id_link_t link; /* first: the link is the entry */
	pc_actor_t *actor;  /* a reference */
} handoff_t;

struct pc_http_handoffs {
	pc__id_map_t ids;
};

int pc_http_handoffs_new(pc_http_handoffs_t **out)
{
	pc_http_handoffs_t *h = calloc(1, sizeof(*h));
	if (!h || pc__id_map_init(&h->ids)) {
		free(h);
		return PC_ENOMEM;
	}
	*out = h;
	return 0;
}

static void stop_one(pc__id_link_t *l, void *arg)
{
	(void)arg;
	handoff_t *e = (handoff_t *)l;
	(void)pc_actor_stop(e->actor, PC_EXIT_SHUTDOWN);
	pc_actor_release(e->actor);
	free(e);
}

void pc_http_handoffs_free(pc_http_handoffs_t *h)
{
	if (!h)
		return;
	pc__id_map_drain(&h->ids, stop_one, NULL);
	pc__id_map_destroy(&h->ids);
	free(h);
}

int pc_http_handoff_add(pc_http_handoffs_t *h, uint64_t id, pc_actor_t *a)
{
	handoff_t *e = malloc(sizeof(*e));
	if (!e)
		return PC_ENOMEM;
	e->actor = pc_actor_retain(a);
	pc__id_map_add(&h->ids, &e->link, id);
	return 0;
}

/* Takes request `id` out: its actor's reference, or NULL. */
static pc_actor_t *take(pc_http_handoffs_t *h, uint64_t id)
{
	handoff_t *e = (handoff_t *)pc__id_map_find(&h->ids, id);
	if (!e)
		return NULL;
	pc__id_map_remove(&h->ids, &e->link);
	pc_actor_t *a = e->actor;
	free(e);
	return a;
}

void pc_http_handoff_done(pc_http_handoffs_t *h, uint64_t id)
{
	pc_actor_release(take(h, id));
}

void pc_http_handoff_gone(pc_http_handoffs_t *h, const pc_msg_t *gone, uint32_t type)
{
	uint64_t id = ((const pc_http_gone_msg_t *)pc_msg_cdata(gone))->id;
	pc_actor_t *a = take(h, id);
	if (a)
		(void)pc_send_u64(a, type, id); /* an actor already stopped drops it */
	pc_actor_release(a);
}
