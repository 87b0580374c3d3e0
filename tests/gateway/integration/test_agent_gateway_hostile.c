/*
 * Every method hello-ok lists, called with hostile params by a client
 * that holds every scope: params of the wrong JSON type, fields of the
 * wrong types, out-of-range numbers, over-long and path-like strings,
 * malformed dates, deep nesting. Each request must get exactly its answer
 * (ok, or an error with a message), the connection must stay open, and
 * afterwards the gateway must still serve a plain request and stop
 * without a leak (gw_stop) or a refused lifecycle transition.
 */
#include <criterion/criterion.h>

#include "gateway_harness.h"

#define ALL_SCOPES "[\"operator.admin\",\"operator.approvals\",\"operator.pairing\"]"

/* Hostile params, as JSON text; "%s" is replaced by a fresh idempotency
 * key where a method would start a run with them. */
static const char *const hostile[] = {
	NULL, /* no params at all */
	"[]",
	"\"params\"",
	"42",
	"null",
	"{}",
	"{\"sessionKey\":123,\"key\":{},\"limit\":-1,\"maxBytes\":1e308,\"offset\":-5,\"runId\":\"\","
	"\"sessionId\":null,\"inputRunIds\":[1,2,{}],\"days\":-5,\"agentId\":[],\"idempotencyKey\":\"%s\"}",
	"{\"sessionKey\":\"../../etc/passwd\",\"key\":\"..\\\\..\",\"deviceId\":\"../x\",\"requestId\":\"%%2e%%2e\","
	"\"runId\":\"run/../../x\",\"message\":\"m\",\"idempotencyKey\":\"%s\",\"role\":\"node\"}",
	"{\"startDate\":\"2026-13-45\",\"endDate\":\"0000-00-00\",\"range\":\"zz\",\"limit\":1e30,"
	"\"cursor\":\"\\u0000\",\"mode\":7,\"utcOffset\":\"UTC+99:99\",\"timeZone\":{}}",
	"{\"sessionKey\":\"k\",\"limit\":\"10\",\"offset\":\"x\",\"maxBytes\":true,\"includeApprovals\":\"yes\","
	"\"queueMode\":\"sideways\",\"thinking\":\"ultra\",\"timeoutMs\":-1,\"scopes\":[1,2]}",
	"{\"sessionKey\":\"k\",\"message\":\"m\",\"idempotencyKey\":\"%s\",\"attachments\":[{\"type\":\"image\"}],"
	"\"shortId\":\"\",\"slugHint\":\"\",\"label\":\"\",\"model\":\"nope/none\"}",
};

/* A string of n copies of 'x', as a JSON object's "sessionKey" and "key"
 * and "runId" and "deviceId" and "requestId". */
static cJSON *long_strings(size_t n)
{
	char *s = malloc(n + 1);
	cr_assert_not_null(s);
	memset(s, 'x', n);
	s[n] = '\0';
	cJSON *p = cJSON_CreateObject();
	const char *names[] = {"sessionKey", "key", "runId", "deviceId", "requestId", "sessionId", "message"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		cJSON_AddStringToObject(p, names[i], s);
	free(s);
	return p;
}

/* {"a":{"a":{...}}} `depth` deep. */
static cJSON *deep(int depth)
{
	cJSON *p = cJSON_CreateObject();
	cJSON *at = p;
	for (int i = 0; i < depth; i++)
		at = cJSON_AddObjectToObject(at, "a");
	return p;
}

static unsigned answered_ok, refused;

/* Sends `params` (taken) to `method` and checks its one answer. */
static void expect_answer(cl_t *c, const char *method, cJSON *params, const char *what)
{
	char id[32];
	cl_req(c, method, params, id);
	cJSON *r = cl_await_res(c, id, 15000);
	cr_assert_not_null(r, "%s with %s: no answer", method, what);
	cr_assert(cJSON_IsBool(jget(r, "ok")), "%s with %s: answer without ok", method, what);
	answered_ok += jok(r);
	refused += !jok(r);
	if (!jok(r))
		cr_assert_str_neq(jstr(jget(r, "error"), "message"), "", "%s with %s: an error without a message",
				  method, what);
	cJSON_Delete(r);
	/* what went out meanwhile (run events) is not this test's */
	cJSON_Delete(c->events);
	c->events = cJSON_CreateArray();
}

Test(agent_gateway_hostile, every_method_answers_hostile_params_and_the_gateway_goes_on, .timeout = 600)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_open(f.port);
	cJSON *hello = cl_handshake(c, connect_params(GW_TOKEN, ALL_SCOPES));
	cr_assert(jok(hello), "connect refused");
	cJSON *methods = cJSON_Duplicate(jget(jget(jget(hello, "payload"), "features"), "methods"), true);
	cJSON_Delete(hello);
	cr_assert_gt(cJSON_GetArraySize(methods), 30);
	unsigned key = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, methods) {
		const char *name = m->valuestring;
		for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
			cJSON *params = NULL;
			if (hostile[i]) {
				char text[1024], idem[32];
				snprintf(idem, sizeof(idem), "hostile-%u", ++key);
				snprintf(text, sizeof(text), hostile[i], idem);
				params = cJSON_Parse(text);
				cr_assert_not_null(params, "bad fixture %zu", i);
			}
			expect_answer(c, name, params, hostile[i] ? hostile[i] : "no params");
		}
		expect_answer(c, name, long_strings(60000), "60,000-byte strings");
		expect_answer(c, name, deep(500), "500 nested objects");
	}
	cr_log_info("%d methods: %u hostile calls answered ok, %u refused", cJSON_GetArraySize(methods), answered_ok,
		    refused);
	cJSON_Delete(methods);
	cJSON *h = cl_call(c, "health", NULL);
	cr_assert(jok(h), "health after the hostile calls");
	cJSON_Delete(h);
	cl_free(c);
	/* a fresh client is served too */
	cl_t *d = cl_connect(f.port);
	cJSON *s = cl_call(d, "status", NULL);
	cr_assert(jok(s));
	cJSON_Delete(s);
	cl_free(d);
	gw_stop(&f);
}
