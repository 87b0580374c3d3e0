/*
 * Mock LLM plans: the exact bytes of an answer (or of an error, a stall,
 * the model list) cut into timed writes, and how the answer ends.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/error.h"
#include "io/io.h"
#include "mock_internal.h"

static void plan_headers(pc_mock_api_t api, const char *req_id, const char *type,
			 const pc_mock_step_t *st, pc__buf_t *b)
{
	pc__buf_printf(b, "Content-Type: %s\r\n", type);
	if (!strcmp(type, "text/event-stream"))
		pc__buf_append_str(b, "Cache-Control: no-cache\r\n");
	pc__buf_printf(b, "%s: %s\r\n", api == PC_MOCK_OPENAI ? "x-request-id" : "request-id", req_id);
	if (st && st->retry_after >= 0)
		pc__buf_printf(b, "retry-after: %" PRId64 "\r\n", st->retry_after);
	if (st && st->headers)
		pc__buf_append_str(b, st->headers);
}

static void request_id(char *out, size_t cap, pc_mock_api_t api, uint64_t seq)
{
	if (api == PC_MOCK_OPENAI)
		pc__mock_make_id(out, cap, "req_", 32, seq, 3);
	else
		pc__mock_make_id(out, cap, "req_01", 22, seq, 3);
}

static const char *model_of(const cJSON *body)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "model");
	return cJSON_IsString(m) && *m->valuestring ? m->valuestring : "mock-model";
}

/* A one-shot JSON answer. */
static int plan_json(pc_mock_plan_t *pl, cJSON *obj, int status, pc_mock_api_t api, uint64_t seq,
		     const pc_mock_step_t *st)
{
	char rid[48];
	request_id(rid, sizeof(rid), api, seq);
	char *s = obj ? pc_json_print(obj) : NULL;
	cJSON_Delete(obj);
	if (!s)
		return PC_ENOMEM;
	pc__buf_t h = {0};
	pl->status = status;
	pl->send_head = true;
	plan_headers(api, rid, "application/json", st, &h);
	if (h.err) {
		free(s);
		return h.err;
	}
	pl->headers = h.p;
	pl->body = s;
	pl->body_len = strlen(s);
	return 0;
}

/* The provider's error JSON for `status`. `message` NULL: the provider's
 * usual wording. */
static cJSON *error_body(pc_mock_api_t api, int status, const char *type, const char *code,
			 const char *message, const char *param, const char *model, const char *rid)
{
	char text[512];
	const char *t = type, *c = code, *m = message;
	if (api == PC_MOCK_OPENAI) {
		const char *dt = status >= 500 ? "server_error" : "invalid_request_error", *dc = NULL, *dm;
		switch (status) {
		case 401:
			dc = "invalid_api_key";
			dm = "Incorrect API key provided: sk-mock*****. You can find your API key at "
			     "https://platform.openai.com/account/api-keys.";
			break;
		case 402:
			dt = dc = "insufficient_quota";
			dm = "You exceeded your current quota, please check your plan and billing details.";
			break;
		case 403:
			dt = "permission_error";
			dm = "You are not allowed to access this model.";
			break;
		case 404:
			dc = "model_not_found";
			snprintf(text, sizeof(text), "The model `%s` does not exist or you do not have access to it.", model);
			dm = text;
			break;
		case 429:
			dt = "requests";
			dc = "rate_limit_exceeded";
			snprintf(text, sizeof(text), "Rate limit reached for %s in organization org-mock on requests per min "
				 "(RPM): Limit 60, Used 60, Requested 1. Please try again in 1s.", model);
			dm = text;
			break;
		case 502: dm = "Bad gateway."; break;
		case 503:
		case 529: dm = "The server is overloaded or not ready yet."; break;
		default:
			dm = status >= 500 ? "The server had an error while processing your request. Sorry about that!"
					   : "Invalid request.";
		}
		t = t ? t : dt;
		c = c ? c : dc;
		m = m ? m : dm;
		cJSON *root = cJSON_CreateObject();
		cJSON *e = cJSON_AddObjectToObject(root, "error");
		bool ok = cJSON_AddStringToObject(e, "message", m) != NULL;
		ok &= cJSON_AddStringToObject(e, "type", t) != NULL;
		ok &= (param ? cJSON_AddStringToObject(e, "param", param) : cJSON_AddNullToObject(e, "param")) != NULL;
		ok &= (c ? cJSON_AddStringToObject(e, "code", c) : cJSON_AddNullToObject(e, "code")) != NULL;
		if (!ok) {
			cJSON_Delete(root);
			return NULL;
		}
		return root;
	}
	const char *dt = "invalid_request_error", *dm = "Invalid request.";
	switch (status) {
	case 401: dt = "authentication_error"; dm = "invalid x-api-key"; break;
	case 402:
		dt = "billing_error";
		dm = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
		     "to upgrade or purchase credits.";
		break;
	case 403: dt = "permission_error"; dm = "Your API key does not have permission to use the specified resource."; break;
	case 404:
		dt = "not_found_error";
		snprintf(text, sizeof(text), "model: %s", model);
		dm = text;
		break;
	case 413: dt = "request_too_large"; dm = "Request exceeds the maximum allowed number of bytes."; break;
	case 429:
		dt = "rate_limit_error";
		dm = "Number of request tokens has exceeded your per-minute rate limit "
		     "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. "
		     "Please reduce the prompt length or the maximum tokens requested, or try again later. You may "
		     "also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a "
		     "rate limit increase.";
		break;
	case 503:
	case 529: dt = "overloaded_error"; dm = "Overloaded"; break;
	default:
		if (status >= 500) {
			dt = "api_error";
			dm = "Internal server error";
		}
	}
	cJSON *root = cJSON_CreateObject();
	bool ok = cJSON_AddStringToObject(root, "type", "error") != NULL;
	cJSON *e = cJSON_AddObjectToObject(root, "error");
	ok &= cJSON_AddStringToObject(e, "type", t ? t : dt) != NULL;
	ok &= cJSON_AddStringToObject(e, "message", m ? m : dm) != NULL;
	ok &= cJSON_AddStringToObject(root, "request_id", rid) != NULL;
	if (!ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

int pc_mock_plan_error(pc_mock_api_t api, int status, const char *message, uint64_t seq,
		       pc_mock_plan_t *out)
{
	if (!out || status < 200 || status > 599)
		return PC_EINVAL;
	*out = (pc_mock_plan_t){0};
	char rid[48];
	request_id(rid, sizeof(rid), api, seq);
	cJSON *b = error_body(api, status, "invalid_request_error", NULL, message, NULL, "mock-model", rid);
	int rc = plan_json(out, b, status, api, seq, NULL);
	if (rc)
		pc_mock_plan_free(out);
	return rc;
}

static int plan_step_error(pc_mock_plan_t *pl, const pc_mock_step_t *st, pc_mock_api_t api,
			   const cJSON *body, uint64_t seq)
{
	char rid[48], text[256];
	request_id(rid, sizeof(rid), api, seq);
	const char *model = model_of(body);
	cJSON *b;
	int status = st->status;
	if (st->kind == K_OVERFLOW) {
		status = 400;
		int64_t max = st->max_tokens >= 0 ? st->max_tokens : api == PC_MOCK_OPENAI ? 128000 : 200000;
		int64_t got = st->prompt_tokens >= 0 ? st->prompt_tokens : max + 1 + (int64_t)pc__mock_input_words(body);
		if (api == PC_MOCK_OPENAI) {
			snprintf(text, sizeof(text), "This model's maximum context length is %" PRId64 " tokens. "
				 "However, your messages resulted in %" PRId64 " tokens. Please reduce the length of "
				 "the messages.", max, got);
			b = error_body(api, 400, "invalid_request_error", "context_length_exceeded", text,
				       "messages", model, rid);
		} else {
			snprintf(text, sizeof(text), "prompt is too long: %" PRId64 " tokens > %" PRId64 " maximum",
				 got, max);
			b = error_body(api, 400, "invalid_request_error", NULL, text, NULL, model, rid);
		}
	} else {
		b = error_body(api, status, st->etype, st->code, st->message, NULL, model, rid);
	}
	pl->head_wait_ms = st->ttft_ms;
	return plan_json(pl, b, status, api, seq, st);
}

static int plan_stall(pc_mock_plan_t *pl, const pc_mock_step_t *st, pc_mock_api_t api, bool stream,
		      uint64_t seq)
{
	char rid[48];
	request_id(rid, sizeof(rid), api, seq);
	pl->status = 200;
	pl->send_head = !st->before_headers;
	pl->streamed = true;
	pl->finish = st->ms ? PC_MOCK_ABORT : PC_MOCK_HANG;
	pl->finish_wait_ms = st->ms;
	pc__buf_t h = {0};
	plan_headers(api, rid, stream ? "text/event-stream" : "application/json", st, &h);
	pl->headers = h.p;
	return h.err;
}

/* Cuts the JSON of event `i` in half (its line end stays), shifting the
 * events after it. */
static void cut_event_json(answer_t *a, size_t i)
{
	event_t *e = &a->ev[i];
	char *start = a->out.p + e->off;
	char *data = memmem(start, e->len, "data: ", 6);
	if (!data)
		return;
	size_t json_off = (size_t)(data + 6 - start), json_len = e->len - json_off - 2;
	size_t drop = json_len - json_len / 2;
	char *from = start + json_off + json_len / 2;
	memmove(from, from + drop, a->out.len - (size_t)(from + drop - a->out.p) + 1);
	a->out.len -= drop;
	e->len -= drop;
	for (size_t k = i + 1; k < a->ev_count; k++)
		a->ev[k].off -= drop;
}

/*
 * Replaces the events from `at` on with the provider's in-stream error, as
 * each sends it: OpenAI a data line with its error JSON (a 500's, "server
 * error"), Anthropic an `error` event (a 529's, "Overloaded", its usual
 * one). The step's message and type replace the defaults.
 */
static void stream_error(answer_t *a, size_t at)
{
	const pc_mock_step_t *st = a->st;
	bool oai = a->api == PC_MOCK_OPENAI;
	cJSON *b = error_body(a->api, oai ? 500 : 529, st->etype, st->code, st->message, NULL, a->model,
			      a->req_id);
	if (at < a->ev_count) {
		a->out.len = a->ev[at].off;
		a->out.p[a->out.len] = '\0';
		a->ev_count = at;
	}
	pc__mock_ev_json(a, 0, oai ? NULL : "error", b);
}

/* Applies the step's fault to the events and cuts them into writes.
 * Counts are pieces: K pieces go out whole, with what goes with them. */
static int plan_stream(pc_mock_plan_t *pl, answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	size_t kept = a->ev_count, partial = 0, k = st->fault_at;
	size_t pieces = a->group_count;
	if (pieces && a->groups[pieces - 1].piece == NO_PIECE)
		pieces--;
	switch (st->fault) {
	case F_DISCONNECT:
		kept = k < a->group_count ? a->groups[k].start : kept;
		pl->finish = PC_MOCK_ABORT;
		break;
	case F_STALL:
		kept = k < a->group_count ? a->groups[k].start : kept;
		pl->finish = st->stall_ms ? PC_MOCK_ABORT : PC_MOCK_HANG;
		pl->finish_wait_ms = st->stall_ms;
		break;
	case F_BAD_JSON:
		/* The K-th piece (the first by default), or the finish when
		 * there are not that many. */
		cut_event_json(a, k < pieces ? a->groups[k].piece : a->finish_ev);
		break;
	case F_TRUNCATED:
		kept--; /* never the terminator */
		if (st->fault_at_set && k < a->group_count) {
			kept = a->groups[k].start;
			partial = a->ev[kept].len / 2;
		}
		break;
	case F_STREAM_ERROR:
		/* K pieces, then the error event in place of the rest */
		kept = k < pieces ? a->groups[k].start : a->finish_ev;
		stream_error(a, kept);
		if (a->err)
			return a->err;
		kept = a->ev_count;
		break;
	}
	pl->writes = calloc(kept + 1, sizeof(*pl->writes));
	if (!pl->writes)
		return PC_ENOMEM;
	for (size_t i = 0; i <= kept; i++) {
		size_t len = i < kept ? a->ev[i].len : partial;
		if (i == kept && !len)
			break;
		pc_mock_write_t *w = pl->write_count ? &pl->writes[pl->write_count - 1] : NULL;
		if (!w || a->ev[i].wait_ms) {
			w = &pl->writes[pl->write_count++];
			*w = (pc_mock_write_t){.wait_ms = a->ev[i].wait_ms, .off = a->ev[i].off};
		}
		w->len += len;
		w->events++;
	}
	pl->body_len = pl->write_count ? pl->writes[pl->write_count - 1].off +
					 pl->writes[pl->write_count - 1].len : 0;
	pl->body = a->out.p;
	a->out.p = NULL;
	return 0;
}

/* A whole answer in one JSON body, sent after the time the stream would
 * have taken. */
static int plan_oneshot(pc_mock_plan_t *pl, answer_t *a)
{
	const pc_mock_step_t *st = a->st;
	uint64_t timed = pc__mock_piece_count(a->reasoning, st->chunks) + pc__mock_piece_count(a->text, st->chunks);
	for (size_t i = 0; i < st->tool_count; i++)
		timed += 1 + pc__mock_piece_count(st->tools[i].args, st->arg_chunks);
	uint64_t total = st->ttft_ms + (timed > 1 ? (timed - 1) / (st->burst ? st->burst : 1) * st->delay_ms : 0);
	cJSON *obj = a->api == PC_MOCK_OPENAI ? pc__mock_openai_message(a) : pc__mock_anthropic_message(a);
	int rc = plan_json(pl, obj, 200, a->api, a->seq, st);
	if (rc)
		return rc;
	pl->head_wait_ms = total > PC__MOCK_MAX_MS ? PC__MOCK_MAX_MS : (uint32_t)total;
	switch (st->fault) {
	case F_DISCONNECT:
		pl->send_head = false;
		pl->finish = PC_MOCK_ABORT;
		break;
	case F_STALL:
		pl->send_head = false;
		pl->head_wait_ms = 0;
		pl->finish = st->stall_ms ? PC_MOCK_ABORT : PC_MOCK_HANG;
		pl->finish_wait_ms = st->stall_ms;
		break;
	case F_BAD_JSON:
	case F_TRUNCATED:
		pl->body_len /= 2;
		break;
	}
	return 0;
}

static const char *finish_reason(const pc_mock_step_t *st, pc_mock_api_t api)
{
	const char *f = st->finish ? st->finish : st->tool_count ? "tool_calls" : "stop";
	if (api == PC_MOCK_OPENAI)
		return f;
	if (!strcmp(f, "length"))
		return "max_tokens";
	if (!strcmp(f, "tool_calls"))
		return "tool_use";
	if (!strcmp(f, "content_filter"))
		return "refusal";
	if (!strcmp(f, "error"))
		return "error"; /* no Anthropic value: sent as is, an unknown stop reason */
	return "end_turn";
}

static int answer_init(answer_t *a, const pc_mock_step_t *st, pc_mock_api_t api, const cJSON *body,
		       uint64_t seq, int64_t created)
{
	*a = (answer_t){.api = api, .st = st, .seq = seq, .created = created};
	a->model = model_of(body);
	const cJSON *so = cJSON_GetObjectItemCaseSensitive(body, "stream_options");
	a->include_usage = api == PC_MOCK_OPENAI &&
			   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
	a->reasoning = st->reasoning;
	a->text = st->text;
	if (st->kind == K_TEXT && !st->text) {
		int rc = pc__mock_echo_text(body, &a->echo);
		if (rc)
			return rc;
		a->text = a->echo;
	}
	a->finish = finish_reason(st, api);
	if (api == PC_MOCK_OPENAI)
		pc__mock_make_id(a->id, sizeof(a->id), "chatcmpl-", 29, seq, 1);
	else
		pc__mock_make_id(a->id, sizeof(a->id), "msg_01", 22, seq, 2);
	request_id(a->req_id, sizeof(a->req_id), api, seq);
	if (st->tool_count && !(a->tool_ids = calloc(st->tool_count, sizeof(char *))))
		return PC_ENOMEM;
	for (size_t i = 0; i < st->tool_count; i++) {
		if (st->tools[i].id)
			a->tool_ids[i] = pc__mock_dup_str(st->tools[i].id);
		else if ((a->tool_ids[i] = malloc(40)))
			pc__mock_make_id(a->tool_ids[i], 40, api == PC_MOCK_OPENAI ? "call_" : "toolu_01",
				api == PC_MOCK_OPENAI ? 24 : 22, seq, 100 + i);
		if (!a->tool_ids[i])
			return PC_ENOMEM;
	}
	/* Usage: the step's numbers, else words counted. */
	uint64_t out = pc__mock_word_count(a->text ? a->text : "", a->text ? strlen(a->text) : 0);
	uint64_t reasoning = a->reasoning ? pc__mock_word_count(a->reasoning, strlen(a->reasoning)) : 0;
	for (size_t i = 0; i < st->tool_count; i++)
		out += pc__mock_word_count(st->tools[i].args, strlen(st->tools[i].args));
	int64_t computed[U_COUNT] = {
		[U_INPUT] = (int64_t)pc__mock_input_words(body),
		[U_OUTPUT] = (int64_t)(out + reasoning),
		[U_REASONING] = (int64_t)reasoning,
	};
	for (int u = 0; u < U_COUNT; u++)
		a->usage[u] = st->usage[u] >= 0 ? st->usage[u] : computed[u];
	if (api == PC_MOCK_OPENAI) {
		pc__buf_append_str(&a->head, "{\"id\":");
		pc__mock_buf_json_str(&a->head, a->id, strlen(a->id));
		pc__buf_printf(&a->head, ",\"object\":\"chat.completion.chunk\",\"created\":%" PRId64 ",\"model\":",
			   created);
		pc__mock_buf_json_str(&a->head, a->model, strlen(a->model));
		pc__buf_append_str(&a->head, ",\"system_fingerprint\":\"fp_mock\",\"choices\":");
	}
	return a->head.err;
}

static void answer_free(answer_t *a)
{
	for (size_t i = 0; a->tool_ids && i < a->st->tool_count; i++)
		free(a->tool_ids[i]);
	free(a->tool_ids);
	free(a->echo);
	free(a->head.p);
	free(a->out.p);
	free(a->ev);
	free(a->groups);
}

int pc_mock_plan_build(const pc_mock_step_t *step, pc_mock_api_t api, const cJSON *body, uint64_t seq,
		       int64_t created, pc_mock_plan_t *out)
{
	if (!out || !body)
		return PC_EINVAL;
	const pc_mock_step_t *st = step ? step : &pc__mock_echo_step;
	*out = (pc_mock_plan_t){0};
	bool stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "stream"));
	int rc;
	if (st->kind == K_ERROR || st->kind == K_OVERFLOW) {
		rc = plan_step_error(out, st, api, body, seq);
	} else if (st->kind == K_STALL) {
		rc = plan_stall(out, st, api, stream, seq);
	} else {
		answer_t a;
		rc = answer_init(&a, st, api, body, seq, created);
		if (!rc && stream) {
			if (api == PC_MOCK_OPENAI)
				pc__mock_openai_stream(&a);
			else
				pc__mock_anthropic_stream(&a);
			rc = a.err ? a.err : a.out.err;
			out->status = 200;
			out->send_head = true;
			out->streamed = true;
			pc__buf_t h = {0};
			plan_headers(api, a.req_id, "text/event-stream", st, &h);
			out->headers = h.p;
			rc = rc ? rc : h.err;
			if (!rc)
				rc = plan_stream(out, &a);
		} else if (!rc) {
			rc = plan_oneshot(out, &a);
		}
		answer_free(&a);
	}
	if (rc)
		pc_mock_plan_free(out);
	return rc;
}

int pc_mock_plan_models(const pc_mock_scenario_t *sc, pc_mock_api_t api, uint64_t seq,
			int64_t created, pc_mock_plan_t *out)
{
	if (!out)
		return PC_EINVAL;
	*out = (pc_mock_plan_t){0};
	static const char *const dflt[] = {"mock-model"};
	size_t n = 0;
	const char *const *names = pc__mock_scenario_models(sc, &n);
	if (n == 0) {
		names = dflt;
		n = 1;
	}
	char stamp[32];
	time_t t = (time_t)created;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm))
		return PC_EINVAL;
	cJSON *root = cJSON_CreateObject();
	bool ok = api == PC_MOCK_ANTHROPIC || cJSON_AddStringToObject(root, "object", "list") != NULL;
	cJSON *data = cJSON_AddArrayToObject(root, "data");
	for (size_t i = 0; ok && i < n; i++) {
		cJSON *m = pc__mock_push_obj(data);
		ok &= m != NULL;
		if (api == PC_MOCK_OPENAI) {
			ok &= cJSON_AddStringToObject(m, "id", names[i]) != NULL;
			ok &= cJSON_AddStringToObject(m, "object", "model") != NULL;
			ok &= cJSON_AddNumberToObject(m, "created", (double)created) != NULL;
			ok &= cJSON_AddStringToObject(m, "owned_by", "pincer-mock") != NULL;
		} else {
			ok &= cJSON_AddStringToObject(m, "type", "model") != NULL;
			ok &= cJSON_AddStringToObject(m, "id", names[i]) != NULL;
			ok &= cJSON_AddStringToObject(m, "display_name", names[i]) != NULL;
			ok &= cJSON_AddStringToObject(m, "created_at", stamp) != NULL;
		}
	}
	if (api == PC_MOCK_ANTHROPIC) {
		ok &= cJSON_AddFalseToObject(root, "has_more") != NULL;
		ok &= cJSON_AddStringToObject(root, "first_id", names[0]) != NULL;
		ok &= cJSON_AddStringToObject(root, "last_id", names[n - 1]) != NULL;
	}
	if (!ok) {
		cJSON_Delete(root);
		root = NULL;
	}
	int rc = plan_json(out, root, 200, api, seq, NULL);
	if (rc)
		pc_mock_plan_free(out);
	return rc;
}

void pc_mock_plan_free(pc_mock_plan_t *p)
{
	if (!p)
		return;
	free(p->headers);
	free(p->body);
	free(p->writes);
	*p = (pc_mock_plan_t){0};
}
