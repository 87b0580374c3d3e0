/*
 * usage.cost: OpenClaw's cost summary of a date range (its CLI's `gateway
 * usage-cost`, the Control UI's usage page), summed by the store from the
 * usage record of every model call (pc_store_req_usage_days), by UTC day.
 *
 * Pincer knows no prices, so every cost is 0 and every record counts in
 * missingCostEntries: the tokens are exact, the money is not claimed.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime/clock.h"
#include "rpc_internal.h"

#define DAY_MS ((int64_t)86400000)
#define MAX_DAYS 3650 /* what `days` is cut to (ten years) */

const pc__gw_param_t pc__gw_usage_cost_spec[9] = {
	{"days", PC__GW_T_UINT, false},
	{"startDate", PC__GW_T_STRING, false},
	{"endDate", PC__GW_T_STRING, false},
	{"range", PC__GW_T_STRING, false},
	{"agentId", PC__GW_T_STRING, false},
	{"agentScope", PC__GW_T_STRING, false},
	/* OpenClaw's day boundaries in a time zone; days here are UTC days */
	{"mode", PC__GW_T_STRING, false},
	{"utcOffset", PC__GW_T_STRING, false},
	{"timeZone", PC__GW_T_STRING, false},
};

/* The UTC day number of "YYYY-MM-DD", or false when it is not a date. */
static bool parse_day(const char *s, int64_t *day)
{
	int y, m, d, n = 0;
	if (sscanf(s, "%4d-%2d-%2d%n", &y, &m, &d, &n) != 3 || n != 10 || s[n])
		return false;
	struct tm tm = {.tm_year = y - 1900, .tm_mon = m - 1, .tm_mday = d};
	time_t t = timegm(&tm);
	/* timegm normalizes 02-30 into March: a real date comes back as given */
	if (t == (time_t)-1 || tm.tm_year != y - 1900 || tm.tm_mon != m - 1 || tm.tm_mday != d)
		return false;
	*day = (int64_t)t * 1000 / DAY_MS;
	return true;
}

static bool range_days(const char *r, int *days)
{
	static const struct {
		const char *name;
		int days;
	} ranges[] = {{"7d", 7}, {"30d", 30}, {"90d", 90}, {"1y", 365}, {"all", 0}};
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
		if (!strcmp(r, ranges[i].name)) {
			*days = ranges[i].days;
			return true;
		}
	return false;
}

/* The window [from, to) in ms and its days (0: from the first record),
 * or the complaint. */
static const char *window(const cJSON *params, int64_t *from, int64_t *to, int *days)
{
	int64_t today = pc__clock_wall_ms() / DAY_MS;
	const char *start = pc__gw_str(params, "startDate"), *end = pc__gw_str(params, "endDate");
	const char *range = pc__gw_str(params, "range");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(params, "days");
	if (!start != !end)
		return "startDate and endDate must be provided together";
	if (start) {
		int64_t s, e;
		if (!parse_day(start, &s))
			return "startDate: expected a valid YYYY-MM-DD calendar date";
		if (!parse_day(end, &e))
			return "endDate: expected a valid YYYY-MM-DD calendar date";
		if (s > e)
			return "startDate must not be after endDate";
		*from = s * DAY_MS;
		*to = (e + 1) * DAY_MS;
		*days = (int)(e - s + 1);
		return NULL;
	}
	int n = 30;
	if (d)
		n = cJSON_GetNumberValue(d) > MAX_DAYS ? MAX_DAYS : (int)cJSON_GetNumberValue(d);
	else if (range && !range_days(range, &n))
		return "range: must be one of 7d, 30d, 90d, 1y, all";
	if (d && n < 1)
		return "days: must be at least 1";
	*to = (today + 1) * DAY_MS;
	*from = n ? (today - n + 1) * DAY_MS : 0;
	*days = n;
	return NULL;
}

void pc__gw_m_usage_cost(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	const char *agent = pc__gw_str(params, "agentId");
	const char *scope = pc__gw_str(params, "agentScope");
	const char *why = NULL;
	if (agent && *agent && strcmp(agent, PC__GW_AGENT_ID) != 0)
		why = "agentId: unknown agent (this gateway serves \"main\")";
	else if (scope && strcmp(scope, "all") != 0)
		why = "agentScope: must be \"all\"";
	else if (scope && agent && *agent)
		why = "agentScope=all cannot be combined with agentId";
	int64_t from = 0, to = 0;
	int days = 0;
	if (!why)
		why = window(params, &from, &to, &days);
	if (why) {
		pc__gw_invalid(c, id, "usage.cost", why);
		return;
	}
	if (c->runs.n + c->pend.n >= PC__GW_INFLIGHT_MAX) {
		pc__gw_reply_error(c, id, "UNAVAILABLE", "too many requests in flight on this connection", NULL, NULL,
				   true);
		return;
	}
	pc_msg_t *req = NULL;
	pc__gw_pend_t *pd = pc__gw_pend_new(c, PC__GW_P_COST, id);
	int rc = pd ? pc_store_req_usage_days(from, to, &req) : PC_ENOMEM;
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(pc_agent_store(c->g->agent)), req, &pd->corr);
	else
		pc_msg_free(req);
	if (rc != 0) {
		if (pd)
			pc__gw_pend_free(c, pd);
		pc__gw_reply_error(c, id, "UNAVAILABLE", "the store cannot be read now", NULL, NULL, true);
		return;
	}
	pd->limit = days;
}

/* OpenClaw's CostUsageTotals of `records` records (no cost known). */
static void add_totals(cJSON *o, uint64_t records, int64_t input, int64_t output, int64_t cache_read,
		       int64_t cache_write, int64_t total)
{
	static const char *const costs[] = {"totalCost", "inputCost", "outputCost", "cacheReadCost", "cacheWriteCost"};
	cJSON_AddNumberToObject(o, "input", (double)input);
	cJSON_AddNumberToObject(o, "output", (double)output);
	cJSON_AddNumberToObject(o, "cacheRead", (double)cache_read);
	cJSON_AddNumberToObject(o, "cacheWrite", (double)cache_write);
	cJSON_AddNumberToObject(o, "totalTokens", (double)total);
	for (size_t i = 0; i < sizeof(costs) / sizeof(costs[0]); i++)
		cJSON_AddNumberToObject(o, costs[i], 0);
	cJSON_AddNumberToObject(o, "missingCostEntries", (double)records);
}

bool pc__gw_on_usage_cost(pc__gw_conn_t *c, const pc_msg_t *msg)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_COST, msg->corr);
	if (!pd)
		return false;
	pc_store_usage_list_t *l = NULL;
	int rc = pc_store_usage_list_take(msg, &l);
	if (rc != 0) {
		pc__gw_pend_store_failed(c, pd, "the usage cannot be read", rc);
		return true;
	}
	size_t n = pc_store_usage_list_count(l);
	cJSON *p = cJSON_CreateObject();
	cJSON_AddNumberToObject(p, "updatedAt", (double)pc__clock_wall_ms());
	cJSON *daily = cJSON_CreateArray();
	for (size_t i = 0; i < n; i++) {
		pc_store_usage_day_t d;
		pc_store_usage_day_get(l, i, &d);
		char date[16];
		time_t t = (time_t)(d.day_ms / 1000);
		struct tm tm;
		if (!gmtime_r(&t, &tm) || !strftime(date, sizeof(date), "%Y-%m-%d", &tm))
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "date", date);
		add_totals(o, d.records, d.input, d.output, d.cache_read, d.cache_write, d.total);
		cJSON_AddItemToArray(daily, o);
	}
	/* "all": the days from the first record on */
	int days = pd->limit;
	if (!days && n) {
		pc_store_usage_day_t first;
		pc_store_usage_day_get(l, 0, &first);
		days = (int)(pc__clock_wall_ms() / DAY_MS - first.day_ms / DAY_MS + 1);
	}
	cJSON_AddNumberToObject(p, "days", days);
	cJSON_AddItemToObject(p, "daily", daily);
	pc_store_usage_t sum;
	uint64_t records = 0;
	pc_store_usage_list_totals(l, &sum, &records);
	add_totals(cJSON_AddObjectToObject(p, "totals"), records, sum.input, sum.output, sum.cache_read,
		   sum.cache_write, sum.total);
	pc_store_usage_list_free(l);
	pc__gw_reply_ok(c, pd->req_id, p);
	pc__gw_pend_free(c, pd);
	return true;
}
