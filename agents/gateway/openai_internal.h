/*
 * The OpenAI-compatible endpoint's insides, shared by its route actor
 * (openai.c) and its completion actors (openai_completion.c). Private to
 * agents/gateway/.
 */
#ifndef PINCER_AGENTS_GATEWAY_OPENAI_INTERNAL_H
#define PINCER_AGENTS_GATEWAY_OPENAI_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/timer.h"
#include "io/io.h"
#include "io/store/store.h"
#include "http_util_internal.h"

enum {
	MSG_START = PC_MSG_TYPE_SYSTEM + 0x2A00, /* a completion's first message */
	MSG_EVENTS,                              /* its subscription has events */
	MSG_GONE,                                /* u64 request id: the client left */
	MSG_DONE,                                /* u64 request id: a completion ended */
	MSG_KEEPALIVE,                           /* a stream's keep-alive timer */
};

#define MAX_BODY ((size_t)20 << 20) /* OpenClaw's DEFAULT_OPENAI_CHAT_COMPLETIONS_BODY_BYTES */
#define AGENT_ID_MAX 64u
#define THE_AGENT "main"            /* the one agent this gateway serves */
#define SESSION_KEY_MAX 255u        /* the store's and the agent's bound */
#define IDEM_KEY_MAX PC_STORE_NAME_MAX /* the store's bound for a key */
#define EVENT_BATCH 64u
#define SUB_CAPACITY 1024u
#define STORED_RUN_FOLLOW_MS ((uint64_t)3600 * 1000) /* a repeat follows another process's run */

struct pc__gw_openai {
	pc_gateway_t *g;
	uint32_t live; /* completion actors not yet stopped (atomic) */
	uint64_t http[PC__GW_OA_ROUTES][PC__GW_CODES];
	uint64_t runs[2];
	uint64_t gone;
};

/* {"error":{"message","type","param","code"}} plus its status and headers. */
typedef struct oa_err {
	int status;
	const char *param;  /* NULL: null */
	const char *code;   /* NULL: null */
	const char *allow;  /* 405: the Allow header's value */
	const char *type;   /* NULL: by the status (invalid_request_error, server_error) */
	uint64_t retry_after_ms; /* 429, 503: the Retry-After header's value */
	bool no_retry;      /* a run ended this way, or the key was reused: the
			     * same call again would not fare better */
	char message[640];  /* room for a provider's message (512 bytes at most) */
	char code_buf[48];  /* a code made on the fly (`code` points here) */
} oa_err_t;

typedef struct chat_req {
	char *message;     /* the last user message's text */
	char *system;      /* system and developer texts, joined; or NULL */
	char *model;       /* the request's `model`, echoed in every answer */
	char *run_model;   /* "provider/model" for the run, or NULL */
	char *session_key;
	char *thinking;    /* reasoning_effort, as the run's thinking level; or NULL */
	char *idem_key;    /* the Idempotency-Key header, or NULL */
	bool stream, include_usage;
	/* x-request-id of every answer (the client's, or made here): for the
	 * logs to name the request by too */
	char request_id[PC__GW_REQUEST_ID_MAX + 1];
} chat_req_t;

typedef struct completion {
	struct pc__gw_openai *oa;
	pc_gateway_t *g;
	pc_actor_t *route;  /* a reference: told when this completion ends */
	uint64_t id;        /* the HTTP request */
	chat_req_t req;
	pc_event_sub_t *sub;
	int64_t created;    /* seconds, for every answer's `created` */
	bool accepted;      /* run_id is known */
	bool repeat;        /* the key named an earlier run: this answers for it */
	bool streaming;     /* the SSE head went out */
	bool sent_text;     /* some content went out */
	bool finished;
	/* The answer's text as the run's events carry it, the same for a plain
	 * and a streamed answer: the current model call's text is the run's
	 * shared text, as the latest of its events (`call`, retained) shows it,
	 * of which call_sent bytes went out; `before` holds the texts of the
	 * earlier calls (those a tool call followed), joined by blank lines. */
	pc_event_t *call;
	size_t call_sent;
	pc__buf_t before;
	pc_timer_t keepalive;   /* a stream's keep-alive timer, 0: none */
	uint64_t last_write_ms; /* when the stream last wrote (pc_runtime_now_ms) */
	char run_id[PC_RUN_ID_MAX + 1];
	char answer_id[PC_RUN_ID_MAX + 16];
	uint64_t store_corr; /* a repeat of a run only the store still holds */
	int store_status;    /* its pc_store_run_status_t, once read */
	char store_code[PC_STORE_CODE_MAX + 1];
} completion_t;

void pc__oa_answer_error(struct pc__gw_openai *oa, int route, uint64_t id, const char *rid, const oa_err_t *e);
void pc__oa_count_answer(struct pc__gw_openai *oa, int route, int status);
/* The text of a message's content: a string, or its text parts joined by
 * newlines (OpenAI "text" parts, and Responses-style "input_text"). */
void pc__oa_content_text(const cJSON *content, pc__buf_t *out);
void pc__oa_chat_req_free(chat_req_t *r);
/* Every answer names its request (`rid`, x-request-id) before `extra`. */
int pc__oa_answer_json(struct pc__gw_openai *oa, int route, uint64_t id, const char *rid, int status,
		       const char *extra, const cJSON *body);
cJSON *pc__oa_error_json(const oa_err_t *e);
/* Fills *e; returns false so that checks read `return pc__oa_fail(...)`. */
bool pc__oa_fail(oa_err_t *e, int status, const char *param, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* The completion actor: one chat request while its run goes. */
extern const pc_behavior_t pc__oa_completion_behavior;

/* openai_forward.c: sends chat request q (parsed as cr) on to the cluster
 * node its session prefers, relaying the answer. 0: a proxy took it over;
 * PC_ENOTFOUND: this node serves it; else *e says why it cannot go. */
int pc__oa_forward(pc_ctx_t *ctx, struct pc__gw_openai *oa, pc_http_handoffs_t *h, const pc_http_request_msg_t *q,
		   const chat_req_t *cr, oa_err_t *e);

#endif
