/*
 * The mock LLM's insides, shared by its files: a step as parsed
 * (step.c), the sticky byte buffer and small helpers (mock_util.c), the
 * request's text (request.c), an answer being built in either wire format
 * (answer.c), and the plans made of it (plan.c). The scenarios and their
 * cursors are scenario.c's alone. Not for use outside agents/mock/.
 */
#ifndef PINCER_AGENTS_MOCK_MOCK_INTERNAL_H
#define PINCER_AGENTS_MOCK_MOCK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "scenario.h"

/* ---- steps (step.c) ---- */

enum {
	K_TEXT,
	K_TOOLS,
	K_REASONING,
	K_EMPTY,
	K_ERROR,
	K_OVERFLOW,
	K_STALL,
	K_COUNT
};

static const char *const kind_names[K_COUNT] = {
	"text", "tool_calls", "reasoning", "empty", "error", "context_overflow", "stall",
};

enum { F_NONE, F_DISCONNECT, F_STALL, F_BAD_JSON, F_TRUNCATED, F_STREAM_ERROR };

/* Usage fields; -1 in a step means "computed". */
enum { U_INPUT, U_OUTPUT, U_CACHE_READ, U_CACHE_WRITE, U_REASONING, U_COUNT };
static const char *const usage_names[U_COUNT] = {
	"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
};

typedef struct tool {
	char *id;   /* NULL: generated */
	char *name;
	char *args; /* the arguments as sent: JSON text, or any string */
} tool_t;

struct pc_mock_step {
	int kind;
	char *text;      /* NULL: none (kind text: echo the user) */
	char *reasoning; /* NULL: none */
	tool_t *tools;
	size_t tool_count;
	uint32_t chunks;     /* pieces per text; 0: one per word */
	uint32_t arg_chunks; /* pieces per tool's arguments */
	uint32_t ttft_ms;
	uint32_t delay_ms;
	uint32_t burst;      /* pieces per delay_ms; 0: one */
	int64_t usage[U_COUNT];
	const char *finish; /* "stop", "length", "tool_calls", "content_filter"; NULL: by content */
	/* error / context_overflow */
	int status;
	char *message;
	char *etype;
	char *code;
	int64_t retry_after; /* seconds; -1: no header */
	int64_t max_tokens;  /* -1: the API's default */
	int64_t prompt_tokens;
	/* stall kind */
	uint32_t ms; /* 0: for ever */
	bool before_headers;
	/* delivery faults */
	int fault;
	bool fault_at_set;
	uint32_t fault_at;
	uint32_t stall_ms; /* F_STALL: 0 for ever */
	char *headers;     /* extra response header lines */
	char *json;        /* the step as given */
};

/* The longest wait a step may ask for: a day (longer is surely a typo). */
#define PC__MOCK_MAX_MS 86400000u

/* The step used when nothing scripts the request: the echo. */
extern const pc_mock_step_t pc__mock_echo_step;

/* Where a parse is, for messages: "steps[2]" + "." + key. */
typedef struct where {
	const char *path; /* "" at the top */
	char *err;
	size_t cap;
} where_t;

/* Parses one step at `w` (a path for messages). */
int pc__mock_step_parse(const cJSON *j, const where_t *w, pc_mock_step_t **out);

/* ---- scenarios (scenario.c) ---- */

/* The models `sc` lists (*count 0 when none, or sc NULL). */
const char *const *pc__mock_scenario_models(const pc_mock_scenario_t *sc, size_t *count);

/* ---- small helpers (mock_util.c) ---- */

/* Appends `s` (n bytes) to `b` (io/buf.h's buffer, in which the mock
 * builds its text) as a JSON string literal, escaped as cJSON prints it. */
void pc__mock_buf_json_str(pc__buf_t *b, const char *s, size_t n);
char *pc__mock_dup_str(const char *s);
int pc__mock_fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool pc__mock_is_space(char c);
void pc__mock_make_id(char *out, size_t cap, const char *prefix, size_t n, uint64_t seq, uint64_t salt);
uint64_t pc__mock_word_count(const char *s, size_t n);

/* ---- the request (request.c) ---- */

int pc__mock_echo_text(const cJSON *body, char **out);
uint64_t pc__mock_input_words(const cJSON *body);

/* ---- the answer (answer.c) ---- */

/* Cuts a string into `chunks` pieces of (nearly) equal code point count,
 * or with chunks 0 into words, each with the whitespace before it (the
 * trailing whitespace joins the last word). */
typedef struct split {
	const char *s;
	size_t n;
	size_t pos;
	uint32_t chunks;
	uint32_t i;
	uint64_t cps;    /* code points in s */
	uint64_t cp_pos; /* code points before pos */
	size_t last_word; /* index of the last non-space byte */
} split_t;

typedef struct event {
	uint32_t wait_ms;
	size_t off;
	size_t len;
} event_t;

/* A timed group of events: the k-th piece (a fragment of text, reasoning
 * or arguments, or a tool call's header) and what goes out with it.
 * Faults count pieces, so "after 2" means the same in both APIs. */
typedef struct group {
	size_t start; /* its first event */
	size_t piece; /* the event carrying the piece; NO_PIECE for the finish */
} group_t;

#define NO_PIECE SIZE_MAX

/* An answer being built: the resolved content, the ids, and the SSE
 * events written so far. */
typedef struct answer {
	pc_mock_api_t api;
	const pc_mock_step_t *st;
	const char *text;      /* NULL: no text */
	const char *reasoning; /* NULL: no reasoning */
	char *echo;            /* owned: the echoed text */
	const char *model;
	uint64_t seq;
	int64_t created;
	bool include_usage;
	bool started;          /* a timed event has been written */
	size_t finish_ev;      /* the finish chunk / message_delta */
	int64_t usage[U_COUNT];
	const char *finish;    /* in the API's vocabulary */
	char id[48];
	char req_id[48];
	char **tool_ids;
	pc__buf_t head;            /* OpenAI: a chunk's JSON up to "choices": */
	pc__buf_t out;
	event_t *ev;
	size_t ev_count;
	size_t ev_cap;
	group_t *groups;
	size_t group_count;
	size_t group_cap;
	uint32_t since_wait;   /* pieces since the last delay_ms */
	int err;
} answer_t;

cJSON *pc__mock_anthropic_message(answer_t *a);
void pc__mock_anthropic_stream(answer_t *a);
void pc__mock_ev_json(answer_t *a, uint32_t wait_ms, const char *name, cJSON *obj);
cJSON *pc__mock_openai_message(answer_t *a);
void pc__mock_openai_stream(answer_t *a);
uint64_t pc__mock_piece_count(const char *s, uint32_t chunks);
cJSON *pc__mock_push_obj(cJSON *arr);

#endif
