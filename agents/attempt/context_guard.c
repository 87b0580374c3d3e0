/*
 * Context size estimates, the live guard, session truncation, the
 * preflight route and the compaction triggers. Every number here is a spec
 * constant named in context_guard.h; the arithmetic follows §2.7 / §3.3
 * literally, in integers where the spec floors or ceils.
 */
#include "context_guard.h"
#include "agents/providers/providers.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A non-negative double as an integer, saturating (huge windows). */
static uint64_t to_u64(double v)
{
	return v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
}

static size_t to_size(double v)
{
	uint64_t u = to_u64(v);
	return u > SIZE_MAX ? SIZE_MAX : (size_t)u;
}

/* ---- estimates ---- */

/* A rough printed size of a JSON value, without printing it: tool-call
 * arguments are counted this way so the estimate never allocates. */
static size_t json_chars(const cJSON *j)
{
	if (!j)
		return 0;
	if (cJSON_IsString(j))
		return strlen(j->valuestring) + 2;
	if (cJSON_IsNumber(j))
		return 8;
	if (cJSON_IsBool(j) || cJSON_IsNull(j))
		return 5;
	size_t n = 2;
	for (const cJSON *c = j->child; c; c = c->next)
		n += json_chars(c) + 1 + (c->string ? strlen(c->string) + 3 : 0);
	return n;
}

static const char *str_of(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool is_type(const cJSON *block, const char *type)
{
	const char *t = str_of(block, "type");
	return t && strcmp(t, type) == 0;
}

static bool is_tool_result(const cJSON *msg)
{
	const char *role = str_of(msg, "role");
	return role && strcmp(role, "toolResult") == 0;
}

static size_t block_chars(const cJSON *b, size_t text_weight)
{
	/* the type is looked up once: this runs over the whole history twice a
	 * model call */
	const char *type = str_of(b, "type"), *s;
	if (!type)
		return json_chars(b);
	if (strcmp(type, "text") == 0)
		return (s = str_of(b, "text")) ? strlen(s) * text_weight : 0;
	if (strcmp(type, "image") == 0)
		return PC_CTX_IMAGE_CHARS;
	if (strcmp(type, "thinking") == 0)
		return (s = str_of(b, "thinking")) ? strlen(s) : 0;
	if (strcmp(type, "toolCall") == 0) {
		s = str_of(b, "name");
		return (s ? strlen(s) : 0) + json_chars(cJSON_GetObjectItemCaseSensitive(b, "arguments"));
	}
	return json_chars(b);
}

static size_t count_message_chars(const cJSON *msg)
{
	size_t w = is_tool_result(msg) ? PC_CTX_CHARS_PER_TOKEN / PC_CTX_TOOL_RESULT_CHARS_PER_TOKEN : 1;
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	if (cJSON_IsString(content))
		return strlen(content->valuestring) * w;
	size_t n = 0;
	const cJSON *b;
	cJSON_ArrayForEach(b, content)
		n += block_chars(b, w);
	return n;
}

/*
 * The history is counted three times a model call (preflight, guard,
 * compaction check) and a message hardly ever changes after it joins it
 * (cut_result is the exception): so a message's count is kept on the
 * message, in the valuedouble cJSON leaves unused for objects (never
 * printed or compared; a duplicate carries it along), plus one, so 0 means
 * "not counted".
 */
size_t pc_ctx_message_chars(const cJSON *msg)
{
	if (!cJSON_IsObject(msg))
		return 0;
	if (msg->valuedouble >= 1)
		return (size_t)msg->valuedouble - 1;
	size_t n = count_message_chars(msg);
	((cJSON *)msg)->valuedouble = (double)n + 1;
	return n;
}

void pc_ctx_message_changed(cJSON *msg)
{
	if (cJSON_IsObject(msg))
		msg->valuedouble = 0;
	pc_request_message_changed(msg);
}

uint64_t pc_ctx_chars_to_tokens(size_t chars)
{
	return ((uint64_t)chars + PC_CTX_CHARS_PER_TOKEN - 1) / PC_CTX_CHARS_PER_TOKEN;
}

uint64_t pc_ctx_messages_tokens(const cJSON *messages)
{
	size_t chars = 0;
	const cJSON *m;
	if (!cJSON_IsArray(messages))
		return 0;
	cJSON_ArrayForEach(m, messages)
		chars += pc_ctx_message_chars(m);
	return pc_ctx_chars_to_tokens(chars);
}

/* ---- text cutting ---- */

/* Moves `at` back to the start of a UTF-8 sequence. */
static size_t utf8_back(const char *s, size_t at)
{
	while (at > 0 && ((unsigned char)s[at] & 0xC0) == 0x80)
		at--;
	return at;
}

/* Moves `at` forward to the start of a UTF-8 sequence. */
static size_t utf8_fwd(const char *s, size_t len, size_t at)
{
	while (at < len && ((unsigned char)s[at] & 0xC0) == 0x80)
		at++;
	return at;
}

/* The last newline in s[from..to), or `to` when there is none. */
static size_t newline_cut(const char *s, size_t from, size_t to)
{
	for (size_t i = to; i > from; i--)
		if (s[i - 1] == '\n')
			return i - 1;
	return to;
}

/* head + marker + s[tail_at..len) + notice(removed); malloc'd. */
static int assemble(const char *s, size_t len, size_t head, const char *marker, size_t tail_at, size_t removed,
		    char **out, size_t *out_len)
{
	char notice[64];
	int nn = snprintf(notice, sizeof(notice), PC_CTX_TRUNCATION_NOTICE_FMT, removed);
	size_t ml = marker ? strlen(marker) : 0, tl = len - tail_at;
	size_t total = head + ml + tl + (size_t)nn;
	char *buf = malloc(total + 1);
	if (!buf)
		return PC_ENOMEM;
	memcpy(buf, s, head);
	if (ml)
		memcpy(buf + head, marker, ml);
	memcpy(buf + head + ml, s + tail_at, tl);
	memcpy(buf + head + ml + tl, notice, (size_t)nn + 1);
	*out = buf;
	if (out_len)
		*out_len = total;
	return 0;
}

/* The live guard's cut: keep max chars, at a newline in their last 30 %. */
static int guard_cut(const char *s, size_t len, size_t max, char **out, size_t *out_len)
{
	size_t keep = utf8_back(s, max);
	size_t from = keep - (size_t)((double)keep * PC_CTX_GUARD_NEWLINE_SHARE);
	keep = newline_cut(s, from, keep);
	return assemble(s, len, keep, NULL, len, len - keep, out, out_len);
}

static const char *const important_words[] = {
	"error", "exception", "failed", "fatal", "traceback", "panic", "stack trace", "errno",
	"exit code", "total", "summary", "result", "complete", "finished", "done",
};

/* Does the last MIN_KEEP chars look like something the model needs
 * (an error, a closing JSON brace, a summary)? */
static bool important_tail(const char *s, size_t len)
{
	char tail[PC_CTX_MIN_KEEP_CHARS + 1];
	size_t n = len < PC_CTX_MIN_KEEP_CHARS ? len : PC_CTX_MIN_KEEP_CHARS;
	for (size_t i = 0; i < n; i++) {
		char c = s[len - n + i];
		tail[i] = c ? (char)tolower((unsigned char)c) : ' ';
	}
	tail[n] = '\0';
	size_t end = n;
	while (end > 0 && isspace((unsigned char)tail[end - 1]))
		end--;
	if (end > 0 && tail[end - 1] == '}')
		return true;
	for (size_t i = 0; i < sizeof(important_words) / sizeof(important_words[0]); i++)
		if (strstr(tail, important_words[i]))
			return true;
	return false;
}

size_t pc_ctx_tool_result_max_chars(uint64_t ctx_tokens, size_t override_chars)
{
	if (override_chars)
		return override_chars;
	double share = floor((double)ctx_tokens * PC_CTX_MAX_TOOL_RESULT_CONTEXT_SHARE) * PC_CTX_CHARS_PER_TOKEN;
	return share >= (double)PC_CTX_MAX_LIVE_TOOL_RESULT_CHARS ? PC_CTX_MAX_LIVE_TOOL_RESULT_CHARS
								  : to_size(share);
}

int pc_ctx_truncate_text(const char *text, size_t len, size_t max_chars, char **out, size_t *out_len)
{
	if (!text || !out)
		return PC_EINVAL;
	*out = NULL;
	if (out_len)
		*out_len = len;
	size_t budget = max_chars > PC_CTX_MIN_KEEP_CHARS ? max_chars : PC_CTX_MIN_KEEP_CHARS;
	if (len <= budget)
		return 0;
	if (budget > 2 * PC_CTX_MIN_KEEP_CHARS && important_tail(text, len)) {
		size_t tail = (size_t)((double)budget * PC_CTX_TAIL_SHARE);
		if (tail > PC_CTX_TAIL_MAX_CHARS)
			tail = PC_CTX_TAIL_MAX_CHARS;
		size_t head = utf8_back(text, budget - tail);
		size_t tail_at = utf8_fwd(text, len, len - tail);
		return assemble(text, len, head, PC_CTX_MIDDLE_OMITTED_MARKER, tail_at, tail_at - head, out,
				out_len);
	}
	size_t keep = utf8_back(text, budget);
	size_t from = keep - (size_t)((double)keep * PC_CTX_HEAD_NEWLINE_SHARE);
	keep = newline_cut(text, from, keep);
	return assemble(text, len, keep, NULL, len, len - keep, out, out_len);
}

/* ---- tool-result rewriting ---- */

/* The raw text length of a tool result (its text blocks, or its string). */
static size_t result_text_len(const cJSON *msg)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	if (cJSON_IsString(content))
		return strlen(content->valuestring);
	size_t n = 0;
	const cJSON *b;
	cJSON_ArrayForEach(b, content) {
		const char *t = is_type(b, "text") ? str_of(b, "text") : NULL;
		n += t ? strlen(t) : 0;
	}
	return n;
}

typedef int (*cut_fn)(const char *s, size_t len, size_t max, char **out, size_t *out_len);

/* Cuts msg's text to max with `cut`: several text blocks are joined by
 * newlines into the first one and the others removed. */
static int cut_result(cJSON *msg, size_t max, cut_fn cut)
{
	pc_ctx_message_changed(msg);
	cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	char *joined = NULL, *cutted = NULL;
	size_t jl = 0;
	int rc = 0;
	if (cJSON_IsString(content)) {
		rc = cut(content->valuestring, strlen(content->valuestring), max, &cutted, NULL);
		if (rc == 0 && cutted && !cJSON_SetValuestring(content, cutted))
			rc = PC_ENOMEM;
		free(cutted);
		return rc;
	}
	joined = malloc(result_text_len(msg) + (size_t)cJSON_GetArraySize(content) + 1);
	if (!joined)
		return PC_ENOMEM;
	cJSON *first = NULL, *b = content ? content->child : NULL;
	while (b) {
		cJSON *next = b->next;
		const char *t = is_type(b, "text") ? str_of(b, "text") : NULL;
		if (t) {
			if (first)
				joined[jl++] = '\n';
			memcpy(joined + jl, t, strlen(t));
			jl += strlen(t);
			if (!first)
				first = b;
			else
				cJSON_Delete(cJSON_DetachItemViaPointer(content, b));
		}
		b = next;
	}
	joined[jl] = '\0';
	if (first) {
		rc = cut(joined, jl, max, &cutted, NULL);
		cJSON *text = cJSON_GetObjectItemCaseSensitive(first, "text");
		if (rc == 0 && !cJSON_SetValuestring(text, cutted ? cutted : joined))
			rc = PC_ENOMEM;
	}
	free(cutted);
	free(joined);
	return rc;
}

/* Index of the last assistant message, or -1. */
static int last_assistant(const cJSON *messages)
{
	int i = 0, last = -1;
	const cJSON *m;
	cJSON_ArrayForEach(m, messages) {
		const char *role = str_of(m, "role");
		if (role && strcmp(role, "assistant") == 0)
			last = i;
		i++;
	}
	return last;
}

/* Copies `messages` and cuts every tool result over `max` among the
 * first `until` messages. *out is NULL when nothing was over. */
static int cut_results(const cJSON *messages, size_t max, int until, cut_fn cut, cJSON **out, size_t *count)
{
	*out = NULL;
	*count = 0;
	cJSON *copy = NULL, *mirror = NULL; /* mirror: the copy of m, once copied */
	int i = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, messages) {
		if (i >= until)
			break;
		if (is_tool_result(m) && result_text_len(m) > max) {
			if (!copy) {
				if (!(copy = cJSON_Duplicate(messages, 1)))
					return PC_ENOMEM;
				mirror = cJSON_GetArrayItem(copy, i);
			}
			int rc = cut_result(mirror, max, cut);
			if (rc) {
				cJSON_Delete(copy);
				*count = 0;
				return rc;
			}
			(*count)++;
		}
		mirror = mirror ? mirror->next : NULL;
		i++;
	}
	*out = copy;
	return 0;
}

/* ---- the live guard ---- */

void pc_ctx_guard_limits(uint64_t ctx_tokens, pc_ctx_guard_limits_t *out)
{
	double ctx = (double)ctx_tokens;
	double total = floor(ctx * PC_CTX_CHARS_PER_TOKEN * PC_CTX_PREEMPTIVE_OVERFLOW_RATIO);
	double single = floor(ctx * PC_CTX_TOOL_RESULT_CHARS_PER_TOKEN * PC_CTX_SINGLE_TOOL_RESULT_SHARE);
	out->max_context_chars = total > (double)PC_CTX_GUARD_MIN_CHARS ? to_size(total) : PC_CTX_GUARD_MIN_CHARS;
	out->max_single_tool_result_chars =
		single > (double)PC_CTX_GUARD_MIN_CHARS ? to_size(single) : PC_CTX_GUARD_MIN_CHARS;
}

int pc_ctx_guard(const cJSON *messages, uint64_t ctx_tokens, cJSON **out_messages, pc_ctx_guard_result_t *out)
{
	if (!cJSON_IsArray(messages) || !out_messages || !out)
		return PC_EINVAL;
	*out = (pc_ctx_guard_result_t){0};
	pc_ctx_guard_limits(ctx_tokens, &out->limits);
	int rc = cut_results(messages, out->limits.max_single_tool_result_chars, cJSON_GetArraySize(messages),
			     guard_cut, out_messages, &out->truncated);
	if (rc)
		return rc;
	const cJSON *m, *seen = *out_messages ? *out_messages : messages;
	cJSON_ArrayForEach(m, seen)
		out->total_chars += pc_ctx_message_chars(m);
	out->overflow = out->total_chars > out->limits.max_context_chars;
	return 0;
}

/* ---- session truncation ---- */

size_t pc_ctx_reducible_chars(const cJSON *messages, size_t max_chars)
{
	size_t budget = max_chars > PC_CTX_MIN_KEEP_CHARS ? max_chars : PC_CTX_MIN_KEEP_CHARS, n = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, messages) {
		size_t len = is_tool_result(m) ? result_text_len(m) : 0;
		n += len > budget ? len - budget : 0;
	}
	return n;
}

int pc_ctx_truncate_messages(const cJSON *messages, size_t max_chars, bool protect_trailing, cJSON **out,
			     size_t *truncated)
{
	if (!cJSON_IsArray(messages) || !out || !truncated)
		return PC_EINVAL;
	int until = protect_trailing ? last_assistant(messages) + 1 : cJSON_GetArraySize(messages);
	/* Session truncation keeps at least MIN_KEEP, so only results over that budget count. */
	size_t budget = max_chars > PC_CTX_MIN_KEEP_CHARS ? max_chars : PC_CTX_MIN_KEEP_CHARS;
	return cut_results(messages, budget, until, pc_ctx_truncate_text, out, truncated);
}

/* ---- preflight ---- */

const char *pc_preflight_route_name(pc_preflight_route_t r)
{
	switch (r) {
	case PC_PREFLIGHT_FITS: return "fits";
	case PC_PREFLIGHT_COMPACT_ONLY: return "compact_only";
	case PC_PREFLIGHT_TRUNCATE_TOOL_RESULTS_ONLY: return "truncate_tool_results_only";
	case PC_PREFLIGHT_COMPACT_THEN_TRUNCATE: return "compact_then_truncate";
	default: return "unknown";
	}
}

static uint64_t min_prompt_budget(uint64_t budget)
{
	uint64_t half = to_u64(floor((double)budget * PC_PREFLIGHT_MIN_PROMPT_SHARE));
	if (half < 1)
		half = 1;
	return half < PC_PREFLIGHT_MIN_PROMPT_BUDGET ? half : PC_PREFLIGHT_MIN_PROMPT_BUDGET;
}

uint64_t pc_preflight_effective_reserve(uint64_t context_tokens, uint64_t reserve_tokens)
{
	uint64_t budget = context_tokens ? context_tokens : 1;
	uint64_t room = budget - min_prompt_budget(budget);
	return reserve_tokens < room ? reserve_tokens : room;
}

int pc_preflight_check(const pc_preflight_input_t *in, pc_preflight_result_t *out)
{
	if (!in || !out)
		return PC_EINVAL;
	*out = (pc_preflight_result_t){.route = PC_PREFLIGHT_FITS};
	double sum = (double)in->history_tokens + (double)in->system_tokens + (double)in->prompt_tokens;
	out->estimated_tokens = to_u64(ceil(sum * PC_PREFLIGHT_SAFETY_MARGIN));
	uint64_t budget = in->context_tokens ? in->context_tokens : 1;
	uint64_t promptb = budget - pc_preflight_effective_reserve(budget, in->reserve_tokens);
	out->prompt_budget = promptb ? promptb : 1;
	if (out->estimated_tokens <= out->prompt_budget)
		return 0;
	out->overflow_tokens = out->estimated_tokens - out->prompt_budget;
	/* In chars; (double) keeps a huge overflow from wrapping. */
	double over_chars = (double)out->overflow_tokens * PC_CTX_CHARS_PER_TOKEN;
	uint64_t a = to_u64(over_chars + (double)(PC_PREFLIGHT_SLACK_TOKENS * PC_CTX_CHARS_PER_TOKEN));
	uint64_t b = to_u64(ceil(over_chars * PC_PREFLIGHT_THRESHOLD_FACTOR));
	out->threshold_chars = a > b ? a : b;
	if (in->reducible_chars == 0)
		out->route = PC_PREFLIGHT_COMPACT_ONLY;
	else if (in->reducible_chars >= out->threshold_chars)
		out->route = PC_PREFLIGHT_TRUNCATE_TOOL_RESULTS_ONLY;
	else
		out->route = PC_PREFLIGHT_COMPACT_THEN_TRUNCATE;
	return 0;
}

pc_preflight_next_t pc_preflight_next(pc_preflight_route_t route, bool truncation_done, size_t truncated_count)
{
	switch (route) {
	case PC_PREFLIGHT_FITS:
		return PC_PREFLIGHT_NEXT_PROMPT;
	case PC_PREFLIGHT_TRUNCATE_TOOL_RESULTS_ONLY:
		if (!truncation_done)
			return PC_PREFLIGHT_NEXT_TRUNCATE;
		return truncated_count ? PC_PREFLIGHT_NEXT_RETRY : PC_PREFLIGHT_NEXT_OVERFLOW;
	default:
		return PC_PREFLIGHT_NEXT_OVERFLOW;
	}
}

/* ---- compaction triggers ---- */

const char *pc_compact_trigger_name(pc_compact_trigger_t t)
{
	switch (t) {
	case PC_COMPACT_TRIGGER_NONE: return "none";
	case PC_COMPACT_TRIGGER_THRESHOLD: return "threshold";
	case PC_COMPACT_TRIGGER_OVERFLOW: return "overflow";
	case PC_COMPACT_TRIGGER_TIMEOUT_RECOVERY: return "timeout_recovery";
	case PC_COMPACT_TRIGGER_PREFLIGHT: return "preflight";
	case PC_COMPACT_TRIGGER_TRANSCRIPT_BYTES: return "transcript_bytes";
	default: return "unknown";
	}
}

uint64_t pc_compact_reserve_tokens(uint64_t context_window, uint64_t configured_reserve)
{
	uint64_t r = configured_reserve > PC_COMPACT_RESERVE_TOKENS_FLOOR ? configured_reserve
									  : PC_COMPACT_RESERVE_TOKENS_FLOOR;
	return pc_preflight_effective_reserve(context_window, r);
}

static int decided(pc_compact_decision_t *out, pc_compact_action_t a, pc_compact_trigger_t t, const char *detail)
{
	out->action = a;
	out->trigger = t;
	out->detail = detail;
	return 0;
}

int pc_compact_decide(const pc_compact_input_t *in, pc_compact_decision_t *out)
{
	if (!in || !out)
		return PC_EINVAL;
	*out = (pc_compact_decision_t){0};
	/* §1.7 step 6: only a provider-side timeout; a budget, tool or compaction
	 * timeout would just time out again. The output side is excluded from the
	 * ratio: a long answer does not mean a big context.
	 * A spent budget or a small prompt falls through to the other rules. */
	if (in->timed_out && !in->timed_out_during_compaction && !in->timed_out_during_tool_execution &&
	    !in->timed_out_by_run_budget && in->timeout_attempts < PC_COMPACT_TIMEOUT_MAX_ATTEMPTS) {
		double window = in->context_window ? (double)in->context_window : 1.0;
		if ((double)in->prompt_side_tokens / window > PC_COMPACT_TIMEOUT_PROMPT_RATIO)
			return decided(out, PC_COMPACT_RUN, PC_COMPACT_TRIGGER_TIMEOUT_RECOVERY,
				       "timeout with prompt over 65% of the window");
	}
	/* Step 7: an aborted attempt's overflow text is not acted on. */
	if (in->context_overflow && !in->aborted) {
		pc_compact_trigger_t t = in->preflight_route == PC_PREFLIGHT_FITS ? PC_COMPACT_TRIGGER_OVERFLOW
										  : PC_COMPACT_TRIGGER_PREFLIGHT;
		if (in->compaction_failure)
			return decided(out, PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE,
				       "overflow from a failed compaction");
		if (in->overflow_attempts >= PC_COMPACT_OVERFLOW_MAX_ATTEMPTS)
			return decided(out, PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE,
				       "overflow compaction budget spent");
		/* 7a: the attempt compacted already; compacting again would
		 * summarise a summary. */
		if (in->attempt_compacted)
			return decided(out, PC_COMPACT_RETRY_ONLY, t, "overflow after in-attempt compaction");
		out->truncate_after = in->preflight_route == PC_PREFLIGHT_COMPACT_THEN_TRUNCATE;
		return decided(out, PC_COMPACT_RUN, t,
			       t == PC_COMPACT_TRIGGER_PREFLIGHT ? "preflight overflow" : "context overflow");
	}
	if (in->auto_enabled && in->turn_succeeded) {
		uint64_t reserve = pc_compact_reserve_tokens(in->context_window, in->reserve_tokens);
		uint64_t limit = in->context_window > reserve ? in->context_window - reserve : 0;
		if (in->context_tokens > limit)
			return decided(out, PC_COMPACT_RUN, PC_COMPACT_TRIGGER_THRESHOLD,
				       "context over window minus reserve");
	}
	if (in->max_transcript_bytes && in->transcript_bytes > in->max_transcript_bytes)
		return decided(out, PC_COMPACT_RUN, PC_COMPACT_TRIGGER_TRANSCRIPT_BYTES,
			       "active transcript over its byte cap");
	return decided(out, PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, "no trigger");
}
