/*
 * An HTTP server for tests that need many requests in flight at once: it
 * holds every request until `hold` have arrived, then answers them all,
 * and every later one at once. That `hold` requests get an answer at all
 * proves that many were open together.
 */
#ifndef PC_TESTS_GATE_SERVER_H
#define PC_TESTS_GATE_SERVER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/http_server.h"
#include "test_util.h"

typedef struct gate {
	uint64_t *held;
	uint32_t nheld, hold;
	bool open;
	const char *headers; /* the answer's extra header lines, or NULL */
	const char *body;    /* the answer's body (200) */
	pc_actor_t *route;
	pc_http_server_t *srv;
} gate_t;

static int gate_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	gate_t *g = state;
	if (msg->type != PC_MSG_HTTP_REQUEST)
		return 0;
	const pc_http_request_msg_t *r = pc_msg_data(msg);
	if (g->open) {
		pc_http_respond(r->server, r->id, 200, g->headers, g->body, strlen(g->body));
		return 0;
	}
	g->held[g->nheld++] = r->id;
	if (g->nheld == g->hold) {
		g->open = true;
		for (uint32_t i = 0; i < g->nheld; i++)
			pc_http_respond(r->server, g->held[i], 200, g->headers, g->body, strlen(g->body));
	}
	return 0;
}

static const pc_behavior_t gate_b = {.name = "gate", .receive = gate_receive};

/* Serves `method` `path` on `io` (its actor on `rt`); returns the port. */
static inline uint16_t gate_start(gate_t *g, pc_runtime_t *rt, pc_io_t *io, const char *method,
				  const char *path, uint32_t hold, const char *headers, const char *body)
{
	*g = (gate_t){.held = calloc(hold, sizeof(uint64_t)), .hold = hold, .headers = headers, .body = body};
	cr_assert_not_null(g->held);
	cr_assert_eq(pc_spawn(rt, &gate_b, g, &g->route), 0);
	cr_assert_eq(pc_http_server_new(io, NULL, &g->srv), 0);
	cr_assert_eq(pc_http_server_route(g->srv, method, path, g->route), 0);
	cr_assert_eq(pc_http_server_start(g->srv), 0);
	return pc_http_server_port(g->srv);
}

/* Closes the server and stops its actor; `nheld` stays readable. */
static inline void gate_stop(gate_t *g, pc_runtime_t *rt)
{
	pc_http_server_free(g->srv);
	pc_actor_stop(g->route, PC_EXIT_NORMAL);
	pc_actor_release(g->route);
	quiesce(rt);
	free(g->held);
	g->held = NULL;
}

#endif
