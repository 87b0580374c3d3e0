/*
 * The event layer (spec §5.1, §5.2, §5.9): every run has a bus; whatever
 * the run does is published on it as an event with a per-run sequence
 * number; subscribers read events through bounded subscriptions.
 *
 * Events. A pc_event_t is immutable and reference counted, so one event
 * fans out to any number of subscribers without copies. Its data is a JSON
 * object as text (the spec's payload for that stream).
 *
 * Streamed text. The spec's assistant and thinking payloads carry both the
 * delta and the message's text so far; rebuilding that text for every
 * delta costs the square of a long reply. So the bus keeps each stream's
 * text once per run, append-only, and a delta event (pc_event_bus_emit_delta)
 * carries only {"delta"} as data plus a view of the shared text: `text`
 * (the message so far) of which the last `delta_len` bytes are its delta.
 * A reader that wants deltas takes them from the view without parsing; one
 * that wants the cumulative text (the gateway's agent events) reads it from
 * the view when it writes, as often as it chooses.
 *
 * Buses. One per run, made when the run is accepted (so a client can
 * subscribe before the run starts: nothing is missed, §2.4). Seq starts at
 * 1 and grows by one per event. Exactly one terminal event per run (the
 * lifecycle end or error, §5.9): after it the bus refuses further events.
 * A bus may forward to its session's hub, where session subscribers are.
 *
 * Subscriptions. A bounded buffer between one producer side (any number of
 * buses) and one reader. When the buffer is full the oldest droppable
 * event (an assistant or thinking delta) goes first; other events are
 * never dropped for a delta, and the terminal event is never dropped at
 * all, so a slow reader loses only intermediate text and learns how much
 * from the drop counter and the gap in seq. A reader is told that events
 * are waiting either by a message to an actor (one per empty-to-non-empty
 * transition, so a busy reader is not flooded) or by waiting on the
 * subscription from a plain thread.
 *
 * Threads: every function may be called from any thread.
 */
#ifndef PINCER_AGENTS_EVENTS_EVENT_BUS_H
#define PINCER_AGENTS_EVENTS_EVENT_BUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/actor.h"
#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_event_stream {
	PC_EVENT_LIFECYCLE = 0, /* {phase:start|end|error, ...} */
	PC_EVENT_ASSISTANT,     /* {text, delta} */
	PC_EVENT_THINKING,      /* {text, delta} */
	PC_EVENT_TOOL,          /* {phase:start|update|result, name, toolCallId, ...} */
	PC_EVENT_COMPACTION,    /* {phase:start|end, willRetry?, completed?} */
	PC_EVENT_LANE,          /* {phase:wait|granted, queuedAhead, waitMs} */
	PC_EVENT_ERROR,         /* {reason, ...} */
	PC_EVENT_DIAGNOSTIC,    /* {type: session.long_running|stalled|stuck, ageMs, ...} (§9.2) */
	PC_EVENT_STREAM_COUNT
} pc_event_stream_t;

/* "lifecycle", "assistant", "thinking", "tool", "compaction", "lane",
 * "error", "diagnostic"; "unknown" out of range. Static. */
const char *pc_event_stream_name(pc_event_stream_t s);

typedef struct pc_event {
	const char *run_id;
	const char *session_key; /* may be "" */
	uint64_t seq;            /* 1, 2, 3, ... per run */
	int64_t ts_ms;           /* wall clock, ms since the epoch */
	pc_event_stream_t stream;
	const char *data;        /* a JSON object, NUL-terminated */
	size_t data_len;
	bool droppable;          /* a delta: may be dropped for a slow reader */
	bool terminal;           /* the run's last event */
	/* Events of pc_event_bus_emit_delta (NULL and 0 on the others): the
	 * message so far, text[0..text_len), not NUL-terminated, shared with
	 * the run's other events and never changed while this one lives. Its
	 * last delta_len bytes are this event's delta. `message` counts the
	 * stream's messages in the run (pc_event_bus_text_reset): a text
	 * continues the one of an earlier event only with the same number. */
	const char *text;
	size_t text_len;
	size_t delta_len;
	uint32_t message;
} pc_event_t;

/* An event holds its strings; retain/release count references. The bus
 * hands out events with one reference per receiver. NULL is a no-op. */
pc_event_t *pc_event_retain(pc_event_t *e);
void pc_event_release(pc_event_t *e);

/* The wire form of §5.1: {"runId","seq","stream","ts","data":{...},
 * "sessionKey"?} (sessionKey left out when empty). malloc'd, the caller
 * frees. PC_EINVAL, PC_ENOMEM. */
int pc_event_to_json(const pc_event_t *e, char **out, size_t *len);

/* For a delta event, the wire form of §5.1 whose data is the message so
 * far and, as its delta, text[from..text_len): a reader that merged several
 * deltas passes where its last frame ended (0: the whole message). Built
 * from the shared text at the call, escaped once. malloc'd, the caller
 * frees. PC_EINVAL (not a delta event, from > text_len), PC_ENOMEM. */
int pc_event_delta_to_json(const pc_event_t *e, size_t from, char **out, size_t *len);

/* ---- subscriptions ---- */

typedef struct pc_event_sub pc_event_sub_t;

#define PC_EVENT_SUB_DEFAULT_CAPACITY 1024u

typedef struct pc_event_sub_config {
	size_t capacity;     /* events buffered before dropping; 0: the default */
	pc_actor_t *notify;  /* may be NULL: readers wait instead. Retained until
			      * the subscription is freed, so free it before
			      * the actor's runtime. */
	uint32_t notify_type; /* the message type sent to `notify` (payload: tag, u64) */
	uint64_t tag;
} pc_event_sub_config_t;

/* A new subscription, attached to nothing yet. The caller owns one
 * reference (pc_event_sub_release); buses and hubs it is attached to hold
 * their own. PC_EINVAL, PC_ENOMEM. */
int pc_event_sub_new(const pc_event_sub_config_t *cfg, pc_event_sub_t **out);
pc_event_sub_t *pc_event_sub_retain(pc_event_sub_t *s);
void pc_event_sub_release(pc_event_sub_t *s);

/* Moves up to `max` buffered events, oldest first, to out[]; each carries
 * one reference for the caller. Returns how many (0 when empty). After a
 * take that leaves the buffer empty, the next event notifies again (so an
 * actor takes until the buffer is empty; a notification may also find it
 * already emptied by an earlier take, which is harmless). */
size_t pc_event_sub_take(pc_event_sub_t *s, pc_event_t **out, size_t max);

/* From a plain thread: waits until an event is buffered (0), the
 * subscription is closed and empty (PC_ESTOPPED), or `timeout_ms` passed
 * (PC_ETIMEDOUT; < 0 waits for ever). */
int pc_event_sub_wait(pc_event_sub_t *s, int64_t timeout_ms);

/* Closes the subscription: nothing more is buffered; waiters wake. What is
 * buffered can still be taken. Idempotent. */
void pc_event_sub_close(pc_event_sub_t *s);
bool pc_event_sub_closed(const pc_event_sub_t *s);

/* Events dropped for this reader so far. */
uint64_t pc_event_sub_dropped(const pc_event_sub_t *s);

/* ---- session hubs ---- */

typedef struct pc_event_hub pc_event_hub_t;

/* A hub for one session: subscriptions attached to it see the events of
 * every run of the session that is published through a bus made with it.
 * Reference counted; the caller owns one. */
int pc_event_hub_new(const char *session_key, pc_event_hub_t **out);
pc_event_hub_t *pc_event_hub_retain(pc_event_hub_t *h);
void pc_event_hub_release(pc_event_hub_t *h);
/* Attaching twice is a no-op. PC_EINVAL, PC_ENOMEM. */
int pc_event_hub_attach(pc_event_hub_t *h, pc_event_sub_t *s);
void pc_event_hub_detach(pc_event_hub_t *h, pc_event_sub_t *s);
size_t pc_event_hub_subscribers(const pc_event_hub_t *h);

/* ---- buses ---- */

typedef struct pc_event_bus pc_event_bus_t;

/* A bus for run `run_id` of session `session_key` (may be NULL), also
 * publishing to `hub` (may be NULL; retained). The caller owns one
 * reference. PC_EINVAL, PC_ENOMEM. */
int pc_event_bus_new(const char *run_id, const char *session_key, pc_event_hub_t *hub, pc_event_bus_t **out);
pc_event_bus_t *pc_event_bus_retain(pc_event_bus_t *b);
void pc_event_bus_release(pc_event_bus_t *b);

/* Subscribes `s` to the run. If the run has already ended, its terminal
 * event is delivered to `s` at once (a late subscriber still learns the
 * outcome). If `close_on_terminal`, `s` is closed after the terminal
 * event. Attaching twice only updates `close_on_terminal`; a subscription
 * attached both here and to the bus's hub gets each event once. */
int pc_event_bus_attach(pc_event_bus_t *b, pc_event_sub_t *s, bool close_on_terminal);
void pc_event_bus_detach(pc_event_bus_t *b, pc_event_sub_t *s);

/*
 * Publishes one event: `data` is a JSON object's text (copied; NULL: {};
 * `len` 0: up to its NUL; an embedded NUL is PC_EINVAL). `droppable` marks a
 * delta (ignored for a terminal event, which is never dropped). `terminal` ends the bus: later emits return
 * PC_ESTATE. The seq assigned is written to *seq (may be NULL). PC_EINVAL,
 * PC_ENOMEM. Cheap with no subscriber (nothing is allocated then).
 */
int pc_event_bus_emit(pc_event_bus_t *b, pc_event_stream_t stream, const char *data, size_t len,
		      bool droppable, bool terminal, uint64_t *seq);

/*
 * Publishes `len` bytes of new text (NUL-free; `len` 0: up to the NUL) of
 * the run's assistant or thinking stream: appended to the run's text for
 * that stream, then published as a droppable event whose data is
 * {"delta":...} and whose view (text, text_len, delta_len, message) is the
 * message so far. The text is kept even when nobody listens, so a later
 * subscriber reads it whole; only the event is skipped then. A
 * subscription attached to the bus itself gets, as its first event of the
 * stream, one whose data also has "text" (the message so far), so a reader
 * that joins a running run can catch up from the data alone. PC_EINVAL
 * (another stream, an empty or NUL-holding delta), PC_ESTATE (ended),
 * PC_ENOMEM.
 */
int pc_event_bus_emit_delta(pc_event_bus_t *b, pc_event_stream_t stream, const char *delta, size_t len,
			    uint64_t *seq);

/* The stream's next delta starts a new message (a new model call: §5.3's
 * reset point); its text starts empty. A no-op on an empty message. */
void pc_event_bus_text_reset(pc_event_bus_t *b, pc_event_stream_t stream);

/* Whether anyone is subscribed to the run, directly or through its hub:
 * a publisher skips building a delta nobody would receive. A subscriber
 * attaching just after the answer misses that delta, as it would had it
 * attached a moment later. */
bool pc_event_bus_listened(const pc_event_bus_t *b);

/* The last seq assigned (0: none yet) and whether the terminal event went out. */
uint64_t pc_event_bus_seq(const pc_event_bus_t *b);
bool pc_event_bus_ended(const pc_event_bus_t *b);
const char *pc_event_bus_run_id(const pc_event_bus_t *b);

#ifdef __cplusplus
}
#endif
#endif
