/*
 * What OpenClaw's Control UI and CLI read about the gateway, answered in
 * OpenClaw's shapes: the assistant's identity, the agents, the running
 * configuration with its secrets withheld (and every write refused), the
 * providers' keys, the missing updater, the stability figures, the cost
 * summary summed from the runs' usage records, the host it runs on, the
 * honest empty answers of the features Pincer lacks (the scheduler's pages
 * of the size asked), and `agent` addressed by sessionId.
 */
#include <criterion/criterion.h>

#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "gateway_harness.h"

TestSuite(agent_gateway_info, .timeout = 300);

#define PROVIDER_KEY "sk-provider-secret-4711"
#define ALL_SCOPES "[\"operator.admin\",\"operator.approvals\"]"

/* A configuration with a provider key and the gateway token to withhold. */
#define INFO_CONFIG                                                                                     \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"" PROVIDER_KEY \
	"\"},\"keyless\":{\"api\":\"openai-completions\",\"baseUrl\":\"http://127.0.0.1:9/v1\"}},"         \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":16,\"sessionIdleSeconds\":1}},"  \
	"\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" GW_TOKEN "\"}}}"

static cJSON *payload_of(cJSON *res)
{
	cr_assert(jok(res), "%s", cJSON_PrintUnformatted(res));
	return cJSON_DetachItemFromObject(res, "payload");
}

/* The payload of a call that must succeed (the caller deletes it). */
static cJSON *call_ok(cl_t *c, const char *method, cJSON *params)
{
	cJSON *r = cl_call(c, method, params);
	cJSON *p = payload_of(r);
	cJSON_Delete(r);
	cr_assert_not_null(p, "%s: no payload", method);
	return p;
}

/* Runs `message` in session `key` (or by `sid`) to its end; its run id
 * into run_out. */
static void run_to_end(cl_t *c, const char *message, const char *idem, const char *key, const char *sid,
		       char *run_out, size_t cap)
{
	cJSON *p = agent_params(message, idem, key);
	if (sid)
		cJSON_AddStringToObject(p, "sessionId", sid);
	char id[32];
	cl_req(c, "agent", p, id);
	cJSON *r1 = cl_await_res(c, id, 30000);
	cr_assert_not_null(r1, "no first answer");
	cr_assert(jok(r1), "%s", cJSON_PrintUnformatted(r1));
	snprintf(run_out, cap, "%s", jstr(jget(r1, "payload"), "runId"));
	cJSON_Delete(r1);
	cJSON *r2 = cl_await_res(c, id, 30000);
	cr_assert_not_null(r2, "no final answer");
	cr_assert(jok(r2), "%s", cJSON_PrintUnformatted(r2));
	cr_assert_str_eq(jstr(jget(r2, "payload"), "status"), "ok");
	cJSON_Delete(r2);
}

Test(agent_gateway_info, identity_and_agents_name_the_one_agent)
{
	gw_t f;
	gw_start(&f, INFO_CONFIG, NULL);
	cl_t *c = cl_connect(f.port);
	cJSON *p = call_ok(c, "agent.identity.get", NULL);
	cr_assert_str_eq(jstr(p, "agentId"), "main");
	cr_assert_str_eq(jstr(p, "name"), "Assistant");
	cr_assert_str_eq(jstr(p, "avatar"), "A");
	cJSON_Delete(p);
	cJSON *q = cJSON_CreateObject();
	cJSON_AddStringToObject(q, "agentId", "main");
	cJSON_AddStringToObject(q, "sessionKey", "s1");
	p = call_ok(c, "agent.identity.get", q);
	cr_assert_str_eq(jstr(p, "agentId"), "main");
	cJSON_Delete(p);
	char id[32];
	q = cJSON_CreateObject();
	cJSON_AddStringToObject(q, "agentId", "ops");
	cl_req(c, "agent.identity.get", q, id);
	cl_expect_invalid(c, id, "unknown agent", 10000);

	p = call_ok(c, "agents.list", NULL);
	cr_assert_str_eq(jstr(p, "defaultId"), "main");
	cr_assert_str_eq(jstr(p, "mainKey"), "main");
	const cJSON *agents = jget(p, "agents");
	cr_assert_eq(cJSON_GetArraySize(agents), 1);
	const cJSON *a = cJSON_GetArrayItem(agents, 0);
	cr_assert_str_eq(jstr(a, "id"), "main");
	cr_assert_str_eq(jstr(jget(a, "identity"), "name"), "Assistant");
	cr_assert_str_eq(jstr(jget(a, "model"), "primary"), "mock/m1");
	cr_assert_str_neq(jstr(a, "workspace"), "");
	cJSON_Delete(p);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_info, config_get_withholds_every_secret_and_writes_are_refused)
{
	gw_t f;
	gw_start(&f, INFO_CONFIG, NULL);
	cl_t *c = cl_connect_scopes(f.port, ALL_SCOPES);
	cJSON *p = call_ok(c, "config.get", NULL);
	char *text = cJSON_PrintUnformatted(p);
	cr_assert_null(strstr(text, PROVIDER_KEY), "the provider key was sent: %s", text);
	cr_assert_null(strstr(text, GW_TOKEN), "the gateway token was sent: %s", text);
	cJSON_free(text);
	cr_assert(cJSON_IsTrue(jget(p, "valid")));
	cr_assert(cJSON_IsArray(jget(p, "issues")));
	const cJSON *conf = jget(p, "config");
	const cJSON *mock = jget(jget(conf, "providers"), "mock");
	cr_assert_str_eq(jstr(mock, "api"), "openai-completions");
	const cJSON *prof = cJSON_GetArrayItem(jget(mock, "profiles"), 0);
	cr_assert_str_eq(jstr(prof, "apiKey"), "__OPENCLAW_REDACTED__");
	cr_assert_str_eq(jstr(jget(jget(conf, "gateway"), "auth"), "token"), "__OPENCLAW_REDACTED__");
	cr_assert_str_eq(jstr(jget(jget(conf, "agents"), "defaults"), "model"), "mock/m1");
	/* raw is the same configuration as text, withheld the same way */
	const char *raw = jstr(p, "raw");
	cr_assert_null(strstr(raw, PROVIDER_KEY));
	cr_assert_not_null(strstr(raw, "__OPENCLAW_REDACTED__"));
	cJSON_Delete(p);

	const char *writes[] = {"config.set", "config.patch", "config.apply"};
	for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
		cJSON *q = cJSON_CreateObject();
		cJSON_AddStringToObject(q, "raw", "{}");
		char id[32];
		cl_req(c, writes[i], q, id);
		cl_expect_invalid(c, id, "read-only", 10000);
	}
	/* still as it was */
	p = call_ok(c, "config.get", NULL);
	cr_assert_str_eq(jstr(jget(jget(jget(p, "config"), "agents"), "defaults"), "model"), "mock/m1");
	cJSON_Delete(p);
	cl_free(c);

	/* a write needs admin before it is refused for what it is */
	cl_t *r = cl_connect_scopes(f.port, "[\"operator.read\"]");
	cJSON *res = cl_call(r, "config.set", NULL);
	cr_assert_str_eq(jerr(res), "FORBIDDEN");
	cJSON_Delete(res);
	cl_free(r);
	gw_stop(&f);
}

Test(agent_gateway_info, auth_status_says_which_providers_have_a_key_and_update_status_that_none_updates)
{
	gw_t f;
	gw_start(&f, INFO_CONFIG, NULL);
	cl_t *c = cl_connect_scopes(f.port, ALL_SCOPES);
	cJSON *p = call_ok(c, "models.authStatus", NULL);
	char *text = cJSON_PrintUnformatted(p);
	cr_assert_null(strstr(text, PROVIDER_KEY), "%s", text);
	cJSON_free(text);
	cr_assert_gt(jnum(p, "ts"), 1.6e12);
	const cJSON *pv;
	int seen = 0;
	cJSON_ArrayForEach(pv, jget(p, "providers")) {
		const char *want = !strcmp(jstr(pv, "provider"), "mock") ? "static" : "missing";
		cr_assert_str_eq(jstr(pv, "status"), want, "%s", jstr(pv, "provider"));
		const cJSON *prof = cJSON_GetArrayItem(jget(pv, "profiles"), 0);
		cr_assert_str_eq(jstr(prof, "status"), want);
		cr_assert_str_eq(jstr(prof, "type"), "api_key");
		seen++;
	}
	cr_assert_eq(seen, 2);
	cJSON_Delete(p);
	p = call_ok(c, "update.status", NULL);
	cr_assert(cJSON_IsNull(jget(p, "sentinel")));
	cr_assert(cJSON_IsNull(jget(p, "updateAvailable")));
	cJSON_Delete(p);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_info, stability_reports_the_runs_made)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char run[80];
	run_to_end(c, "hello", "stab-1", "stab", NULL, run, sizeof(run));
	cJSON *q = cJSON_CreateObject();
	cJSON_AddNumberToObject(q, "limit", 25);
	cJSON *p = call_ok(c, "diagnostics.stability", q);
	cr_assert_str_neq(jstr(p, "generatedAt"), "");
	cr_assert_eq(jnum(p, "count"), 0);
	cr_assert_eq(cJSON_GetArraySize(jget(p, "events")), 0);
	cr_assert(cJSON_IsObject(jget(jget(p, "summary"), "byType")));
	const cJSON *mem = jget(jget(p, "summary"), "memory");
	cr_assert_gt(jnum(jget(mem, "latest"), "rssBytes"), 0);
	cr_assert_geq(jnum(mem, "maxRssBytes"), jnum(jget(mem, "latest"), "rssBytes"));
	/* an ISO 8601 UTC time, as OpenClaw's Date.toISOString() */
	cr_assert_eq(strlen(jstr(p, "generatedAt")), 24, "%s", jstr(p, "generatedAt"));
	const cJSON *pin = jget(p, "pincer");
	cr_assert_gt(jnum(pin, "uptimeMs"), 0);
	const cJSON *runs = jget(pin, "runs");
	cr_assert_eq(jnum(runs, "started"), 1);
	cr_assert_eq(jnum(runs, "finished"), 1);
	cr_assert_eq(jnum(runs, "ok"), 1);
	cr_assert_eq(jnum(runs, "error"), 0);
	cr_assert_gt(jnum(jget(pin, "actors"), "live"), 0);
	cJSON_Delete(p);
	q = cJSON_CreateObject();
	cJSON_AddNumberToObject(q, "limit", 0);
	char id[32];
	cl_req(c, "diagnostics.stability", q, id);
	cl_expect_invalid(c, id, "limit", 10000);
	cl_free(c);
	gw_stop(&f);
}

/* usage.run's totals of `run`. */
static void run_usage(cl_t *c, const char *run, double *tokens, double *input, double *output)
{
	cJSON *q = cJSON_CreateObject();
	cJSON_AddStringToObject(q, "runId", run);
	cJSON *p = call_ok(c, "usage.run", q);
	cr_assert_eq(jnum(p, "count"), 1);
	*tokens += jnum(jget(p, "totals"), "total");
	*input += jnum(jget(p, "totals"), "input");
	*output += jnum(jget(p, "totals"), "output");
	cJSON_Delete(p);
}

static cJSON *dates(const char *start, const char *end)
{
	cJSON *q = cJSON_CreateObject();
	cJSON_AddStringToObject(q, "startDate", start);
	cJSON_AddStringToObject(q, "endDate", end);
	return q;
}

Test(agent_gateway_info, usage_cost_sums_the_runs_usage_by_day)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char r1[80], r2[80];
	run_to_end(c, "first question about costs", "cost-1", "cost-a", NULL, r1, sizeof(r1));
	run_to_end(c, "second, longer question about what it all costs", "cost-2", "cost-b", NULL, r2, sizeof(r2));
	double tokens = 0, input = 0, output = 0;
	run_usage(c, r1, &tokens, &input, &output);
	run_usage(c, r2, &tokens, &input, &output);
	cr_assert_gt(tokens, 0);

	cJSON *q = cJSON_CreateObject();
	cJSON_AddNumberToObject(q, "days", 1);
	cJSON *p = call_ok(c, "usage.cost", q);
	cr_assert_eq(jnum(p, "days"), 1);
	cr_assert_gt(jnum(p, "updatedAt"), 1.6e12);
	const cJSON *t = jget(p, "totals");
	cr_assert_eq(jnum(t, "totalTokens"), tokens);
	cr_assert_eq(jnum(t, "input"), input);
	cr_assert_eq(jnum(t, "output"), output);
	cr_assert_eq(jnum(t, "totalCost"), 0);
	cr_assert_eq(jnum(t, "missingCostEntries"), 2, "no price is known: every record lacks a cost");
	const cJSON *daily = jget(p, "daily");
	cr_assert_eq(cJSON_GetArraySize(daily), 1);
	const cJSON *d0 = cJSON_GetArrayItem(daily, 0);
	char today[16];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(today, sizeof(today), "%Y-%m-%d", &tm);
	cr_assert_str_eq(jstr(d0, "date"), today);
	cr_assert_eq(jnum(d0, "totalTokens"), tokens);
	cJSON_Delete(p);

	/* the default is 30 days, today included */
	p = call_ok(c, "usage.cost", NULL);
	cr_assert_eq(jnum(p, "days"), 30);
	cr_assert_eq(jnum(jget(p, "totals"), "totalTokens"), tokens);
	cJSON_Delete(p);
	/* explicit dates: today's records count, a past window has none */
	p = call_ok(c, "usage.cost", dates(today, today));
	cr_assert_eq(jnum(jget(p, "totals"), "totalTokens"), tokens);
	cJSON_Delete(p);
	p = call_ok(c, "usage.cost", dates("2001-02-03", "2001-02-04"));
	cr_assert_eq(jnum(p, "days"), 2);
	cr_assert_eq(jnum(jget(p, "totals"), "totalTokens"), 0);
	cr_assert_eq(cJSON_GetArraySize(jget(p, "daily")), 0);
	cJSON_Delete(p);

	char id[32];
	cl_req(c, "usage.cost", dates("2001-02-04", "2001-02-03"), id);
	cl_expect_invalid(c, id, "startDate must not be after endDate", 10000);
	cl_req(c, "usage.cost", dates("2001-02-30", "2001-03-01"), id);
	cl_expect_invalid(c, id, "YYYY-MM-DD", 10000);
	q = cJSON_CreateObject();
	cJSON_AddStringToObject(q, "startDate", "2001-02-03");
	cl_req(c, "usage.cost", q, id);
	cl_expect_invalid(c, id, "together", 10000);
	q = cJSON_CreateObject();
	cJSON_AddStringToObject(q, "agentId", "ops");
	cl_req(c, "usage.cost", q, id);
	cl_expect_invalid(c, id, "unknown agent", 10000);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_info, features_pincer_lacks_answer_openclaw_empty_results)
{
	static const struct {
		const char *method, *answer;
	} empty[] = {
		{"talk.catalog", "{\"modes\":[],\"transports\":[],\"brains\":[],\"speech\":{\"providers\":[]},"
				 "\"transcription\":{\"ready\":false,\"providers\":[]},"
				 "\"realtime\":{\"ready\":false,\"providers\":[]}}"},
		{"question.list", "{\"questions\":[]}"},
		{"exec.approval.list", "[]"},
		{"plugin.approval.list", "[]"},
		{"openclaw.approval.list", "[]"},
		{"cron.status", "{\"enabled\":false,\"triggersEnabled\":false,\"jobs\":0,\"nextWakeAtMs\":null}"},
		{"tasks.list", "{\"tasks\":[]}"},
		{"progressCard.get", "{\"card\":null}"},
		{"sessions.branches.list", "{\"branches\":[]}"},
		{"sessions.companion.state", "{\"exchanges\":[]}"},
		{"environments.list", "{\"environments\":[]}"},
		{"plugins.list", "{\"plugins\":[],\"diagnostics\":[],\"mutationAllowed\":false}"},
		{"plugins.catalog.browse", "{\"items\":[]}"},
		/* these two also carry `ts`, compared apart */
		{"node.list", "{\"nodes\":[]}"},
		{"channels.status", "{\"channelOrder\":[],\"channelLabels\":{},\"channels\":{},\"channelAccounts\":{},"
				    "\"channelDefaultAccountId\":{}}"},
	};
	double before = (double)time(NULL) * 1000.0 - 1000.0;
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect_scopes(f.port, ALL_SCOPES);
	for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
		cJSON *q = cJSON_CreateObject();
		cJSON_AddStringToObject(q, "sessionKey", "main");
		cJSON *p = call_ok(c, empty[i].method, q);
		if (!strcmp(empty[i].method, "node.list") || !strcmp(empty[i].method, "channels.status")) {
			cr_assert_geq(jnum(p, "ts"), before, "%s: ts is not now", empty[i].method);
			cJSON_DeleteItemFromObject(p, "ts");
		}
		cJSON *want = cJSON_Parse(empty[i].answer);
		char *got = cJSON_PrintUnformatted(p);
		cr_assert(cJSON_Compare(p, want, true), "%s answered %s", empty[i].method, got);
		cJSON_free(got);
		cJSON_Delete(want);
		cJSON_Delete(p);
	}
	/* their actions stay unknown: nothing pretends to have been done */
	cJSON *r = cl_call(c, "cron.add", NULL);
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cJSON_Delete(r);
	cl_free(c);
	/* the approvals need their scope like OpenClaw's */
	c = cl_connect_scopes(f.port, "[\"operator.read\"]");
	r = cl_call(c, "exec.approval.list", NULL);
	cr_assert_str_eq(jerr(r), "FORBIDDEN");
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

/* cron.list's page, which OpenClaw's Control UI checks against the limit
 * and offset it asked for. */
static cJSON *cron_page(cl_t *c, const char *method, int limit, int offset)
{
	cJSON *q = cJSON_CreateObject();
	if (limit >= 0)
		cJSON_AddNumberToObject(q, "limit", limit);
	if (offset >= 0)
		cJSON_AddNumberToObject(q, "offset", offset);
	cJSON_AddBoolToObject(q, "includeDisabled", true);
	return call_ok(c, method, q);
}

Test(agent_gateway_info, cron_pages_are_empty_pages_of_the_size_asked)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	cJSON *p = cron_page(c, "cron.list", -1, -1);
	cJSON *want = cJSON_Parse("{\"jobs\":[],\"snapshotRevision\":\"sha256:T1PNoYwrqgwDVLtfmj7L5e0Sq02OEbqHPC8RFhICuUU\","
				  "\"total\":0,\"offset\":0,\"limit\":50,\"hasMore\":false,\"nextOffset\":null}");
	cr_assert(cJSON_Compare(p, want, true), "cron.list answered %s", cJSON_PrintUnformatted(p));
	cJSON_Delete(want);
	cJSON_Delete(p);
	/* the limit asked comes back; an offset past the (empty) list is 0 */
	p = cron_page(c, "cron.list", 7, 3);
	cr_assert_eq(jnum(p, "limit"), 7);
	cr_assert_eq(jnum(p, "offset"), 0);
	cJSON_Delete(p);
	p = cron_page(c, "cron.runs", 5, 0);
	want = cJSON_Parse("{\"entries\":[],\"total\":0,\"offset\":0,\"limit\":5,\"hasMore\":false,\"nextOffset\":null}");
	cr_assert(cJSON_Compare(p, want, true), "cron.runs answered %s", cJSON_PrintUnformatted(p));
	cJSON_Delete(want);
	cJSON_Delete(p);
	/* OpenClaw's bounds of a page */
	char id[32];
	cJSON *q = cJSON_CreateObject();
	cJSON_AddNumberToObject(q, "limit", 201);
	cl_req(c, "cron.list", q, id);
	cl_expect_invalid(c, id, "limit: must be between 1 and 200", 10000);
	q = cJSON_CreateObject();
	cJSON_AddNumberToObject(q, "limit", 0);
	cl_req(c, "cron.runs", q, id);
	cl_expect_invalid(c, id, "limit: must be between 1 and 200", 10000);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_info, system_info_describes_the_host_and_process)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	cJSON *p = call_ok(c, "system.info", NULL);
	struct utsname u;
	cr_assert_eq(uname(&u), 0);
	cr_assert_str_eq(jstr(p, "hostname"), u.nodename);
	cr_assert_str_eq(jstr(p, "machineName"), u.nodename);
	cr_assert_str_eq(jstr(p, "release"), u.release);
	char label[sizeof(u.sysname) + sizeof(u.release) + 1];
	snprintf(label, sizeof(label), "%s %s", u.sysname, u.release);
	cr_assert_str_eq(jstr(p, "osLabel"), label);
#ifdef __linux__
	cr_assert_str_eq(jstr(p, "platform"), "linux");
#endif
#if defined(__x86_64__)
	cr_assert_str_eq(jstr(p, "arch"), "x64");
#elif defined(__aarch64__)
	cr_assert_str_eq(jstr(p, "arch"), "arm64");
#endif
	/* the gateway runs in this process; it is not Node */
	cr_assert_eq(jnum(p, "pid"), (double)getpid());
	cr_assert_str_eq(jstr(p, "nodeVersion"), "");
	cr_assert_eq(jnum(p, "port"), f.port);
	cr_assert_eq(jnum(p, "cpuCount"), (double)sysconf(_SC_NPROCESSORS_ONLN));
	cr_assert_geq(jnum(p, "uptimeMs"), 0);
	cr_assert_gt(jnum(p, "memoryTotalBytes"), 0);
	cr_assert_leq(jnum(p, "memoryFreeBytes"), jnum(p, "memoryTotalBytes"));
	cr_assert_eq(cJSON_GetArraySize(jget(p, "loadAverage")), 3);
	cJSON_Delete(p);
	cl_free(c);
	gw_stop(&f);
}

/* The sessionId sessions.list shows for `key`. */
static void session_id_of(cl_t *c, const char *key, char *out, size_t cap)
{
	cJSON *p = call_ok(c, "sessions.list", NULL);
	const cJSON *s;
	out[0] = '\0';
	cJSON_ArrayForEach(s, jget(p, "sessions")) {
		if (!strcmp(jstr(s, "key"), key))
			snprintf(out, cap, "%s", jstr(s, "sessionId"));
	}
	cJSON_Delete(p);
	cr_assert_str_neq(out, "", "session %s not listed", key);
}

static double runs_of(cl_t *c, const char *key)
{
	cJSON *p = call_ok(c, "sessions.list", NULL);
	const cJSON *s;
	double runs = -1;
	cJSON_ArrayForEach(s, jget(p, "sessions")) {
		if (!strcmp(jstr(s, "key"), key))
			runs = jnum(s, "runs");
	}
	cJSON_Delete(p);
	return runs;
}

Test(agent_gateway_info, agent_by_session_id_continues_that_session)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char run[80], sid[80];
	run_to_end(c, "remember the word heron", "sid-1", "by-id", NULL, run, sizeof(run));
	session_id_of(c, "by-id", sid, sizeof(sid));
	run_to_end(c, "which word was it?", "sid-2", NULL, sid, run, sizeof(run));
	cr_assert_eq(runs_of(c, "by-id"), 2, "the second run went elsewhere");
	cJSON *h = cJSON_CreateObject();
	cJSON_AddStringToObject(h, "sessionKey", "by-id");
	cJSON *p = call_ok(c, "chat.history", h);
	cr_assert_eq(cJSON_GetArraySize(jget(p, "messages")), 4);
	cJSON_Delete(p);

	/* an id no session has: a session of its own, found again by the id */
	run_to_end(c, "a fresh start", "sid-3", NULL, "client-chosen-id", run, sizeof(run));
	run_to_end(c, "and again", "sid-4", NULL, "client-chosen-id", run, sizeof(run));
	cr_assert_eq(runs_of(c, "agent:main:explicit:client-chosen-id"), 2);
	/* sessionKey wins when both are given */
	run_to_end(c, "keyed", "sid-5", "by-id", "client-chosen-id", run, sizeof(run));
	cr_assert_eq(runs_of(c, "by-id"), 3);
	cl_free(c);
	gw_stop(&f);
}
