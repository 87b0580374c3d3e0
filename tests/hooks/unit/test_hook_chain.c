/*
 * Hook chains: every merge rule of hooks.h, terminal decisions (asserted
 * with counters on the handlers that must not run), failures and timeouts
 * (fail closed where the rule says so, and the DONE comes at the timeout,
 * not when the slow handler finally returns), observation hooks, exactly
 * one DONE per chain, and a storm of chains from many actors.
 *
 * Handlers are one configurable function (spec_t): it answers a fixed JSON
 * text, or fails, or sleeps first, and records what it saw. An "owner"
 * actor records every DONE; the test thread polls with AWAIT.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "agents/hooks/hooks.h"
#include "test_util.h"

/* ---- handlers ------------------------------------------------------------ */

typedef struct spec {
	const char *id;
	const char *result; /* the answer, JSON text; NULL: no result */
	int rc;             /* returned after answering */
	unsigned sleep_ms;  /* before answering */
	const char *watch;  /* an event field to record in `seen` */
	uint32_t calls;     /* atomic */
	char seen[512];     /* under spec_lock */
} spec_t;

static pthread_mutex_t spec_lock = PTHREAD_MUTEX_INITIALIZER;

static int handler(void *user, const pc_hook_call_t *call, cJSON **result)
{
	spec_t *s = user;
	INC(s->calls);
	pthread_mutex_lock(&spec_lock);
	if (s->watch) {
		char *text = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(call->event, s->watch));
		snprintf(s->seen, sizeof(s->seen), "%s", text ? text : "(none)");
		cJSON_free(text);
	}
	pthread_mutex_unlock(&spec_lock);
	if (s->sleep_ms)
		sleep_ms(s->sleep_ms);
	if (s->result && !(*result = cJSON_Parse(s->result)))
		return PC_ENOMEM;
	return s->rc;
}

static uint32_t calls(spec_t *s)
{
	return LOAD(s->calls);
}

static void seen_of(spec_t *s, char *out, size_t n)
{
	pthread_mutex_lock(&spec_lock);
	snprintf(out, n, "%s", s->seen);
	pthread_mutex_unlock(&spec_lock);
}

/* ---- the owner and the reports ------------------------------------------------ */

#define MAX_TAGS 2048u

typedef struct rec {
	uint64_t tag;
	int status;
	bool blocked;
	uint32_t ran, failed, timed_out;
	pc_hook_point_t point;
	uint64_t at_ms;
	char *reason;
	char *result;
} rec_t;

typedef struct seen {
	pthread_mutex_t lock;
	uint32_t n;
	rec_t last;
	uint32_t per_tag[MAX_TAGS];
	uint32_t bad;
} seen_t;

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	seen_t *s = state;
	if (msg->type != PC_MSG_HOOK_DONE)
		return 0;
	const pc_hook_done_msg_t *d = pc_msg_cdata(msg);
	pthread_mutex_lock(&s->lock);
	if (!d->result || !d->reason || strlen(d->result) != d->result_len)
		s->bad++;
	free(s->last.reason);
	free(s->last.result);
	s->last = (rec_t){
		.tag = d->tag,
		.status = d->status,
		.blocked = d->blocked,
		.ran = d->ran,
		.failed = d->failed,
		.timed_out = d->timed_out,
		.point = d->point,
		.at_ms = now_ms(),
		.reason = strdup(d->reason ? d->reason : ""),
		.result = strdup(d->result ? d->result : ""),
	};
	if (d->tag < MAX_TAGS)
		s->per_tag[d->tag]++;
	s->n++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static const pc_behavior_t owner_b = {.name = "owner", .receive = owner_receive};

typedef struct reports {
	pthread_mutex_t lock;
	uint32_t kind[4];
	char last[512];
} reports_t;

static void on_report(void *user, const pc_hook_report_t *r)
{
	reports_t *rep = user;
	pthread_mutex_lock(&rep->lock);
	if ((unsigned)r->kind < 4)
		rep->kind[r->kind]++;
	snprintf(rep->last, sizeof(rep->last), "%s", r->message);
	pthread_mutex_unlock(&rep->lock);
}

static uint32_t reported(reports_t *rep, pc_hook_report_kind_t k)
{
	pthread_mutex_lock(&rep->lock);
	uint32_t n = rep->kind[k];
	pthread_mutex_unlock(&rep->lock);
	return n;
}

/* ---- fixture ----------------------------------------------------------------------- */

typedef struct fx {
	pc_runtime_t *rt;
	pc_hooks_t *h;
	seen_t seen;
	reports_t rep;
	pc_actor_t *owner;
} fx_t;

static fx_t *fx_keep; /* keeps the fixture reachable for LeakSanitizer */

static fx_t *fx_new(void)
{
	fx_t *f = calloc(1, sizeof(*f));
	cr_assert_not_null(f);
	fx_keep = f;
	pthread_mutex_init(&f->seen.lock, NULL);
	pthread_mutex_init(&f->rep.lock, NULL);
	f->rt = start_rt(2);
	cr_assert_eq(pc_hooks_new(&f->h), 0);
	pc_hooks_set_report(f->h, on_report, &f->rep);
	cr_assert_eq(pc_spawn(f->rt, &owner_b, &f->seen, &f->owner), 0);
	return f;
}

/* A fresh, empty registry (the old one is sealed once it has run). */
static void fx_new_hooks(fx_t *f)
{
	pc_hooks_free(f->h);
	cr_assert_eq(pc_hooks_new(&f->h), 0);
	pc_hooks_set_report(f->h, on_report, &f->rep);
}

static void fx_free(fx_t *f)
{
	pc_actor_stop(f->owner, PC_EXIT_NORMAL);
	pc_actor_release(f->owner);
	pc_runtime_free(f->rt);
	pc_hooks_free(f->h);
	free(f->seen.last.reason);
	free(f->seen.last.result);
	pthread_mutex_destroy(&f->seen.lock);
	pthread_mutex_destroy(&f->rep.lock);
	free(f);
	fx_keep = NULL;
	ASSERT_NO_LEAKS();
}

static void hook_add(fx_t *f, pc_hook_point_t p, int priority, spec_t *s, uint32_t timeout_ms)
{
	pc_hook_def_t d = {.point = p, .priority = priority, .timeout_ms = timeout_ms, .fn = handler, .user = s,
			   .owner = s->id};
	cr_assert_eq(pc_hooks_register(f->h, &d), 0, "register %s", s->id);
}

static uint32_t done_count(fx_t *f)
{
	pthread_mutex_lock(&f->seen.lock);
	uint32_t n = f->seen.n;
	pthread_mutex_unlock(&f->seen.lock);
	return n;
}

/* A copy of the latest DONE; the caller frees it with rec_free. */
static rec_t last_done(fx_t *f)
{
	pthread_mutex_lock(&f->seen.lock);
	rec_t r = f->seen.last;
	r.reason = strdup(r.reason ? r.reason : "");
	r.result = strdup(r.result ? r.result : "");
	pthread_mutex_unlock(&f->seen.lock);
	return r;
}

static void rec_free(rec_t *r)
{
	free(r->reason);
	free(r->result);
}

static cJSON *json(const char *text)
{
	cJSON *j = cJSON_Parse(text);
	cr_assert_not_null(j, "bad JSON in the test: %s", text);
	return j;
}

/* Runs the chain of `p` on `event` and waits for its one DONE. */
static rec_t run(fx_t *f, pc_hook_point_t p, const char *event, const char *match)
{
	uint32_t before = done_count(f);
	cr_assert_eq(pc_hooks_run(f->rt, f->h, p, json(event), NULL, match, f->owner, 7), 0);
	AWAIT(done_count(f) == before + 1, 10000);
	rec_t r = last_done(f);
	cr_assert_eq(r.tag, 7u);
	cr_assert_eq(r.point, p);
	cr_assert_eq(r.status, 0);
	return r;
}

/* The result's field `key`, printed ("" when absent); caller frees. */
static char *result_field(const rec_t *r, const char *key)
{
	cJSON *j = cJSON_Parse(r->result);
	cr_assert(cJSON_IsObject(j), "result is not an object: %s", r->result);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
	char *text = v ? cJSON_PrintUnformatted(v) : strdup("");
	cJSON_Delete(j);
	return text;
}

#define ASSERT_FIELD(r, key, want)                                                                  \
	do {                                                                                        \
		char *got_ = result_field(&(r), (key));                                            \
		cr_assert_str_eq(got_, (want), "%s: %s (result %s)", (key), got_, (r).result);     \
		free(got_);                                                                         \
	} while (0)

#define TOOL_EVENT "{\"toolName\":\"exec\",\"params\":{\"a\":1,\"b\":2}}"

/* ---- before_tool_call ------------------------------------------------------------------ */

Test(hook_chain, tool_block_is_terminal)
{
	fx_t *f = fx_new();
	spec_t pass = {.id = "pass", .result = "{\"block\":false}"};
	spec_t blocker = {.id = "blocker", .result = "{\"block\":true,\"blockReason\":\"not today\"}"};
	spec_t after = {.id = "after", .result = "{\"block\":false}"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &after, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 10, &blocker, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 20, &pass, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, "not today");
	cr_assert_eq(r.ran, 2u);
	cr_assert_eq(r.failed + r.timed_out, 0u);
	ASSERT_FIELD(r, "block", "true");
	ASSERT_FIELD(r, "blockReason", "\"not today\"");
	ASSERT_FIELD(r, "params", "");
	rec_free(&r);
	sleep_ms(50); /* a lower-priority handler would have run by now */
	cr_assert_eq(calls(&after), 0u);
	cr_assert_eq(calls(&pass), 1u);
	fx_free(f);
}

Test(hook_chain, tool_block_default_reason_and_latest_reason)
{
	fx_t *f = fx_new();
	spec_t bare = {.id = "bare", .result = "{\"block\":true}"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &bare, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, PC_HOOK_REASON_TOOL_BLOCKED);
	rec_free(&r);

	/* A reason given earlier without a block is the one a bare block uses. */
	fx_new_hooks(f);
	spec_t why = {.id = "why", .result = "{\"blockReason\":\"policy 7\"}"};
	spec_t bare2 = {.id = "bare2", .result = "{\"block\":true}"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 5, &why, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &bare2, 0);
	r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, "policy 7");
	rec_free(&r);
	fx_free(f);
}

/* block:false is no decision: before a block it changes nothing, and
 * alone it leaves the call allowed. */
Test(hook_chain, tool_block_false_never_clears)
{
	fx_t *f = fx_new();
	spec_t no1 = {.id = "no1", .result = "{\"block\":false}"};
	spec_t yes = {.id = "yes", .result = "{\"block\":true,\"blockReason\":\"r\"}"};
	spec_t no2 = {.id = "no2", .result = "{\"block\":false}"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 3, &no1, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 2, &yes, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 1, &no2, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, "r");
	rec_free(&r);
	cr_assert_eq(calls(&no2), 0u);

	fx_new_hooks(f);
	spec_t only_no = {.id = "only_no", .result = "{\"block\":false}"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &only_no, 0);
	r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert_not(r.blocked);
	cr_assert_str_eq(r.reason, "");
	cr_assert_str_eq(r.result, "{}");
	rec_free(&r);
	fx_free(f);
}

Test(hook_chain, tool_params_shallow_merge_seen_by_later_handlers)
{
	fx_t *f = fx_new();
	spec_t first = {.id = "first", .result = "{\"params\":{\"b\":3,\"c\":{\"deep\":true}}}", .watch = "params"};
	spec_t second = {.id = "second", .result = "{\"params\":{\"a\":9}}", .watch = "params"};
	spec_t third = {.id = "third", .watch = "params"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 2, &first, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 1, &second, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &third, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert_not(r.blocked);
	ASSERT_FIELD(r, "params", "{\"a\":9,\"b\":3,\"c\":{\"deep\":true}}");
	ASSERT_FIELD(r, "block", "");
	rec_free(&r);
	char s[512];
	seen_of(&first, s, sizeof(s));
	cr_assert_str_eq(s, "{\"a\":1,\"b\":2}");
	seen_of(&second, s, sizeof(s));
	cr_assert_str_eq(s, "{\"a\":1,\"b\":3,\"c\":{\"deep\":true}}");
	seen_of(&third, s, sizeof(s));
	cr_assert_str_eq(s, "{\"a\":9,\"b\":3,\"c\":{\"deep\":true}}");
	fx_free(f);
}

/* An error and a malformed result both block the call (fail closed). */
Test(hook_chain, tool_fail_closed_on_error_and_malformed)
{
	fx_t *f = fx_new();
	spec_t broken = {.id = "broken", .rc = PC_EBUSY, .result = "{\"block\":false}"};
	spec_t after = {.id = "after"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 1, &broken, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &after, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, PC_HOOK_REASON_TOOL_HOOK_FAILED);
	cr_assert_eq(r.failed, 1u);
	cr_assert_eq(r.ran, 1u);
	rec_free(&r);
	cr_assert_eq(calls(&after), 0u);
	cr_assert_eq(reported(&f->rep, PC_HOOK_REPORT_FAILED), 1u);

	const char *bad[] = {"{\"block\":\"yes\"}", "[1,2]", "{\"params\":[1]}", "{\"blockReason\":5}", "\"text\""};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		fx_new_hooks(f);
		spec_t m = {.id = "malformed", .result = bad[i]};
		hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &m, 0);
		r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
		cr_assert(r.blocked, "%s", bad[i]);
		cr_assert_str_eq(r.reason, PC_HOOK_REASON_TOOL_HOOK_FAILED);
		cr_assert_eq(r.failed, 1u);
		rec_free(&r);
	}
	cr_assert_eq(reported(&f->rep, PC_HOOK_REPORT_MALFORMED), 5u);
	fx_free(f);
}

/* A handler that sleeps past its timeout blocks the call, and the DONE
 * comes at the timeout; its late answer is dropped. */
Test(hook_chain, tool_fail_closed_on_timeout)
{
	fx_t *f = fx_new();
	spec_t slow = {.id = "slow", .sleep_ms = 1000, .result = "{\"params\":{\"late\":true}}"};
	spec_t after = {.id = "after"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 1, &slow, 50);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &after, 0);
	uint64_t t0 = now_ms();
	rec_t r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	uint64_t took = r.at_ms - t0;
	cr_assert_geq(took, 50u);
	cr_assert_lt(took, 500u, "DONE after %llu ms", (unsigned long long)took);
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, PC_HOOK_REASON_TOOL_HOOK_FAILED);
	cr_assert_eq(r.timed_out, 1u);
	cr_assert_eq(r.failed, 0u);
	ASSERT_FIELD(r, "params", "");
	rec_free(&r);
	cr_assert_eq(reported(&f->rep, PC_HOOK_REPORT_TIMEOUT), 1u);
	/* The slow handler finishes; nothing more arrives. */
	AWAIT(stats(f->rt).blocking_done >= 1, 5000);
	sleep_ms(50);
	cr_assert_eq(done_count(f), 1u);
	cr_assert_eq(calls(&after), 0u);
	fx_free(f);
}

Test(hook_chain, tool_require_approval_without_route)
{
	fx_t *f = fx_new();
	spec_t ask = {.id = "ask", .result = "{\"requireApproval\":{\"title\":\"t\",\"description\":\"d\"}}"};
	spec_t after = {.id = "after", .result = "{\"params\":{\"x\":1}}"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 1, &ask, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &after, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, PC_HOOK_REASON_APPROVAL_UNAVAILABLE);
	cr_assert_eq(r.ran, 2u, "an approval request is not terminal");
	ASSERT_FIELD(r, "params", ""); /* params after the request change nothing */
	ASSERT_FIELD(r, "requireApproval", "{\"title\":\"t\",\"description\":\"d\"}");
	rec_free(&r);

	/* A lower-priority block still blocks first, with its own reason. */
	fx_new_hooks(f);
	spec_t ask2 = {.id = "ask2", .result = "{\"requireApproval\":{\"title\":\"t\"}}"};
	spec_t no = {.id = "no", .result = "{\"block\":true,\"blockReason\":\"denied by policy\"}"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 1, &ask2, 0);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &no, 0);
	r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, "denied by policy");
	rec_free(&r);
	fx_free(f);
}

/* ---- message_sending --------------------------------------------------------------------- */

Test(hook_chain, message_sending_rewrite_and_cancel)
{
	fx_t *f = fx_new();
	spec_t rewrite = {.id = "rewrite", .result = "{\"content\":\"hello B\"}", .watch = "content"};
	spec_t keep = {.id = "keep", .result = "{\"cancel\":false}", .watch = "content"};
	spec_t cancel = {.id = "cancel", .result = "{\"cancel\":true,\"cancelReason\":\"spam\"}"};
	spec_t after = {.id = "after", .result = "{\"content\":\"never\"}"};
	hook_add(f, PC_HOOK_MESSAGE_SENDING, 4, &rewrite, 0);
	hook_add(f, PC_HOOK_MESSAGE_SENDING, 3, &keep, 0);
	hook_add(f, PC_HOOK_MESSAGE_SENDING, 2, &cancel, 0);
	hook_add(f, PC_HOOK_MESSAGE_SENDING, 1, &after, 0);
	rec_t r = run(f, PC_HOOK_MESSAGE_SENDING, "{\"to\":\"u\",\"content\":\"hello A\"}", NULL);
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, "spam");
	ASSERT_FIELD(r, "content", "\"hello B\"");
	ASSERT_FIELD(r, "cancel", "true");
	rec_free(&r);
	char s[512];
	seen_of(&rewrite, s, sizeof(s));
	cr_assert_str_eq(s, "\"hello A\"");
	seen_of(&keep, s, sizeof(s));
	cr_assert_str_eq(s, "\"hello B\"");
	cr_assert_eq(calls(&after), 0u);
	fx_free(f);
}

/* cancel:false is a no-op and a failing handler is ignored. */
Test(hook_chain, message_sending_no_cancel_and_failures_ignored)
{
	fx_t *f = fx_new();
	spec_t broken = {.id = "broken", .rc = PC_EINVAL};
	spec_t nocancel = {.id = "nocancel", .result = "{\"cancel\":false,\"content\":\"v2\"}"};
	spec_t slow = {.id = "slow", .sleep_ms = 400, .result = "{\"cancel\":true}"};
	hook_add(f, PC_HOOK_MESSAGE_SENDING, 3, &broken, 0);
	hook_add(f, PC_HOOK_MESSAGE_SENDING, 2, &nocancel, 0);
	hook_add(f, PC_HOOK_MESSAGE_SENDING, 1, &slow, 30);
	rec_t r = run(f, PC_HOOK_MESSAGE_SENDING, "{\"content\":\"v1\"}", NULL);
	cr_assert_not(r.blocked);
	cr_assert_eq(r.failed, 1u);
	cr_assert_eq(r.timed_out, 1u);
	ASSERT_FIELD(r, "content", "\"v2\"");
	ASSERT_FIELD(r, "cancel", "");
	rec_free(&r);
	fx_free(f);
}

/* ---- before_model_resolve --------------------------------------------------------------- */

Test(hook_chain, model_resolve_first_wins)
{
	fx_t *f = fx_new();
	spec_t broken = {.id = "broken", .rc = PC_ENOMEM};
	spec_t empty = {.id = "empty", .result = "{\"modelOverride\":\"\"}"};
	spec_t m1 = {.id = "m1", .result = "{\"modelOverride\":\"m1\"}"};
	spec_t both = {.id = "both", .result = "{\"providerOverride\":\"p2\",\"modelOverride\":\"m2\"}"};
	spec_t bad = {.id = "bad", .result = "{\"providerOverride\":42}"};
	hook_add(f, PC_HOOK_BEFORE_MODEL_RESOLVE, 9, &broken, 0);
	hook_add(f, PC_HOOK_BEFORE_MODEL_RESOLVE, 8, &empty, 0);
	hook_add(f, PC_HOOK_BEFORE_MODEL_RESOLVE, 5, &m1, 0);
	hook_add(f, PC_HOOK_BEFORE_MODEL_RESOLVE, 5, &both, 0);
	hook_add(f, PC_HOOK_BEFORE_MODEL_RESOLVE, 1, &bad, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_MODEL_RESOLVE, "{\"prompt\":\"hi\"}", NULL);
	cr_assert_not(r.blocked);
	cr_assert_eq(r.ran, 5u);
	cr_assert_eq(r.failed, 2u);
	ASSERT_FIELD(r, "modelOverride", "\"m1\"");
	ASSERT_FIELD(r, "providerOverride", "\"p2\"");
	rec_free(&r);
	fx_free(f);
}

/* ---- before_prompt_build ------------------------------------------------------------------ */

Test(hook_chain, prompt_build_merge)
{
	fx_t *f = fx_new();
	spec_t a = {.id = "a",
		    .result = "{\"prependContext\":\"A\",\"systemPrompt\":\"S1\","
			      "\"toolsAllow\":[\"read\",\"write\",\"exec\"]}"};
	spec_t b = {.id = "b",
		    .result = "{\"prependContext\":\"B\",\"appendContext\":\"Z\",\"systemPrompt\":\"S2\","
			      "\"toolsAllow\":[\"exec\",\"read\",\"x\"]}"};
	spec_t c = {.id = "c",
		    .result = "{\"toolsAllow\":[\"*\"],\"prependSystemContext\":\"P\",\"prependContext\":\"\"}"};
	spec_t broken = {.id = "broken", .rc = PC_EINVAL, .result = "{\"prependContext\":\"never\"}"};
	hook_add(f, PC_HOOK_BEFORE_PROMPT_BUILD, 3, &a, 0);
	hook_add(f, PC_HOOK_BEFORE_PROMPT_BUILD, 2, &b, 0);
	hook_add(f, PC_HOOK_BEFORE_PROMPT_BUILD, 1, &c, 0);
	hook_add(f, PC_HOOK_BEFORE_PROMPT_BUILD, 0, &broken, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_PROMPT_BUILD, "{\"prompt\":\"p\",\"messages\":[]}", NULL);
	cr_assert_not(r.blocked);
	cr_assert_eq(r.failed, 1u);
	ASSERT_FIELD(r, "prependContext", "\"A\\n\\nB\"");
	ASSERT_FIELD(r, "appendContext", "\"Z\"");
	ASSERT_FIELD(r, "systemPrompt", "\"S1\"");
	ASSERT_FIELD(r, "prependSystemContext", "\"P\"");
	ASSERT_FIELD(r, "appendSystemContext", "");
	ASSERT_FIELD(r, "toolsAllow", "[\"read\",\"exec\"]");
	rec_free(&r);
	fx_free(f);
}

/* [] allows no optional tool, and a toolsAllow that cannot be read
 * restricts everything (the handler counts as failed). */
Test(hook_chain, prompt_build_tools_allow_narrows)
{
	fx_t *f = fx_new();
	spec_t some = {.id = "some", .result = "{\"toolsAllow\":[\"read\"]}"};
	spec_t none = {.id = "none", .result = "{\"toolsAllow\":[]}"};
	hook_add(f, PC_HOOK_BEFORE_PROMPT_BUILD, 1, &some, 0);
	hook_add(f, PC_HOOK_BEFORE_PROMPT_BUILD, 0, &none, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_PROMPT_BUILD, "{}", NULL);
	ASSERT_FIELD(r, "toolsAllow", "[]");
	rec_free(&r);

	/* Only "*": nothing is narrowed, so no toolsAllow at all. */
	fx_new_hooks(f);
	spec_t all1 = {.id = "all1", .result = "{\"toolsAllow\":[\"*\"]}"};
	spec_t all2 = {.id = "all2", .result = "{\"toolsAllow\":[\"read\",\"*\"]}"};
	hook_add(f, PC_HOOK_BEFORE_PROMPT_BUILD, 1, &all1, 0);
	hook_add(f, PC_HOOK_BEFORE_PROMPT_BUILD, 0, &all2, 0);
	r = run(f, PC_HOOK_BEFORE_PROMPT_BUILD, "{}", NULL);
	cr_assert_str_eq(r.result, "{}");
	rec_free(&r);

	fx_new_hooks(f);
	spec_t bad = {.id = "bad", .result = "{\"toolsAllow\":\"read\",\"appendContext\":\"ignored\"}"};
	hook_add(f, PC_HOOK_BEFORE_PROMPT_BUILD, 0, &bad, 0);
	r = run(f, PC_HOOK_BEFORE_PROMPT_BUILD, "{}", NULL);
	cr_assert_eq(r.failed, 1u);
	ASSERT_FIELD(r, "toolsAllow", "[]");
	ASSERT_FIELD(r, "appendContext", "");
	rec_free(&r);
	fx_free(f);
}

/* ---- before_agent_run ----------------------------------------------------------------------- */

Test(hook_chain, agent_run_pass_and_block)
{
	fx_t *f = fx_new();
	spec_t pass = {.id = "pass", .result = "{\"outcome\":\"pass\"}"};
	spec_t quiet = {.id = "quiet"};
	hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 1, &pass, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 0, &quiet, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_AGENT_RUN, "{\"prompt\":\"x\"}", NULL);
	cr_assert_not(r.blocked);
	cr_assert_str_eq(r.result, "{\"outcome\":\"pass\"}");
	rec_free(&r);

	fx_new_hooks(f);
	spec_t pass2 = {.id = "pass2", .result = "{\"outcome\":\"pass\"}"};
	spec_t blockr = {.id = "block",
			 .result = "{\"outcome\":\"block\",\"reason\":\"off hours\",\"message\":\"Later.\"}"};
	spec_t after = {.id = "after", .result = "{\"outcome\":\"pass\"}"};
	hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 2, &pass2, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 1, &blockr, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 0, &after, 0);
	r = run(f, PC_HOOK_BEFORE_AGENT_RUN, "{}", NULL);
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, "off hours");
	ASSERT_FIELD(r, "outcome", "\"block\"");
	ASSERT_FIELD(r, "message", "\"Later.\"");
	rec_free(&r);
	cr_assert_eq(calls(&after), 0u);

	/* Nobody decides: no decision, not blocked. */
	fx_new_hooks(f);
	spec_t silent = {.id = "silent"};
	hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 0, &silent, 0);
	r = run(f, PC_HOOK_BEFORE_AGENT_RUN, "{}", NULL);
	cr_assert_not(r.blocked);
	cr_assert_str_eq(r.result, "{}");
	rec_free(&r);
	fx_free(f);
}

/* Unsupported shapes, failures and timeouts all block (fail closed). */
Test(hook_chain, agent_run_fails_closed)
{
	fx_t *f = fx_new();
	const char *bad[] = {"{\"outcome\":\"pass\",\"extra\":1}", "{\"outcome\":\"block\"}",
			     "{\"outcome\":\"block\",\"reason\":\"  \"}", "{\"outcome\":\"maybe\"}",
			     "{\"outcome\":\"block\",\"reason\":\"r\",\"color\":\"red\"}", "{}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		fx_new_hooks(f);
		spec_t m = {.id = "m", .result = bad[i]};
		spec_t after = {.id = "after", .result = "{\"outcome\":\"pass\"}"};
		hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 1, &m, 0);
		hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 0, &after, 0);
		rec_t r = run(f, PC_HOOK_BEFORE_AGENT_RUN, "{}", NULL);
		cr_assert(r.blocked, "%s", bad[i]);
		cr_assert_str_eq(r.reason, PC_HOOK_REASON_RUN_INVALID, "%s", bad[i]);
		cr_assert_eq(r.failed, 1u);
		ASSERT_FIELD(r, "outcome", "\"block\"");
		rec_free(&r);
		cr_assert_eq(calls(&after), 0u);
	}

	fx_new_hooks(f);
	spec_t broken = {.id = "broken", .rc = PC_ENOTFOUND};
	hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 0, &broken, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_AGENT_RUN, "{}", NULL);
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, PC_HOOK_REASON_RUN_FAILED);
	ASSERT_FIELD(r, "reason", "\"" PC_HOOK_REASON_RUN_FAILED "\"");
	rec_free(&r);

	fx_new_hooks(f);
	spec_t slow = {.id = "slow", .sleep_ms = 300, .result = "{\"outcome\":\"pass\"}"};
	hook_add(f, PC_HOOK_BEFORE_AGENT_RUN, 0, &slow, 40);
	r = run(f, PC_HOOK_BEFORE_AGENT_RUN, "{}", NULL);
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, PC_HOOK_REASON_RUN_TIMEOUT);
	cr_assert_eq(r.timed_out, 1u);
	rec_free(&r);
	fx_free(f);
}

/* ---- before_agent_reply ---------------------------------------------------------------------- */

Test(hook_chain, agent_reply_first_claim_wins)
{
	fx_t *f = fx_new();
	spec_t broken = {.id = "broken", .rc = PC_EBUSY};
	spec_t decline = {.id = "decline", .result = "{\"handled\":false}"};
	spec_t claim = {.id = "claim", .result = "{\"handled\":true,\"reply\":\"hi from plugin\"}"};
	spec_t after = {.id = "after", .result = "{\"handled\":true,\"reply\":\"too late\"}"};
	hook_add(f, PC_HOOK_BEFORE_AGENT_REPLY, 4, &broken, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_REPLY, 3, &decline, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_REPLY, 2, &claim, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_REPLY, 1, &after, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_AGENT_REPLY, "{\"prompt\":\"x\"}", NULL);
	cr_assert_not(r.blocked);
	cr_assert_eq(r.failed, 1u);
	ASSERT_FIELD(r, "handled", "true");
	ASSERT_FIELD(r, "reply", "\"hi from plugin\"");
	rec_free(&r);
	cr_assert_eq(calls(&after), 0u);
	fx_free(f);
}

/* ---- before_agent_finalize -------------------------------------------------------------------- */

Test(hook_chain, agent_finalize_merge)
{
	fx_t *f = fx_new();
	spec_t r1 = {.id = "r1", .result = "{\"action\":\"revise\",\"reason\":\"cite sources\"}"};
	spec_t r2 = {.id = "r2",
		     .result = "{\"action\":\"revise\",\"reason\":\"shorter\","
			       "\"retry\":{\"instruction\":\"  Be brief. \"}}"};
	spec_t r3 = {.id = "r3", .result = "{\"action\":\"revise\",\"retry\":{\"instruction\":\"ignored\"}}"};
	spec_t cont = {.id = "cont", .result = "{\"action\":\"continue\"}"};
	spec_t broken = {.id = "broken", .rc = PC_EINVAL};
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 5, &r1, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 4, &r2, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 3, &r3, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 2, &cont, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 1, &broken, 0);
	rec_t r = run(f, PC_HOOK_BEFORE_AGENT_FINALIZE, "{\"runId\":\"r\"}", NULL);
	cr_assert_not(r.blocked);
	cr_assert_eq(r.ran, 5u);
	ASSERT_FIELD(r, "action", "\"revise\"");
	ASSERT_FIELD(r, "reason", "\"cite sources\\n\\nshorter\"");
	ASSERT_FIELD(r, "retry", "{\"instruction\":\"Be brief.\"}");
	rec_free(&r);

	/* finalize from any handler wins over revise, before or after it. */
	fx_new_hooks(f);
	spec_t rev = {.id = "rev", .result = "{\"action\":\"revise\",\"reason\":\"again\"}"};
	spec_t fin = {.id = "fin", .result = "{\"action\":\"finalize\",\"reason\":\"good enough\"}"};
	spec_t rev2 = {.id = "rev2", .result = "{\"action\":\"revise\"}"};
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 3, &rev, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 2, &fin, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 1, &rev2, 0);
	r = run(f, PC_HOOK_BEFORE_AGENT_FINALIZE, "{}", NULL);
	cr_assert_str_eq(r.result, "{\"action\":\"finalize\",\"reason\":\"good enough\"}");
	rec_free(&r);

	fx_new_hooks(f);
	spec_t odd = {.id = "odd", .result = "{\"action\":\"explode\"}"};
	spec_t only_cont = {.id = "only_cont", .result = "{\"action\":\"continue\"}"};
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 1, &odd, 0);
	hook_add(f, PC_HOOK_BEFORE_AGENT_FINALIZE, 0, &only_cont, 0);
	r = run(f, PC_HOOK_BEFORE_AGENT_FINALIZE, "{}", NULL);
	cr_assert_eq(r.failed, 1u);
	cr_assert_str_eq(r.result, "{\"action\":\"continue\"}");
	rec_free(&r);
	fx_free(f);
}

/* ---- tool_result_persist ---------------------------------------------------------------------- */

Test(hook_chain, tool_result_persist_transforms_in_order)
{
	fx_t *f = fx_new();
	spec_t m = {.id = "m",
		    .result = "{\"message\":{\"role\":\"toolResult\",\"text\":\"redacted\"}}",
		    .watch = "message"};
	spec_t broken = {.id = "broken", .rc = PC_EINVAL, .result = "{\"content\":\"never\"}"};
	spec_t c = {.id = "c", .result = "{\"content\":\"short\"}", .watch = "message"};
	spec_t bad = {.id = "bad", .result = "{\"message\":\"not an object\"}"};
	hook_add(f, PC_HOOK_TOOL_RESULT_PERSIST, 4, &m, 0);
	hook_add(f, PC_HOOK_TOOL_RESULT_PERSIST, 3, &broken, 0);
	hook_add(f, PC_HOOK_TOOL_RESULT_PERSIST, 2, &c, 0);
	hook_add(f, PC_HOOK_TOOL_RESULT_PERSIST, 1, &bad, 0);
	rec_t r = run(f, PC_HOOK_TOOL_RESULT_PERSIST,
		      "{\"toolName\":\"exec\",\"message\":{\"role\":\"toolResult\",\"text\":\"secret\"}}", "exec");
	cr_assert_not(r.blocked);
	cr_assert_eq(r.failed, 2u);
	ASSERT_FIELD(r, "message", "{\"role\":\"toolResult\",\"text\":\"redacted\"}");
	ASSERT_FIELD(r, "content", "\"short\"");
	rec_free(&r);
	char s[512];
	seen_of(&c, s, sizeof(s));
	cr_assert_str_eq(s, "{\"role\":\"toolResult\",\"text\":\"redacted\"}");
	fx_free(f);
}

/* ---- observation hooks --------------------------------------------------------------------------- */

/* Every handler runs (in parallel); failures and timeouts are reported
 * and change nothing else. */
Test(hook_chain, observation_hooks)
{
	fx_t *f = fx_new();
	spec_t ok = {.id = "ok", .result = "{\"whatever\":1}"};
	spec_t broken = {.id = "broken", .rc = PC_EBUSY};
	spec_t slow = {.id = "slow", .sleep_ms = 300};
	spec_t blocker = {.id = "blocker", .result = "{\"block\":true}"};
	hook_add(f, PC_HOOK_AFTER_TOOL_CALL, 0, &ok, 0);
	hook_add(f, PC_HOOK_AFTER_TOOL_CALL, 0, &broken, 0);
	hook_add(f, PC_HOOK_AFTER_TOOL_CALL, 0, &slow, 30);
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &blocker, 0);
	cr_assert_eq(pc_hooks_notify(f->rt, f->h, PC_HOOK_AFTER_TOOL_CALL, json("{\"toolName\":\"exec\"}"), NULL,
				     "exec"),
		     0);
	AWAIT(calls(&ok) == 1 && calls(&broken) == 1 && calls(&slow) == 1, 5000);
	AWAIT(reported(&f->rep, PC_HOOK_REPORT_FAILED) == 1 && reported(&f->rep, PC_HOOK_REPORT_TIMEOUT) == 1, 5000);
	cr_assert_eq(done_count(f), 0u, "notify sends nothing back");

	/* Run on an observation point: one DONE once all have ended. */
	rec_t r = run(f, PC_HOOK_AFTER_TOOL_CALL, "{\"toolName\":\"exec\"}", "exec");
	cr_assert_not(r.blocked);
	cr_assert_str_eq(r.result, "{}");
	cr_assert_eq(r.ran, 3u);
	cr_assert_eq(r.failed, 1u);
	cr_assert_eq(r.timed_out, 1u);
	rec_free(&r);

	/* Decision chains are unaffected by the observers' failures. */
	r = run(f, PC_HOOK_BEFORE_TOOL_CALL, TOOL_EVENT, "exec");
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, PC_HOOK_REASON_TOOL_BLOCKED);
	cr_assert_eq(r.failed, 0u);
	rec_free(&r);

	cr_assert_eq(pc_hooks_notify(f->rt, f->h, PC_HOOK_BEFORE_TOOL_CALL, NULL, NULL, "exec"), PC_EINVAL);
	fx_free(f);
}

/* ---- arguments and lifetime ---------------------------------------------------------------------- */

Test(hook_chain, nothing_registered_sends_nothing)
{
	fx_t *f = fx_new();
	spec_t only_read = {.id = "only_read"};
	const char *names[] = {"read"};
	pc_hook_def_t d = {.point = PC_HOOK_BEFORE_TOOL_CALL, .matcher = names, .matcher_count = 1, .fn = handler,
			   .user = &only_read};
	cr_assert_eq(pc_hooks_register(f->h, &d), 0);
	cr_assert_eq(pc_hooks_run(f->rt, f->h, PC_HOOK_BEFORE_TOOL_CALL, json(TOOL_EVENT), json("{}"), "exec",
				  f->owner, 1),
		     PC_ENOTFOUND);
	cr_assert_eq(pc_hooks_run(f->rt, f->h, PC_HOOK_AGENT_END, json("{}"), NULL, NULL, f->owner, 1), PC_ENOTFOUND);
	cr_assert_eq(pc_hooks_notify(f->rt, f->h, PC_HOOK_SESSION_END, json("{}"), NULL, NULL), PC_ENOTFOUND);
	sleep_ms(50);
	cr_assert_eq(done_count(f), 0u);
	cr_assert_eq(calls(&only_read), 0u);
	fx_free(f); /* the events were freed: LeakSanitizer checks */
}

Test(hook_chain, argument_checks)
{
	fx_t *f = fx_new();
	spec_t s = {.id = "s"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &s, 0);
	pc_hook_point_t p = PC_HOOK_BEFORE_TOOL_CALL;
	cr_assert_eq(pc_hooks_run(NULL, f->h, p, json("{}"), NULL, NULL, f->owner, 1), PC_EINVAL);
	cr_assert_eq(pc_hooks_run(f->rt, NULL, p, json("{}"), NULL, NULL, f->owner, 1), PC_EINVAL);
	cr_assert_eq(pc_hooks_run(f->rt, f->h, p, json("{}"), NULL, NULL, NULL, 1), PC_EINVAL);
	cr_assert_eq(pc_hooks_run(f->rt, f->h, PC_HOOK__COUNT, json("{}"), NULL, NULL, f->owner, 1), PC_EINVAL);
	cr_assert_eq(pc_hooks_run(f->rt, f->h, p, json("[1]"), NULL, NULL, f->owner, 1), PC_EINVAL);
	cr_assert_eq(pc_hooks_run(f->rt, f->h, p, json("{}"), json("\"ctx\""), NULL, f->owner, 1), PC_EINVAL);
	cr_assert_eq(pc_hooks_notify(NULL, f->h, PC_HOOK_AGENT_END, json("{}"), NULL, NULL), PC_EINVAL);
	sleep_ms(30);
	cr_assert_eq(done_count(f), 0u);
	cr_assert_eq(calls(&s), 0u);
	/* NULL event and ctx read as {}. */
	rec_t r = run(f, p, "{}", NULL);
	cr_assert_not(r.blocked);
	rec_free(&r);
	fx_free(f);
}

/* The caller may drop its registry reference while a chain runs: the chain
 * keeps it until it ends. */
Test(hook_chain, registry_outlives_its_owner_reference)
{
	fx_t *f = fx_new();
	spec_t slow = {.id = "slow", .sleep_ms = 80, .result = "{\"block\":true}"};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &slow, 0);
	cr_assert_eq(pc_hooks_run(f->rt, f->h, PC_HOOK_BEFORE_TOOL_CALL, json(TOOL_EVENT), NULL, "exec", f->owner, 3),
		     0);
	pc_hooks_free(f->h);
	f->h = NULL;
	AWAIT(done_count(f) == 1, 5000);
	rec_t r = last_done(f);
	cr_assert(r.blocked);
	cr_assert_str_eq(r.reason, PC_HOOK_REASON_TOOL_BLOCKED);
	rec_free(&r);
	fx_free(f);
}

/* Chains in flight when the runtime stops: each DONE is owed and sent (a
 * dead letter here), the sleeping handlers finish, nothing leaks. */
Test(hook_chain, shutdown_with_chains_in_flight)
{
	fx_t *f = fx_new();
	spec_t slow = {.id = "slow", .sleep_ms = 100};
	hook_add(f, PC_HOOK_BEFORE_TOOL_CALL, 0, &slow, 0);
	hook_add(f, PC_HOOK_AGENT_END, 0, &slow, 0);
	for (uint64_t i = 0; i < 20; i++) {
		cJSON *ev = json(TOOL_EVENT);
		cr_assert_eq(pc_hooks_run(f->rt, f->h, PC_HOOK_BEFORE_TOOL_CALL, ev, NULL, "exec", f->owner, i), 0);
		cr_assert_eq(pc_hooks_notify(f->rt, f->h, PC_HOOK_AGENT_END, json("{}"), NULL, NULL), 0);
	}
	sleep_ms(20);
	fx_free(f);
}

/* ---- storm ---------------------------------------------------------------------------------------- */

#define STORM_ACTORS 8u
#define STORM_CHAINS 150u

enum { STORM_GO = 1 };

typedef struct storm {
	pc_runtime_t *rt;
	const pc_hooks_t *h;
	uint32_t base; /* this requester's first tag */
	pthread_mutex_t *lock;
	uint32_t *per_tag;
	uint32_t *wrong;
	uint32_t dones;
} storm_t;

/* One chain and one notification for `tag`: every third tool is "deny". */
static void storm_fire(pc_ctx_t *ctx, storm_t *s, uint32_t tag)
{
	char ev[128];
	snprintf(ev, sizeof(ev), "{\"toolName\":\"%s\",\"params\":{\"n\":%u}}", tag % 3 ? "exec" : "deny", tag);
	int rc = pc_hooks_run(s->rt, s->h, PC_HOOK_BEFORE_TOOL_CALL, cJSON_Parse(ev), NULL, "exec", pc_self(ctx), tag);
	CHECK(rc == 0, "run %u: %d", tag, rc);
	rc = pc_hooks_notify(s->rt, s->h, PC_HOOK_AFTER_TOOL_CALL, cJSON_Parse(ev), NULL, NULL);
	CHECK(rc == 0, "notify %u: %d", tag, rc);
}

/* A requester: fires its chains and notifications from inside a handler,
 * then checks each DONE against what its tag asked for. */
static int storm_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	storm_t *s = state;
	if (msg->type == STORM_GO) {
		for (uint32_t i = 0; i < STORM_CHAINS; i++)
			storm_fire(ctx, s, s->base + i);
		return 0;
	}
	if (msg->type != PC_MSG_HOOK_DONE)
		return 0;
	const pc_hook_done_msg_t *d = pc_msg_cdata(msg);
	bool deny = d->tag % 3 == 0;
	char want[64];
	snprintf(want, sizeof(want), "{\"params\":{\"n\":%u,\"seen\":true}}", (unsigned)d->tag);
	bool right = d->status == 0 && d->blocked == deny && d->failed == 0 && d->timed_out == 0 &&
		     (deny ? strcmp(d->reason, "denied") == 0 && d->ran == 2
			   : strcmp(d->result, want) == 0 && d->ran == 3);
	pthread_mutex_lock(s->lock);
	if (d->tag < MAX_TAGS)
		s->per_tag[d->tag]++;
	if (!right)
		(*s->wrong)++;
	s->dones++;
	pthread_mutex_unlock(s->lock);
	return 0;
}

static const pc_behavior_t storm_b = {.name = "storm", .receive = storm_receive};

/* Rewrites (adds seen:true), blocks "deny", counts what got through. */
static int storm_rewrite(void *user, const pc_hook_call_t *call, cJSON **result)
{
	(void)user;
	(void)call;
	*result = cJSON_Parse("{\"params\":{\"seen\":true}}");
	return *result ? 0 : PC_ENOMEM;
}

static int storm_block(void *user, const pc_hook_call_t *call, cJSON **result)
{
	(void)user;
	const cJSON *tool = cJSON_GetObjectItemCaseSensitive(call->event, "toolName");
	if (cJSON_IsString(tool) && strcmp(tool->valuestring, "deny") == 0)
		*result = cJSON_Parse("{\"block\":true,\"blockReason\":\"denied\"}");
	return 0;
}

static int storm_count(void *user, const pc_hook_call_t *call, cJSON **result)
{
	(void)result;
	const cJSON *seen = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(call->event, "params"),
							     "seen");
	CHECK(cJSON_IsTrue(seen), "the counter ran before the rewrite was visible");
	INC(*(uint32_t *)user);
	return 0;
}

Test(hook_chain, storm_of_chains_from_many_actors, .timeout = 120)
{
	reset_failures();
	fx_t *f = fx_new();
	uint32_t allowed = 0;
	pc_hook_def_t defs[] = {
		{.point = PC_HOOK_BEFORE_TOOL_CALL, .priority = 10, .fn = storm_rewrite},
		{.point = PC_HOOK_BEFORE_TOOL_CALL, .priority = 5, .fn = storm_block},
		{.point = PC_HOOK_BEFORE_TOOL_CALL, .priority = 0, .fn = storm_count, .user = &allowed},
	};
	for (size_t i = 0; i < 3; i++)
		cr_assert_eq(pc_hooks_register(f->h, &defs[i]), 0);
	spec_t watcher = {.id = "watcher"};
	hook_add(f, PC_HOOK_AFTER_TOOL_CALL, 0, &watcher, 0);

	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	uint32_t per_tag[MAX_TAGS] = {0}, wrong = 0;
	storm_t st[STORM_ACTORS];
	pc_actor_t *a[STORM_ACTORS];
	for (uint32_t i = 0; i < STORM_ACTORS; i++) {
		st[i] = (storm_t){f->rt, f->h, i * STORM_CHAINS, &lock, per_tag, &wrong, 0};
		cr_assert_eq(pc_spawn(f->rt, &storm_b, &st[i], &a[i]), 0);
	}
	for (uint32_t i = 0; i < STORM_ACTORS; i++)
		cr_assert_eq(pc_send_signal(a[i], STORM_GO), 0);
	const uint32_t total = STORM_ACTORS * STORM_CHAINS;
	uint32_t dones = 0;
	for (uint64_t until = now_ms() + 90000; dones < total && now_ms() < until; sleep_ms(5)) {
		pthread_mutex_lock(&lock);
		dones = 0;
		for (uint32_t i = 0; i < STORM_ACTORS; i++)
			dones += st[i].dones;
		pthread_mutex_unlock(&lock);
	}
	cr_assert_eq(dones, total);
	AWAIT(calls(&watcher) == total, 30000);
	quiesce(f->rt);
	pthread_mutex_lock(&lock);
	for (uint32_t t = 0; t < total; t++)
		cr_assert_eq(per_tag[t], 1u, "tag %u: %u DONE", t, per_tag[t]);
	cr_assert_eq(wrong, 0u);
	pthread_mutex_unlock(&lock);
	uint32_t denied = (total + 2) / 3;
	cr_assert_eq(LOAD(allowed), total - denied);
	for (uint32_t k = 0; k < 4; k++)
		cr_assert_eq(reported(&f->rep, (pc_hook_report_kind_t)k), 0u);
	assert_no_failures();
	for (uint32_t i = 0; i < STORM_ACTORS; i++) {
		pc_actor_stop(a[i], PC_EXIT_NORMAL);
		pc_actor_release(a[i]);
	}
	pthread_mutex_destroy(&lock);
	fx_free(f);
}
