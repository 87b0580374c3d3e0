/*
 * An answer of the mock LLM in the provider's wire format, built from a
 * step: OpenAI chat.completion.chunk events ending in "data: [DONE]" (or
 * one chat.completion), Anthropic's message_start ... message_stop sequence
 * (or one message), text cut into pieces by code points or words.
 * Per-fragment events (one per piece of text, reasoning or tool arguments)
 * are rendered straight into the output buffer: only their strings vary,
 * and skipping a cJSON tree per fragment keeps a long answer to one pass
 * over one buffer. Everything else is built with cJSON.
 */
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "runtime/error.h"
#include "mock_internal.h"

/* ---- splitting text into pieces ------------------------------------------- */

static bool utf8_lead(char c)
{
	return ((unsigned char)c & 0xC0) != 0x80;
}

static void split_init(split_t *sp, const char *s, size_t n, uint32_t chunks)
{
	*sp = (split_t){.s = s, .n = n, .chunks = chunks};
	for (size_t i = 0; i < n; i++) {
		sp->cps += utf8_lead(s[i]);
		if (!pc__mock_is_space(s[i]))
			sp->last_word = i;
	}
	if (chunks && chunks > sp->cps)
		sp->chunks = (uint32_t)sp->cps;
}

static bool split_next(split_t *sp, const char **p, size_t *len)
{
	if (sp->pos >= sp->n)
		return false;
	size_t start = sp->pos, e = start;
	if (sp->chunks) {
		uint64_t target = (uint64_t)(sp->i + 1) * sp->cps / sp->chunks;
		sp->i++;
		while (e < sp->n && (sp->cp_pos < target || !utf8_lead(sp->s[e]))) {
			sp->cp_pos += utf8_lead(sp->s[e]);
			e++;
		}
	} else {
		while (e < sp->n && pc__mock_is_space(sp->s[e]))
			e++;
		while (e < sp->n && !pc__mock_is_space(sp->s[e]))
			e++;
		if (e > sp->last_word)
			e = sp->n;
	}
	sp->pos = e;
	*p = sp->s + start;
	*len = e - start;
	return true;
}

uint64_t pc__mock_piece_count(const char *s, uint32_t chunks)
{
	if (!s)
		return 0;
	split_t sp;
	split_init(&sp, s, strlen(s), chunks);
	if (sp.chunks)
		return sp.chunks;
	uint64_t n = 0;
	const char *p;
	size_t l;
	while (split_next(&sp, &p, &l))
		n++;
	return n;
}

/* ---- the answer ----------------------------------------------------------- */

/* Opens the next timed group at the next event; returns its wait. */
static uint32_t next_wait(answer_t *a)
{
	if (!a->err)
		a->err = PC__GROW(a->groups, a->group_cap, a->group_count + 1, 16);
	if (!a->err)
		a->groups[a->group_count++] = (group_t){.start = a->ev_count, .piece = a->ev_count};
	/* `burst` pieces go together, then the stream waits delay_ms: a long
	 * answer in small pieces can stream faster than a millisecond each. */
	if (a->started)
		return ++a->since_wait % (a->st->burst ? a->st->burst : 1) ? 0 : a->st->delay_ms;
	a->started = true;
	return a->st->ttft_ms;
}

/* The wait before the finish: ttft when nothing came before it. */
static uint32_t finish_wait(answer_t *a)
{
	a->finish_ev = a->ev_count;
	if (a->started)
		return 0;
	uint32_t w = next_wait(a);
	if (!a->err)
		a->groups[a->group_count - 1].piece = NO_PIECE;
	return w;
}

static void ev_begin(answer_t *a, uint32_t wait_ms, const char *name)
{
	if (!a->err)
		a->err = PC__GROW(a->ev, a->ev_cap, a->ev_count + 1, 32);
	if (a->err)
		return;
	a->ev[a->ev_count] = (event_t){.wait_ms = wait_ms, .off = a->out.len};
	if (name) {
		pc__buf_append_str(&a->out, "event: ");
		pc__buf_append_str(&a->out, name);
		pc__buf_append_str(&a->out, "\n");
	}
	pc__buf_append_str(&a->out, "data: ");
}

static void ev_end(answer_t *a)
{
	pc__buf_append(&a->out, "\n\n", 2);
	if (a->err)
		return;
	a->ev[a->ev_count].len = a->out.len - a->ev[a->ev_count].off;
	a->ev_count++;
}

/* A whole event from a cJSON object (which it frees). */
void pc__mock_ev_json(answer_t *a, uint32_t wait_ms, const char *name, cJSON *obj)
{
	char *s = obj ? pc_json_print(obj) : NULL;
	cJSON_Delete(obj);
	if (!s) {
		a->err = PC_ENOMEM;
		return;
	}
	ev_begin(a, wait_ms, name);
	pc__buf_append_str(&a->out, s);
	ev_end(a);
	free(s);
}

static uint64_t usage_of(const answer_t *a, int u)
{
	return (uint64_t)a->usage[u];
}

static cJSON *openai_usage(const answer_t *a)
{
	uint64_t in = usage_of(a, U_INPUT) + usage_of(a, U_CACHE_READ) + usage_of(a, U_CACHE_WRITE);
	cJSON *u = cJSON_CreateObject();
	bool ok = u != NULL;
	ok &= cJSON_AddNumberToObject(u, "prompt_tokens", (double)in) != NULL;
	ok &= cJSON_AddNumberToObject(u, "completion_tokens", (double)usage_of(a, U_OUTPUT)) != NULL;
	ok &= cJSON_AddNumberToObject(u, "total_tokens", (double)(in + usage_of(a, U_OUTPUT))) != NULL;
	cJSON *pd = cJSON_AddObjectToObject(u, "prompt_tokens_details");
	ok &= cJSON_AddNumberToObject(pd, "cached_tokens", (double)usage_of(a, U_CACHE_READ)) != NULL;
	cJSON *cd = cJSON_AddObjectToObject(u, "completion_tokens_details");
	ok &= cJSON_AddNumberToObject(cd, "reasoning_tokens", (double)usage_of(a, U_REASONING)) != NULL;
	if (!ok) {
		cJSON_Delete(u);
		return NULL;
	}
	return u;
}

static cJSON *anthropic_usage(const answer_t *a, uint64_t output)
{
	cJSON *u = cJSON_CreateObject();
	bool ok = u != NULL;
	ok &= cJSON_AddNumberToObject(u, "input_tokens", (double)usage_of(a, U_INPUT)) != NULL;
	ok &= cJSON_AddNumberToObject(u, "cache_creation_input_tokens", (double)usage_of(a, U_CACHE_WRITE)) != NULL;
	ok &= cJSON_AddNumberToObject(u, "cache_read_input_tokens", (double)usage_of(a, U_CACHE_READ)) != NULL;
	ok &= cJSON_AddNumberToObject(u, "output_tokens", (double)output) != NULL;
	if (!ok) {
		cJSON_Delete(u);
		return NULL;
	}
	return u;
}

/* Adds `item` (which may be NULL after a failed allocation) to `o`. */
static bool add_item(cJSON *o, const char *key, cJSON *item)
{
	if (!item)
		return false;
	if (!o || !cJSON_AddItemToObject(o, key, item)) {
		cJSON_Delete(item);
		return false;
	}
	return true;
}

/* A new object appended to `arr`, or NULL (nothing leaks) on failure. */
cJSON *pc__mock_push_obj(cJSON *arr)
{
	cJSON *o = cJSON_CreateObject();
	if (o && !cJSON_AddItemToArray(arr, o)) {
		cJSON_Delete(o);
		o = NULL;
	}
	return o;
}

/* -- OpenAI ----------------------------------------------------------------- */

static void oa_begin(answer_t *a, uint32_t wait_ms)
{
	ev_begin(a, wait_ms, NULL);
	pc__buf_append(&a->out, a->head.p, a->head.len);
	pc__buf_append_str(&a->out, "[{\"index\":0,\"delta\":");
}

static void oa_end(answer_t *a, const char *finish)
{
	pc__buf_append_str(&a->out, ",\"logprobs\":null,\"finish_reason\":");
	if (finish)
		pc__mock_buf_json_str(&a->out, finish, strlen(finish));
	else
		pc__buf_append_str(&a->out, "null");
	pc__buf_append_str(&a->out, a->include_usage ? "}],\"usage\":null}" : "}]}");
	ev_end(a);
}

/* One event per piece of `s`: {"<field>":"<piece>"}. */
static void oa_pieces(answer_t *a, const char *field, const char *s)
{
	split_t sp;
	split_init(&sp, s, strlen(s), a->st->chunks);
	const char *p;
	size_t l;
	while (split_next(&sp, &p, &l)) {
		oa_begin(a, next_wait(a));
		pc__buf_printf(&a->out, "{\"%s\":", field);
		pc__mock_buf_json_str(&a->out, p, l);
		pc__buf_append_str(&a->out, "}");
		oa_end(a, NULL);
	}
}

void pc__mock_openai_stream(answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	/* The role comes in its own chunk, except that a bare tool-call answer
	 * carries it in the first tool fragment, as OpenAI does. */
	bool tools_first = !a->reasoning && !a->text && st->tool_count;
	if (!tools_first) {
		oa_begin(a, 0);
		pc__buf_append_str(&a->out, "{\"role\":\"assistant\",\"content\":\"\"}");
		oa_end(a, NULL);
	}
	if (a->reasoning)
		oa_pieces(a, "reasoning_content", a->reasoning);
	if (a->text)
		oa_pieces(a, "content", a->text);
	for (size_t i = 0; i < st->tool_count; i++) {
		const tool_t *t = &st->tools[i];
		oa_begin(a, next_wait(a));
		pc__buf_append_str(&a->out, i == 0 && tools_first ? "{\"role\":\"assistant\",\"content\":null," : "{");
		pc__buf_printf(&a->out, "\"tool_calls\":[{\"index\":%zu,\"id\":", i);
		pc__mock_buf_json_str(&a->out, a->tool_ids[i], strlen(a->tool_ids[i]));
		pc__buf_append_str(&a->out, ",\"type\":\"function\",\"function\":{\"name\":");
		pc__mock_buf_json_str(&a->out, t->name, strlen(t->name));
		pc__buf_append_str(&a->out, ",\"arguments\":\"\"}}]}");
		oa_end(a, NULL);
		split_t sp;
		split_init(&sp, t->args, strlen(t->args), st->arg_chunks);
		const char *p;
		size_t l;
		while (split_next(&sp, &p, &l)) {
			oa_begin(a, next_wait(a));
			pc__buf_printf(&a->out, "{\"tool_calls\":[{\"index\":%zu,\"function\":{\"arguments\":", i);
			pc__mock_buf_json_str(&a->out, p, l);
			pc__buf_append_str(&a->out, "}}]}");
			oa_end(a, NULL);
		}
	}
	oa_begin(a, finish_wait(a));
	pc__buf_append_str(&a->out, "{}");
	oa_end(a, a->finish);
	if (a->include_usage) {
		cJSON *u = openai_usage(a);
		char *us = u ? pc_json_print(u) : NULL;
		cJSON_Delete(u);
		if (!us)
			a->err = PC_ENOMEM;
		ev_begin(a, 0, NULL);
		pc__buf_append(&a->out, a->head.p, a->head.len);
		pc__buf_append_str(&a->out, "[],\"usage\":");
		pc__buf_append_str(&a->out, us ? us : "null");
		pc__buf_append_str(&a->out, "}");
		ev_end(a);
		free(us);
	}
	ev_begin(a, 0, NULL);
	pc__buf_append_str(&a->out, "[DONE]");
	ev_end(a);
}

cJSON *pc__mock_openai_message(answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	cJSON *root = cJSON_CreateObject();
	bool ok = root != NULL;
	ok &= cJSON_AddStringToObject(root, "id", a->id) != NULL;
	ok &= cJSON_AddStringToObject(root, "object", "chat.completion") != NULL;
	ok &= cJSON_AddNumberToObject(root, "created", (double)a->created) != NULL;
	ok &= cJSON_AddStringToObject(root, "model", a->model) != NULL;
	cJSON *choice = pc__mock_push_obj(cJSON_AddArrayToObject(root, "choices"));
	ok &= choice != NULL;
	ok &= cJSON_AddNumberToObject(choice, "index", 0) != NULL;
	cJSON *msg = cJSON_AddObjectToObject(choice, "message");
	ok &= cJSON_AddStringToObject(msg, "role", "assistant") != NULL;
	if (a->text || !st->tool_count)
		ok &= cJSON_AddStringToObject(msg, "content", a->text ? a->text : "") != NULL;
	else
		ok &= cJSON_AddNullToObject(msg, "content") != NULL;
	ok &= cJSON_AddNullToObject(msg, "refusal") != NULL;
	if (a->reasoning)
		ok &= cJSON_AddStringToObject(msg, "reasoning_content", a->reasoning) != NULL;
	cJSON *calls = st->tool_count ? cJSON_AddArrayToObject(msg, "tool_calls") : NULL;
	ok &= !st->tool_count || calls;
	for (size_t i = 0; ok && i < st->tool_count; i++) {
		cJSON *c = pc__mock_push_obj(calls);
		ok &= c != NULL;
		ok &= cJSON_AddStringToObject(c, "id", a->tool_ids[i]) != NULL;
		ok &= cJSON_AddStringToObject(c, "type", "function") != NULL;
		cJSON *fn = cJSON_AddObjectToObject(c, "function");
		ok &= cJSON_AddStringToObject(fn, "name", st->tools[i].name) != NULL;
		ok &= cJSON_AddStringToObject(fn, "arguments", st->tools[i].args) != NULL;
	}
	ok &= cJSON_AddNullToObject(choice, "logprobs") != NULL;
	ok &= cJSON_AddStringToObject(choice, "finish_reason", a->finish) != NULL;
	ok &= add_item(root, "usage", openai_usage(a));
	ok &= cJSON_AddStringToObject(root, "system_fingerprint", "fp_mock") != NULL;
	if (!ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

/* -- Anthropic -------------------------------------------------------------- */

static void an_block_start(answer_t *a, uint32_t wait_ms, size_t index, const char *block)
{
	ev_begin(a, wait_ms, "content_block_start");
	pc__buf_printf(&a->out, "{\"type\":\"content_block_start\",\"index\":%zu,\"content_block\":", index);
	pc__buf_append_str(&a->out, block);
	pc__buf_append_str(&a->out, "}");
	ev_end(a);
}

static void an_delta(answer_t *a, uint32_t wait_ms, size_t index, const char *type, const char *field,
		     const char *s, size_t n)
{
	ev_begin(a, wait_ms, "content_block_delta");
	pc__buf_printf(&a->out, "{\"type\":\"content_block_delta\",\"index\":%zu,\"delta\":{\"type\":\"%s\",\"%s\":",
		   index, type, field);
	pc__mock_buf_json_str(&a->out, s, n);
	pc__buf_append_str(&a->out, "}}");
	ev_end(a);
}

static void an_block_stop(answer_t *a, size_t index)
{
	ev_begin(a, 0, "content_block_stop");
	pc__buf_printf(&a->out, "{\"type\":\"content_block_stop\",\"index\":%zu}", index);
	ev_end(a);
}

/* A text or thinking block: the start takes the first piece's wait. */
static void an_text_block(answer_t *a, size_t index, const char *s, bool thinking, uint32_t chunks)
{
	split_t sp;
	split_init(&sp, s, strlen(s), chunks);
	const char *p;
	size_t l;
	bool first = true;
	while (split_next(&sp, &p, &l)) {
		uint32_t w = next_wait(a);
		if (first) {
			an_block_start(a, w, index,
				       thinking ? "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}"
						: "{\"type\":\"text\",\"text\":\"\"}");
			if (!a->err)
				a->groups[a->group_count - 1].piece = a->ev_count; /* the delta, not the start */
		}
		an_delta(a, first ? 0 : w, index, thinking ? "thinking_delta" : "text_delta",
			 thinking ? "thinking" : "text", p, l);
		first = false;
	}
	if (first)
		return; /* empty: no block at all */
	if (thinking) {
		char sig[96];
		pc__mock_make_id(sig, sizeof(sig), "Eq", 86, a->seq, 4);
		an_delta(a, 0, index, "signature_delta", "signature", sig, strlen(sig));
	}
	an_block_stop(a, index);
}

static cJSON *anthropic_message_head(answer_t *a)
{
	cJSON *m = cJSON_CreateObject();
	bool ok = m != NULL;
	ok &= cJSON_AddStringToObject(m, "id", a->id) != NULL;
	ok &= cJSON_AddStringToObject(m, "type", "message") != NULL;
	ok &= cJSON_AddStringToObject(m, "role", "assistant") != NULL;
	ok &= cJSON_AddStringToObject(m, "model", a->model) != NULL;
	ok &= cJSON_AddArrayToObject(m, "content") != NULL;
	if (!ok) {
		cJSON_Delete(m);
		return NULL;
	}
	return m;
}

void pc__mock_anthropic_stream(answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	cJSON *start = cJSON_CreateObject();
	cJSON *m = anthropic_message_head(a);
	bool ok = cJSON_AddStringToObject(start, "type", "message_start") != NULL;
	if (m) {
		ok &= cJSON_AddNullToObject(m, "stop_reason") != NULL;
		ok &= cJSON_AddNullToObject(m, "stop_sequence") != NULL;
		ok &= add_item(m, "usage", anthropic_usage(a, 1));
	}
	ok &= add_item(start, "message", m);
	if (!ok) {
		cJSON_Delete(start);
		start = NULL;
	}
	pc__mock_ev_json(a, 0, "message_start", start);
	ev_begin(a, 0, "ping");
	pc__buf_append_str(&a->out, "{\"type\": \"ping\"}");
	ev_end(a);
	size_t index = 0;
	if (a->reasoning && *a->reasoning)
		an_text_block(a, index++, a->reasoning, true, st->chunks);
	if (a->text && *a->text)
		an_text_block(a, index++, a->text, false, st->chunks);
	for (size_t i = 0; i < st->tool_count; i++, index++) {
		const tool_t *t = &st->tools[i];
		pc__buf_t blk = {0};
		pc__buf_append_str(&blk, "{\"type\":\"tool_use\",\"id\":");
		pc__mock_buf_json_str(&blk, a->tool_ids[i], strlen(a->tool_ids[i]));
		pc__buf_append_str(&blk, ",\"name\":");
		pc__mock_buf_json_str(&blk, t->name, strlen(t->name));
		pc__buf_append_str(&blk, ",\"input\":{}}");
		if (blk.err)
			a->err = blk.err;
		an_block_start(a, next_wait(a), index, blk.p ? blk.p : "null");
		free(blk.p);
		an_delta(a, 0, index, "input_json_delta", "partial_json", "", 0);
		split_t sp;
		split_init(&sp, t->args, strlen(t->args), st->arg_chunks);
		const char *p;
		size_t l;
		while (split_next(&sp, &p, &l))
			an_delta(a, next_wait(a), index, "input_json_delta", "partial_json", p, l);
		an_block_stop(a, index);
	}
	cJSON *md = cJSON_CreateObject();
	ok = cJSON_AddStringToObject(md, "type", "message_delta") != NULL;
	cJSON *d = cJSON_AddObjectToObject(md, "delta");
	ok &= cJSON_AddStringToObject(d, "stop_reason", a->finish) != NULL;
	ok &= cJSON_AddNullToObject(d, "stop_sequence") != NULL;
	cJSON *u = cJSON_AddObjectToObject(md, "usage");
	ok &= cJSON_AddNumberToObject(u, "output_tokens", (double)usage_of(a, U_OUTPUT)) != NULL;
	if (!ok) {
		cJSON_Delete(md);
		md = NULL;
	}
	pc__mock_ev_json(a, finish_wait(a), "message_delta", md);
	ev_begin(a, 0, "message_stop");
	pc__buf_append_str(&a->out, "{\"type\":\"message_stop\"}");
	ev_end(a);
}

cJSON *pc__mock_anthropic_message(answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	cJSON *m = anthropic_message_head(a);
	cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	bool ok = m != NULL;
	if (a->reasoning && *a->reasoning) {
		cJSON *b = pc__mock_push_obj(content);
		char sig[96];
		pc__mock_make_id(sig, sizeof(sig), "Eq", 86, a->seq, 4);
		ok &= cJSON_AddStringToObject(b, "type", "thinking") != NULL; /* false when b is NULL */
		ok &= cJSON_AddStringToObject(b, "thinking", a->reasoning) != NULL;
		ok &= cJSON_AddStringToObject(b, "signature", sig) != NULL;
	}
	if (a->text && *a->text) {
		cJSON *b = pc__mock_push_obj(content);
		ok &= cJSON_AddStringToObject(b, "type", "text") != NULL;
		ok &= cJSON_AddStringToObject(b, "text", a->text) != NULL;
	}
	for (size_t i = 0; ok && i < st->tool_count; i++) {
		cJSON *b = pc__mock_push_obj(content);
		ok &= cJSON_AddStringToObject(b, "type", "tool_use") != NULL;
		ok &= cJSON_AddStringToObject(b, "id", a->tool_ids[i]) != NULL;
		ok &= cJSON_AddStringToObject(b, "name", st->tools[i].name) != NULL;
		/* Arguments that are not JSON go out as the string they are:
		 * the shape is then as broken as the step asked. */
		cJSON *in = cJSON_Parse(st->tools[i].args);
		ok &= add_item(b, "input", in ? in : cJSON_CreateString(st->tools[i].args));
	}
	ok &= cJSON_AddStringToObject(m, "stop_reason", a->finish) != NULL;
	ok &= cJSON_AddNullToObject(m, "stop_sequence") != NULL;
	ok &= add_item(m, "usage", anthropic_usage(a, usage_of(a, U_OUTPUT)));
	if (!ok) {
		cJSON_Delete(m);
		return NULL;
	}
	return m;
}
