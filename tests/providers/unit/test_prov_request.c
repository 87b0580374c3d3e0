/*
 * Request builders (agents/providers/request.c): the exact bodies sent to
 * OpenAI chat completions and Anthropic messages for a conversation with
 * thinking, parallel tool calls, tool results (one failed) and an image;
 * thinking levels and budgets; the headers; and refusal of conversations
 * that do not follow the unified model.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/providers/provider.h"
#include "agents/providers/request.h"
#include "agents/providers/stream.h"
#include "agents/providers/wire.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

/* JSON written with ' for " (the texts below have no apostrophes). The
 * result is a static buffer, good until the next call. */
static const char *J(const char *s)
{
	static char buf[2][8192];
	static int which;
	char *b = buf[which ^= 1];
	size_t n = strlen(s);
	cr_assert_lt(n, sizeof(buf[0]));
	for (size_t i = 0; i <= n; i++)
		b[i] = s[i] == '\'' ? '"' : s[i];
	return b;
}

static cJSON *parse(const char *single_quoted)
{
	cJSON *j = cJSON_Parse(J(single_quoted));
	cr_assert(j, "bad test JSON: %s", single_quoted);
	return j;
}

static const char conversation[] =
	"["
	"{'role':'user','content':'Weather in Paris, time in UTC?'},"
	"{'role':'assistant','content':["
	"{'type':'thinking','thinking':'Two tools.','thinkingSignature':'sig1'},"
	"{'type':'text','text':'Let me check.'},"
	"{'type':'toolCall','id':'call_a','name':'get_weather','arguments':{'city':'Paris'}},"
	"{'type':'toolCall','id':'call|b','name':'get_time','arguments':'{\\'tz\\':\\'UTC\\'}'}],"
	"'stopReason':'toolUse'},"
	"{'role':'toolResult','toolCallId':'call_a','toolName':'get_weather',"
	"'content':[{'type':'text','text':'18C'}],'isError':false},"
	"{'role':'toolResult','toolCallId':'call|b','toolName':'get_time',"
	"'content':[{'type':'text','text':'boom'},{'type':'text','text':'again'}],'isError':true},"
	"{'role':'user','content':[{'type':'text','text':'Thanks. And this?'},"
	"{'type':'image','data':'QUJD','mimeType':'image/png'}]}"
	"]";

static const char tools[] =
	"[{'name':'get_weather','description':'Weather by city','parameters':{'type':'object',"
	"'properties':{'city':{'type':'string'}},'required':['city']}},"
	"{'name':'get_time'}]";

static char *body_of(const pc_request_params_t *p)
{
	char *s = NULL;
	int rc = pc_request_body(p, &s);
	cr_assert_eq(rc, 0, "pc_request_body: %s", pc_strerror(rc));
	return s;
}

static int body_rc(pc_provider_api_t api, const char *messages)
{
	cJSON *m = parse(messages);
	pc_request_params_t p = {.api = api, .model = "m", .messages = m};
	cJSON *out = NULL;
	int rc = pc_request_body_json(&p, &out);
	cr_assert(rc != 0 || out);
	cJSON_Delete(out);
	cJSON_Delete(m);
	return rc;
}

static char *body_for(pc_provider_api_t api, const char *messages)
{
	cJSON *m = parse(messages);
	pc_request_params_t p = {.api = api, .model = "m", .messages = m};
	char *s = body_of(&p);
	cJSON_Delete(m);
	return s;
}

/* ---- the full conversation ---- */

Test(request, openai_body)
{
	cJSON *m = parse(conversation), *t = parse(tools);
	pc_request_params_t p = {
		.api = PC_API_OPENAI_COMPLETIONS,
		.model = "gpt-4o",
		.system_prompt = "Be brief.",
		.messages = m,
		.tools = t,
		.max_tokens = 1024,
		.has_temperature = true,
		.temperature = 0.5,
		.thinking = PC_THINK_HIGH,
	};
	char *s = body_of(&p);
	cr_assert_str_eq(s, J(
		"{'model':'gpt-4o','messages':["
		"{'role':'system','content':'Be brief.'},"
		"{'role':'user','content':'Weather in Paris, time in UTC?'},"
		"{'role':'assistant','content':'Let me check.','tool_calls':["
		"{'id':'call_a','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\':\\'Paris\\'}'}},"
		"{'id':'call|b','type':'function','function':{'name':'get_time','arguments':'{\\'tz\\':\\'UTC\\'}'}}]},"
		"{'role':'tool','tool_call_id':'call_a','content':'18C'},"
		"{'role':'tool','tool_call_id':'call|b','content':'boom\\nagain'},"
		"{'role':'user','content':[{'type':'text','text':'Thanks. And this?'},"
		"{'type':'image_url','image_url':{'url':'data:image/png;base64,QUJD'}}]}],"
		"'stream':true,'stream_options':{'include_usage':true},'max_completion_tokens':1024,"
		"'temperature':0.5,'reasoning_effort':'high','tools':["
		"{'type':'function','function':{'name':'get_weather','description':'Weather by city',"
		"'parameters':{'type':'object','properties':{'city':{'type':'string'}},'required':['city']}}},"
		"{'type':'function','function':{'name':'get_time','parameters':{'type':'object','properties':{}}}}]}"));
	cJSON_free(s);
	cJSON_Delete(m);
	cJSON_Delete(t);
	ASSERT_NO_LEAKS();
}

/* Tools printed once and spliced in make the very body the tools tree
 * makes, for both APIs; bad or absent tools are told apart. */
Test(request, printed_tools_splice_into_the_same_body)
{
	cJSON *m = parse(conversation), *t = parse(tools), *bad = parse("[{'description':'no name'}]");
	for (int api = PC_API_OPENAI_COMPLETIONS; api <= PC_API_ANTHROPIC_MESSAGES; api++) {
		pc_request_params_t p = {.api = (pc_provider_api_t)api, .model = "m", .messages = m, .tools = t};
		char *from_tree = body_of(&p);
		char *printed = NULL;
		cr_assert_eq(pc_request_tools_json(p.api, t, &printed), 0);
		cr_assert_not_null(printed);
		p.tools = NULL;
		p.tools_json = printed;
		char *spliced = body_of(&p);
		cr_assert_str_eq(spliced, from_tree);
		cJSON_free(spliced);
		cJSON_free(from_tree);
		cJSON_free(printed);
		char *none = (char *)"x";
		cr_assert_eq(pc_request_tools_json(p.api, NULL, &none), 0);
		cr_assert_null(none, "no tools, nothing printed");
		cr_assert_eq(pc_request_tools_json(p.api, bad, &none), PC_EINVAL);
	}
	char *out = NULL;
	cr_assert_eq(pc_request_tools_json(PC_API_NONE, t, &out), PC_EINVAL);
	cr_assert_eq(pc_request_tools_json(PC_API_OPENAI_COMPLETIONS, m->child, &out), PC_EINVAL);
	cJSON_Delete(m);
	cJSON_Delete(t);
	cJSON_Delete(bad);
	ASSERT_NO_LEAKS();
}

Test(request, anthropic_body)
{
	cJSON *m = parse(conversation), *t = parse(tools);
	pc_request_params_t p = {
		.api = PC_API_ANTHROPIC_MESSAGES,
		.model = "claude-sonnet-4-5",
		.system_prompt = "Be brief.",
		.messages = m,
		.tools = t,
		.max_tokens = 32000,
		.has_temperature = true,
		.temperature = 0.5,
		.thinking = PC_THINK_HIGH,
	};
	char *s = body_of(&p);
	cr_assert_str_eq(s, J(
		"{'model':'claude-sonnet-4-5','max_tokens':32000,'stream':true,'system':'Be brief.',"
		"'messages':["
		"{'role':'user','content':'Weather in Paris, time in UTC?'},"
		"{'role':'assistant','content':["
		"{'type':'thinking','thinking':'Two tools.','signature':'sig1'},"
		"{'type':'text','text':'Let me check.'},"
		"{'type':'tool_use','id':'call_a','name':'get_weather','input':{'city':'Paris'}},"
		"{'type':'tool_use','id':'call_b','name':'get_time','input':{'tz':'UTC'}}]},"
		"{'role':'user','content':["
		"{'type':'tool_result','tool_use_id':'call_a','content':[{'type':'text','text':'18C'}],'is_error':false},"
		"{'type':'tool_result','tool_use_id':'call_b','content':[{'type':'text','text':'boom'},"
		"{'type':'text','text':'again'}],'is_error':true}]},"
		"{'role':'user','content':[{'type':'text','text':'Thanks. And this?'},"
		"{'type':'image','source':{'type':'base64','media_type':'image/png','data':'QUJD'}}]}],"
		"'tools':[{'name':'get_weather','description':'Weather by city','input_schema':{'type':'object',"
		"'properties':{'city':{'type':'string'}},'required':['city']}},"
		"{'name':'get_time','input_schema':{'type':'object','properties':{}}}],"
		"'thinking':{'type':'enabled','budget_tokens':16384}}"));
	cJSON_free(s);
	cJSON_Delete(m);
	cJSON_Delete(t);
	ASSERT_NO_LEAKS();
}

/* ---- each message's converted form, kept ---- */

/* A body built from messages that already went into one (for either api,
 * in any order) is the body fresh messages make; the messages still print
 * and duplicate as they were; an edit in place shows once announced. */
Test(request, kept_conversions_match_fresh_ones)
{
	cJSON *m = parse(conversation);
	char *printed = cJSON_PrintUnformatted(m);
	char *fresh[2];
	for (int api = PC_API_OPENAI_COMPLETIONS; api <= PC_API_ANTHROPIC_MESSAGES; api++)
		fresh[api - PC_API_OPENAI_COMPLETIONS] = body_for((pc_provider_api_t)api, conversation);
	static const int order[] = {0, 0, 1, 1, 0, 1};
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		pc_request_params_t p = {.api = (pc_provider_api_t)(PC_API_OPENAI_COMPLETIONS + order[i]),
					 .model = "m", .messages = m};
		char *s = body_of(&p);
		cr_assert_str_eq(s, fresh[order[i]], "build %zu", i);
		cJSON_free(s);
	}
	char *again = cJSON_PrintUnformatted(m);
	cr_assert_str_eq(again, printed, "the messages print as they were");
	cJSON *copy = cJSON_Duplicate(m, true);
	cr_assert(cJSON_Compare(copy, m, true));
	pc_request_params_t p = {.api = PC_API_ANTHROPIC_MESSAGES, .model = "m", .messages = copy};
	char *from_copy = body_of(&p);
	cr_assert_str_eq(from_copy, fresh[1], "a duplicate builds the same body");

	cJSON *first = cJSON_GetArrayItem(copy, 0);
	cr_assert_not_null(cJSON_SetValuestring(cJSON_GetObjectItem(first, "content"), "Edited."));
	pc_request_message_changed(first);
	p.api = PC_API_OPENAI_COMPLETIONS;
	char *edited = body_of(&p);
	cr_assert(strstr(edited, J("{'role':'user','content':'Edited.'}")), "%s", edited);
	cr_assert_null(strstr(edited, "Weather in Paris"), "%s", edited);
	pc_request_message_changed(first);
	pc_request_message_changed(NULL);

	cJSON_free(edited);
	cJSON_free(from_copy);
	cJSON_Delete(copy);
	cJSON_free(again);
	cJSON_free(fresh[0]);
	cJSON_free(fresh[1]);
	cJSON_free(printed);
	cJSON_Delete(m);
	ASSERT_NO_LEAKS();
}

/* ---- parameters ---- */

Test(request, openai_parameters)
{
	cJSON *m = parse("[{'role':'user','content':'hi'}]");
	pc_request_params_t p = {.api = PC_API_OPENAI_COMPLETIONS, .model = "llama3", .messages = m};
	char *s = body_of(&p);
	cr_assert_str_eq(s, J("{'model':'llama3','messages':[{'role':'user','content':'hi'}],'stream':true,"
			      "'stream_options':{'include_usage':true}}"),
			 "no limit, temperature, effort or tools unless asked");
	cJSON_free(s);
	p.max_tokens = 77;
	p.openai_max_tokens = true;
	p.system_prompt = "";
	cJSON *empty_tools = cJSON_CreateArray();
	p.tools = empty_tools;
	s = body_of(&p);
	cr_assert_str_eq(s, J("{'model':'llama3','messages':[{'role':'user','content':'hi'}],'stream':true,"
			      "'stream_options':{'include_usage':true},'max_tokens':77}"));
	cJSON_free(s);
	static const struct {
		pc_think_level_t l;
		const char *effort;
	} efforts[] = {
		{PC_THINK_MINIMAL, "minimal"}, {PC_THINK_LOW, "low"},       {PC_THINK_MEDIUM, "medium"},
		{PC_THINK_HIGH, "high"},       {PC_THINK_XHIGH, "xhigh"},   {PC_THINK_ADAPTIVE, "medium"},
		{PC_THINK_MAX, "xhigh"},       {PC_THINK_OFF, NULL},
	};
	for (size_t i = 0; i < sizeof(efforts) / sizeof(efforts[0]); i++) {
		p.thinking = efforts[i].l;
		cJSON *b = NULL;
		cr_assert_eq(pc_request_body_json(&p, &b), 0);
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(b, "reasoning_effort");
		if (efforts[i].effort)
			cr_assert(cJSON_IsString(e) && strcmp(e->valuestring, efforts[i].effort) == 0,
				  "level %s", pc_think_level_name(efforts[i].l));
		else
			cr_assert_null(e);
		cJSON_Delete(b);
	}
	cJSON_Delete(empty_tools);
	cJSON_Delete(m);
}

Test(request, anthropic_parameters)
{
	cJSON *m = parse("[{'role':'user','content':'hi'}]");
	pc_request_params_t p = {.api = PC_API_ANTHROPIC_MESSAGES, .model = "claude", .messages = m,
				 .has_temperature = true, .temperature = 0.25};
	char *s = body_of(&p);
	cr_assert_str_eq(s, J("{'model':'claude','max_tokens':4096,'stream':true,'messages':"
			      "[{'role':'user','content':'hi'}],'temperature':0.25}"),
			 "default max_tokens, no system, temperature kept without thinking");
	cJSON_free(s);
	/* The budget must fit under max_tokens. */
	p.thinking = PC_THINK_HIGH;
	p.max_tokens = 4096;
	s = body_of(&p);
	cr_assert_str_eq(s, J("{'model':'claude','max_tokens':4096,'stream':true,'messages':"
			      "[{'role':'user','content':'hi'}],'thinking':{'type':'enabled','budget_tokens':3072}}"));
	cJSON_free(s);
	/* No room for the 1024 minimum: no thinking, and the temperature is back. */
	p.thinking = PC_THINK_LOW;
	p.max_tokens = 1500;
	s = body_of(&p);
	cr_assert_str_eq(s, J("{'model':'claude','max_tokens':1500,'stream':true,'messages':"
			      "[{'role':'user','content':'hi'}],'temperature':0.25}"));
	cJSON_free(s);
	p.max_tokens = 100000;
	static const struct {
		pc_think_level_t l;
		int budget;
	} budgets[] = {
		{PC_THINK_MINIMAL, 1024}, {PC_THINK_LOW, 2048},      {PC_THINK_MEDIUM, 8192},
		{PC_THINK_HIGH, 16384},   {PC_THINK_XHIGH, 32768},   {PC_THINK_ADAPTIVE, 8192},
		{PC_THINK_MAX, 65536},
	};
	for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
		p.thinking = budgets[i].l;
		cJSON *b = NULL;
		cr_assert_eq(pc_request_body_json(&p, &b), 0);
		const cJSON *th = cJSON_GetObjectItemCaseSensitive(b, "thinking");
		cr_assert_eq(cJSON_GetObjectItemCaseSensitive(th, "budget_tokens")->valueint,
			     budgets[i].budget);
		cr_assert_eq(pc_think_budget_tokens(budgets[i].l), budgets[i].budget);
		cr_assert_null(cJSON_GetObjectItemCaseSensitive(b, "temperature"));
		cJSON_Delete(b);
	}
	cr_assert_eq(pc_think_budget_tokens(PC_THINK_OFF), 0);
	cJSON_Delete(m);
}

/* ---- message shapes ---- */

Test(request, thinking_replay_rules)
{
	static const char msgs[] =
		"[{'role':'user','content':'q'},"
		"{'role':'assistant','content':["
		"{'type':'thinking','thinking':'unsigned thoughts'},"
		"{'type':'thinking','thinking':'','thinkingSignature':'opaque','redacted':true},"
		"{'type':'thinking','thinking':''},"
		"{'type':'text','text':''},"
		"{'type':'text','text':'answer'}]}]";
	char *s = body_for(PC_API_ANTHROPIC_MESSAGES, msgs);
	cr_assert_str_eq(s, J("{'model':'m','max_tokens':4096,'stream':true,'messages':["
			      "{'role':'user','content':'q'},"
			      "{'role':'assistant','content':[{'type':'text','text':'unsigned thoughts'},"
			      "{'type':'redacted_thinking','data':'opaque'},{'type':'text','text':'answer'}]}]}"));
	cJSON_free(s);
	s = body_for(PC_API_OPENAI_COMPLETIONS, msgs);
	cr_assert_str_eq(s, J("{'model':'m','messages':[{'role':'user','content':'q'},"
			      "{'role':'assistant','content':'answer'}],'stream':true,"
			      "'stream_options':{'include_usage':true}}"));
	cJSON_free(s);
}

Test(request, empty_assistant_turns_are_dropped)
{
	static const char msgs[] = "[{'role':'user','content':'q'},"
				   "{'role':'assistant','content':[{'type':'text','text':''}]},"
				   "{'role':'assistant','content':[]},"
				   "{'role':'assistant','content':''},"
				   "{'role':'user','content':'again'}]";
	char *s = body_for(PC_API_OPENAI_COMPLETIONS, msgs);
	cr_assert_str_eq(s, J("{'model':'m','messages':[{'role':'user','content':'q'},"
			      "{'role':'user','content':'again'}],'stream':true,"
			      "'stream_options':{'include_usage':true}}"));
	cJSON_free(s);
	s = body_for(PC_API_ANTHROPIC_MESSAGES, msgs);
	cr_assert_str_eq(s, J("{'model':'m','max_tokens':4096,'stream':true,'messages':["
			      "{'role':'user','content':'q'},{'role':'user','content':'again'}]}"));
	cJSON_free(s);
	/* A dropped turn still ends a run of tool results: two user messages. */
	s = body_for(PC_API_ANTHROPIC_MESSAGES,
		     "[{'role':'toolResult','toolCallId':'a','content':'1'},"
		     "{'role':'assistant','content':[]},"
		     "{'role':'toolResult','toolCallId':'b','content':'2'},"
		     "{'role':'toolResult','toolCallId':'c','content':'3'}]");
	cr_assert_str_eq(s, J("{'model':'m','max_tokens':4096,'stream':true,'messages':["
			      "{'role':'user','content':[{'type':'tool_result','tool_use_id':'a',"
			      "'content':[{'type':'text','text':'1'}],'is_error':false}]},"
			      "{'role':'user','content':[{'type':'tool_result','tool_use_id':'b',"
			      "'content':[{'type':'text','text':'2'}],'is_error':false},"
			      "{'type':'tool_result','tool_use_id':'c',"
			      "'content':[{'type':'text','text':'3'}],'is_error':false}]}]}"));
	cJSON_free(s);
	/* No messages at all: an empty array. */
	s = body_for(PC_API_OPENAI_COMPLETIONS, "[]");
	cr_assert_str_eq(s, J("{'model':'m','messages':[],'stream':true,'stream_options':{'include_usage':true}}"));
	cJSON_free(s);
	/* A string assistant content is a text block. */
	s = body_for(PC_API_ANTHROPIC_MESSAGES, "[{'role':'assistant','content':'hello'}]");
	cr_assert_str_eq(s, J("{'model':'m','max_tokens':4096,'stream':true,'messages':["
			      "{'role':'assistant','content':[{'type':'text','text':'hello'}]}]}"));
	cJSON_free(s);
}

Test(request, tool_results)
{
	static const char msgs[] =
		"[{'role':'assistant','content':[{'type':'toolCall','id':'a','name':'f','arguments':{}},"
		"{'type':'toolCall','id':'b','name':'f','arguments':'not json'}]},"
		"{'role':'toolResult','toolCallId':'a','toolName':'f','content':'plain string'},"
		"{'role':'toolResult','toolCallId':'b','toolName':'f','content':[{'type':'image','data':'AA',"
		"'mimeType':'image/jpeg'},{'type':'text','text':''}],'isError':true},"
		"{'role':'user','content':'next'},"
		"{'role':'toolResult','toolCallId':'c','toolName':'f'}]";
	char *s = body_for(PC_API_ANTHROPIC_MESSAGES, msgs);
	cr_assert_str_eq(s, J(
		"{'model':'m','max_tokens':4096,'stream':true,'messages':["
		"{'role':'assistant','content':[{'type':'tool_use','id':'a','name':'f','input':{}},"
		"{'type':'tool_use','id':'b','name':'f','input':{}}]},"
		"{'role':'user','content':["
		"{'type':'tool_result','tool_use_id':'a','content':[{'type':'text','text':'plain string'}],'is_error':false},"
		"{'type':'tool_result','tool_use_id':'b','content':[{'type':'image','source':{'type':'base64',"
		"'media_type':'image/jpeg','data':'AA'}}],'is_error':true}]},"
		"{'role':'user','content':'next'},"
		"{'role':'user','content':[{'type':'tool_result','tool_use_id':'c','is_error':false}]}]}"));
	cJSON_free(s);
	s = body_for(PC_API_OPENAI_COMPLETIONS, msgs);
	cr_assert_str_eq(s, J(
		"{'model':'m','messages':["
		"{'role':'assistant','content':null,'tool_calls':["
		"{'id':'a','type':'function','function':{'name':'f','arguments':'{}'}},"
		"{'id':'b','type':'function','function':{'name':'f','arguments':'not json'}}]},"
		"{'role':'tool','tool_call_id':'a','content':'plain string'},"
		"{'role':'tool','tool_call_id':'b','content':''},"
		"{'role':'user','content':'next'},"
		"{'role':'tool','tool_call_id':'c','content':''}],"
		"'stream':true,'stream_options':{'include_usage':true}}"));
	cJSON_free(s);
	ASSERT_NO_LEAKS();
}

static int to_decoder(void *user, const pc_sse_event_t *ev)
{
	return pc_stream_decoder_feed_sse(user, ev);
}

/* A decoded stream's message goes straight back into the next request. */
Test(request, decoded_message_replays)
{
	static const char sse[] =
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
		"\"content_block\":{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"S\"}}\n\n"
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,"
		"\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{}}}\n\n"
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,"
		"\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"x\\\":1}\"}}\n\n"
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
	pc_stream_decoder_t *d = NULL;
	cr_assert_eq(pc_stream_decoder_new(PC_API_ANTHROPIC_MESSAGES, NULL, NULL, &d), 0);
	pc_sse_parser_t *sp = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, to_decoder, d, &sp), 0);
	cr_assert_eq(pc_sse_feed(sp, sse, strlen(sse)), 0);
	pc_sse_parser_free(sp);
	pc_stream_result_t r;
	cr_assert_eq(pc_stream_decoder_finish(d, &r), 0);
	cJSON *msg = NULL;
	cr_assert_eq(pc_stream_result_to_json(&r, &msg), 0);
	pc_stream_decoder_free(d);
	cJSON *msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, msg);
	pc_request_params_t p = {.api = PC_API_ANTHROPIC_MESSAGES, .model = "m", .messages = msgs};
	char *s = body_of(&p);
	cr_assert_str_eq(s, J("{'model':'m','max_tokens':4096,'stream':true,'messages':["
			      "{'role':'assistant','content':[{'type':'thinking','thinking':'hm','signature':'S'},"
			      "{'type':'tool_use','id':'toolu_1','name':'f','input':{'x':1}}]}]}"));
	cJSON_free(s);
	p.api = PC_API_OPENAI_COMPLETIONS;
	s = body_of(&p);
	cr_assert_str_eq(s, J("{'model':'m','messages':[{'role':'assistant','content':null,'tool_calls':["
			      "{'id':'toolu_1','type':'function','function':{'name':'f','arguments':'{\\'x\\':1}'}}]}],"
			      "'stream':true,'stream_options':{'include_usage':true}}"));
	cJSON_free(s);
	cJSON_Delete(msgs);
	ASSERT_NO_LEAKS();
}

Test(request, refuses_what_is_not_the_unified_model)
{
	static const char *const bad[] = {
		"[5]",
		"[{'content':'no role'}]",
		"[{'role':'system','content':'x'}]",
		"[{'role':7,'content':'x'}]",
		"[{'role':'user'}]",
		"[{'role':'user','content':5}]",
		"[{'role':'user','content':[{'type':'video'}]}]",
		"[{'role':'user','content':[{'type':'image','data':'AA'}]}]",
		"[{'role':'user','content':[5]}]",
		"[{'role':'assistant'}]",
		"[{'role':'assistant','content':[{'type':'toolCall','name':'f'}]}]",
		"[{'role':'assistant','content':[{'type':'toolCall','id':'','name':'f'}]}]",
		"[{'role':'assistant','content':[{'type':'toolCall','id':'a'}]}]",
		"[{'role':'assistant','content':[{'type':'bogus'}]}]",
		"[{'role':'toolResult','content':'x'}]",
		"[{'role':'toolResult','toolCallId':'a','content':{}}]",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(body_rc(PC_API_OPENAI_COMPLETIONS, bad[i]), PC_EINVAL, "openai: %s", bad[i]);
		cr_assert_eq(body_rc(PC_API_ANTHROPIC_MESSAGES, bad[i]), PC_EINVAL, "anthropic: %s", bad[i]);
	}
	cJSON *m = parse("[]");
	cJSON *obj = parse("{}");
	cJSON *bad_tools = parse("[{'description':'no name'}]");
	cJSON *bad_desc = parse("[{'name':'f','description':5}]");
	cJSON *out = NULL;
	pc_request_params_t p = {.api = PC_API_OPENAI_COMPLETIONS, .model = "m", .messages = m};
	cr_assert_eq(pc_request_body_json(&p, &out), 0, "an empty conversation is allowed");
	cJSON_Delete(out);
	out = NULL;
	p.model = "";
	cr_assert_eq(pc_request_body_json(&p, &out), PC_EINVAL);
	p.model = NULL;
	cr_assert_eq(pc_request_body_json(&p, &out), PC_EINVAL);
	p.model = "m";
	p.messages = obj;
	cr_assert_eq(pc_request_body_json(&p, &out), PC_EINVAL);
	p.messages = NULL;
	cr_assert_eq(pc_request_body_json(&p, &out), PC_EINVAL);
	p.messages = m;
	p.tools = obj;
	cr_assert_eq(pc_request_body_json(&p, &out), PC_EINVAL);
	for (int api = PC_API_OPENAI_COMPLETIONS; api <= PC_API_ANTHROPIC_MESSAGES; api++) {
		p.api = (pc_provider_api_t)api;
		p.tools = bad_tools;
		cr_assert_eq(pc_request_body_json(&p, &out), PC_EINVAL);
		p.tools = bad_desc;
		cr_assert_eq(pc_request_body_json(&p, &out), PC_EINVAL);
	}
	p.tools = NULL;
	p.api = PC_API_NONE;
	cr_assert_eq(pc_request_body_json(&p, &out), PC_EINVAL);
	cr_assert_eq(pc_request_body_json(NULL, &out), PC_EINVAL);
	cr_assert_eq(pc_request_body_json(&p, NULL), PC_EINVAL);
	cr_assert_eq(pc_request_body(&p, NULL), PC_EINVAL);
	cr_assert_null(out);
	cJSON_Delete(m);
	cJSON_Delete(obj);
	cJSON_Delete(bad_tools);
	cJSON_Delete(bad_desc);
	ASSERT_NO_LEAKS();
}

/* Fails cJSON's allocations after the first `n` (n < 0: never), so every
 * cleanup path that follows a failed cJSON call runs. */
static long oom_left = -1;

static void *oom_malloc(size_t size)
{
	if (oom_left == 0)
		return NULL;
	if (oom_left > 0)
		oom_left--;
	return malloc(size);
}

static void oom_arm(long n)
{
	oom_left = n;
	cJSON_Hooks h = {.malloc_fn = oom_malloc, .free_fn = free};
	cJSON_InitHooks(&h);
}

static void oom_disarm(void)
{
	oom_left = -1;
	cJSON_InitHooks(NULL);
}

Test(request, more_shapes)
{
	/* A tool call without arguments has empty ones. */
	static const char msgs[] = "[{'role':'assistant','content':[{'type':'toolCall','id':'a','name':'f'},"
				   "{'type':'thinking','thinkingSignature':'S'}]}]";
	char *s = body_for(PC_API_OPENAI_COMPLETIONS, msgs);
	cr_assert(strstr(s, J("'arguments':'{}'")), "%s", s);
	cJSON_free(s);
	s = body_for(PC_API_ANTHROPIC_MESSAGES, msgs);
	cr_assert(strstr(s, J("{'type':'tool_use','id':'a','name':'f','input':{}},"
			      "{'type':'thinking','thinking':'','signature':'S'}")),
		  "%s", s);
	cJSON_free(s);
	/* A text block must have its text. */
	cr_assert_eq(body_rc(PC_API_ANTHROPIC_MESSAGES, "[{'role':'assistant','content':[{'type':'text'}]}]"),
		     PC_EINVAL);
}

/* Every allocation fails in turn, on messages never converted before (a
 * conversion is kept on the message, so reusing them would skip it). */
static void sweep_body(pc_provider_api_t api)
{
	cJSON *m = parse(conversation), *t = parse(tools);
	pc_request_params_t p = {.api = api, .model = "m", .system_prompt = "sys", .messages = m,
				 .tools = t, .max_tokens = 100000, .thinking = PC_THINK_LOW,
				 .has_temperature = true, .temperature = 1};
	char *want = body_of(&p);
	cJSON_Delete(m);
	for (long n = 0;; n++) {
		cJSON *out = NULL;
		p.messages = m = parse(conversation);
		oom_arm(n);
		int rc = pc_request_body_json(&p, &out);
		oom_disarm();
		if (rc == 0) {
			char *got = cJSON_PrintUnformatted(out);
			cr_assert_str_eq(got, want, "after %ld allocations", n);
			cJSON_free(got);
			cJSON_Delete(out);
			cr_assert_gt(n, 20, "the sweep ran");
			break;
		}
		cr_assert_eq(rc, PC_ENOMEM, "allocation %ld: %s", n, pc_strerror(rc));
		cr_assert_null(out);
		cr_assert_lt(n, 100000);
		char *again = body_of(&p);
		cr_assert_str_eq(again, want, "a failed build leaves the messages whole (allocation %ld)", n);
		cJSON_free(again);
		cJSON_Delete(m);
	}
	cJSON_free(want);
	cJSON_Delete(m);
	cJSON_Delete(t);
	ASSERT_NO_LEAKS();
}

Test(request, out_of_memory_openai)
{
	sweep_body(PC_API_OPENAI_COMPLETIONS);
}

Test(request, out_of_memory_anthropic)
{
	sweep_body(PC_API_ANTHROPIC_MESSAGES);
}

/* ---- headers ---- */

static void expect_headers(char **h, const char *const *want)
{
	size_t i = 0;
	for (; want[i]; i++) {
		cr_assert(h[i], "header %zu missing", i);
		cr_assert_str_eq(h[i], want[i]);
	}
	cr_assert_null(h[i], "NULL-terminated, nothing extra");
}

Test(request, headers)
{
	char **h = NULL;
	cr_assert_eq(pc_request_headers(PC_API_OPENAI_COMPLETIONS, "sk-test", &h), 0);
	expect_headers(h, (const char *const[]){"Content-Type: application/json",
						 "Accept: text/event-stream",
						 "Authorization: Bearer sk-test", NULL});
	pc_request_headers_free(h);
	cr_assert_eq(pc_request_headers(PC_API_ANTHROPIC_MESSAGES, "sk-ant", &h), 0);
	expect_headers(h, (const char *const[]){"content-type: application/json",
						 "accept: text/event-stream",
						 "anthropic-version: 2023-06-01", "x-api-key: sk-ant", NULL});
	pc_request_headers_free(h);
	/* No key: a local server. */
	cr_assert_eq(pc_request_headers(PC_API_OPENAI_COMPLETIONS, NULL, &h), 0);
	expect_headers(h, (const char *const[]){"Content-Type: application/json",
						 "Accept: text/event-stream", NULL});
	pc_request_headers_free(h);
	cr_assert_eq(pc_request_headers(PC_API_ANTHROPIC_MESSAGES, "", &h), 0);
	expect_headers(h, (const char *const[]){"content-type: application/json",
						 "accept: text/event-stream",
						 "anthropic-version: 2023-06-01", NULL});
	pc_request_headers_free(h);
	/* Header injection is refused. */
	h = NULL;
	cr_assert_eq(pc_request_headers(PC_API_OPENAI_COMPLETIONS, "k\r\nX-Evil: 1", &h), PC_EINVAL);
	cr_assert_eq(pc_request_headers(PC_API_ANTHROPIC_MESSAGES, "k\n", &h), PC_EINVAL);
	cr_assert_eq(pc_request_headers(PC_API_ANTHROPIC_MESSAGES, "k\x7f", &h), PC_EINVAL);
	cr_assert_null(h);
	cr_assert_eq(pc_request_headers(PC_API_NONE, "k", &h), PC_EINVAL);
	cr_assert_eq(pc_request_headers(PC_API_OPENAI_COMPLETIONS, "k", NULL), PC_EINVAL);
	pc_request_headers_free(NULL);
	ASSERT_NO_LEAKS();
}

/* ---- levels and APIs ---- */

Test(request, think_levels)
{
	static const char *const names[] = {"off", "minimal", "low", "medium",
					    "high", "xhigh", "adaptive", "max"};
	for (int i = 0; i < 8; i++) {
		pc_think_level_t l;
		cr_assert_eq(pc_think_level_parse(names[i], &l), 0);
		cr_assert_eq(l, (pc_think_level_t)i);
		cr_assert_str_eq(pc_think_level_name(l), names[i]);
	}
	static const char *const xhigh[] = {"x-high", "x_high", "extra-high", "extra high",
					    "extra_high", " XHigh ", "Extra High"};
	for (size_t i = 0; i < sizeof(xhigh) / sizeof(xhigh[0]); i++) {
		pc_think_level_t l = PC_THINK_OFF;
		cr_assert_eq(pc_think_level_parse(xhigh[i], &l), 0, "%s", xhigh[i]);
		cr_assert_eq(l, PC_THINK_XHIGH, "%s", xhigh[i]);
	}
	pc_think_level_t l;
	cr_assert_eq(pc_think_level_parse("highest", &l), 0);
	cr_assert_eq(l, PC_THINK_HIGH);
	cr_assert_eq(pc_think_level_parse("HIGH", &l), 0);
	cr_assert_eq(l, PC_THINK_HIGH);
	cr_assert_eq(pc_think_level_parse("ultra-mega", &l), PC_ENOTFOUND);
	cr_assert_eq(pc_think_level_parse("", &l), PC_ENOTFOUND);
	cr_assert_eq(pc_think_level_parse("a very long string that is no level at all", &l),
		     PC_ENOTFOUND);
	cr_assert_eq(pc_think_level_parse(NULL, &l), PC_EINVAL);
	cr_assert_eq(pc_think_level_parse("low", NULL), PC_EINVAL);
	cr_assert_str_eq(pc_think_level_name((pc_think_level_t)42), "off");
}

Test(request, provider_apis)
{
	pc_provider_api_t a;
	cr_assert_str_eq(pc_provider_api_name(PC_API_OPENAI_COMPLETIONS), "openai-completions");
	cr_assert_str_eq(pc_provider_api_name(PC_API_ANTHROPIC_MESSAGES), "anthropic-messages");
	cr_assert_str_eq(pc_provider_api_name(PC_API_NONE), "none");
	cr_assert_eq(pc_provider_api_parse("anthropic-messages", &a), 0);
	cr_assert_eq(a, PC_API_ANTHROPIC_MESSAGES);
	cr_assert_eq(pc_provider_api_parse("openai-completions", &a), 0);
	cr_assert_eq(a, PC_API_OPENAI_COMPLETIONS);
	cr_assert_eq(pc_provider_api_parse("openai-responses", &a), PC_ENOTFOUND);
	cr_assert_eq(pc_provider_api_parse(NULL, &a), PC_EINVAL);
	cr_assert_str_eq(pc_provider_api_path(PC_API_OPENAI_COMPLETIONS), "/chat/completions");
	cr_assert_str_eq(pc_provider_api_path(PC_API_ANTHROPIC_MESSAGES), "/v1/messages");
	cr_assert_null(pc_provider_api_path(PC_API_NONE));
}

/* Every API has a complete table, found by id and by name; what is shared
 * reaches a format only through it. */
Test(request, wire_tables)
{
	for (int api = PC_API_NONE + 1; api < PC_API_COUNT; api++) {
		const pc_provider_wire_t *w = pc_provider_wire((pc_provider_api_t)api);
		cr_assert_not_null(w, "api %d", api);
		cr_assert_eq(w->api, (pc_provider_api_t)api);
		const char *name = pc_provider_api_name((pc_provider_api_t)api);
		cr_assert_str_neq(name, "none", "api %d has no name", api);
		cr_assert_eq(pc_provider_wire_named(name), w);
		cr_assert(w->path && w->path[0] == '/', "%s", name);
		cr_assert(w->headers && w->headers[0] && w->cut_short, "%s", name);
		cr_assert(w->build_body && w->build_tools && w->feed && w->parse_error, "%s", name);
	}
	cr_assert_null(pc_provider_wire(PC_API_NONE));
	cr_assert_null(pc_provider_wire(PC_API_COUNT));
	cr_assert_null(pc_provider_wire_named("openai-responses"));
	cr_assert_null(pc_provider_wire_named(NULL));
	char names[64];
	pc_provider_api_names(" or ", names, sizeof(names));
	cr_assert_str_eq(names, "openai-completions or anthropic-messages");
	pc_provider_api_names(", ", names, 10);
	cr_assert_str_eq(names, "openai-co");

	/* an error answer, read by the format and written as the SDKs do */
	static const char an[] = "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
				 "\"message\":\"Overloaded\"}}";
	pc_provider_error_t e;
	pc_provider_wire(PC_API_ANTHROPIC_MESSAGES)->parse_error(529, an, strlen(an), &e);
	cr_assert_str_eq(e.message, "Overloaded");
	cr_assert_str_eq(e.type, "overloaded_error");
	char text[256];
	pc_provider_error_text(529, &e, text, sizeof(text));
	cr_assert_str_eq(text, "529 Overloaded (overloaded_error)");
	static const char oa[] = "{\"error\":{\"message\":\"Rate limit\",\"type\":\"requests\",\"code\":429}}";
	pc_provider_wire(PC_API_OPENAI_COMPLETIONS)->parse_error(429, oa, strlen(oa), &e);
	cr_assert_str_eq(e.code, "429");
	pc_provider_error_text(429, &e, text, sizeof(text));
	cr_assert_str_eq(text, "429 Rate limit (requests, 429)");
	pc_provider_wire(PC_API_OPENAI_COMPLETIONS)->parse_error(502, NULL, 0, &e);
	pc_provider_error_text(502, &e, text, sizeof(text));
	cr_assert_str_eq(text, "502 status code (no body)");
}
