/*
 * Lifecycle traces: with PINCER_TRACE naming a machine, every transition
 * of that machine's state writes one line
 *   trace <machine> <id> <from> -> <to> (<why>)
 * as the message of an info line of the agent's logger (standard error
 * when the agent has none). PINCER_TRACE is a comma list of machine
 * names (run, attempt, session, model_call, tool_call, tool, gwclient),
 * or "all"; names of machines that are not traced yet are accepted and
 * ignored. It is read once, when the agent is made (gwclient: when the
 * gateway is made).
 *
 * The I/O layer's connection machines ("http", "ws", "wsclient",
 * "h2stream", "h1client") sit below obs: io reads the same variable itself and
 * writes their lines in the same form to standard error, or to a sink registered with
 * pc_io_trace_set or pc_io_trace_claim (io/io.h); pc_trace_io_line is
 * that sink for a logger (the gateway claims it with its own).
 */
#ifndef PINCER_AGENTS_OBS_TRACE_H
#define PINCER_AGENTS_OBS_TRACE_H

#include "log.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The traced machines, as bits of a mask. */
typedef enum pc_trace_machine {
	PC_TRACE_RUN = 1u << 0,
	PC_TRACE_ATTEMPT = 1u << 1,
	PC_TRACE_SESSION = 1u << 2,
	PC_TRACE_MODEL_CALL = 1u << 3,
	PC_TRACE_TOOL_CALL = 1u << 4,
	PC_TRACE_TOOL = 1u << 5,
	PC_TRACE_GWCLIENT = 1u << 6, /* the gateway's WebSocket client (gateway/ws.c) */
} pc_trace_machine_t;

#define PC_TRACE_ALL 0xffffffffu

/* The mask a PINCER_TRACE value asks for (NULL or "": 0). */
unsigned pc_trace_parse(const char *spec);

/* Writes one transition line to `lg` (NULL: standard error). `why` may be
 * NULL. */
void pc_trace_transition(pc_log_t *lg, const char *machine, const char *id, const char *from, const char *to,
			 const char *why);

/* A pc_io_trace_fn (io/io.h): writes one io trace line, already in the
 * form above, as the message of an info line of the logger `lg`. */
void pc_trace_io_line(void *lg, const char *line);

#ifdef __cplusplus
}
#endif
#endif
