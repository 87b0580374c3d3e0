/*
 * The run's lifecycle (agents/run/run_lifecycle.h): its transition table,
 * the registry's, store's and session's views as projections of its one
 * state, the store's on-disk values, and PINCER_TRACE=run's lines from a
 * live run.
 */
#include <criterion/criterion.h>

#include <sqlite3.h>

#include "agent_harness.h"
#include "agents/run/run_lifecycle.h"

TestSuite(run_lifecycle, .timeout = 60);

Test(run_lifecycle, every_state_has_a_name)
{
	for (int s = 0; s < PC_RUN_LC_COUNT; s++) {
		cr_assert_not_null(pc_run_lc_name((pc_run_lc_t)s));
		cr_assert_str_neq(pc_run_lc_name((pc_run_lc_t)s), "unknown", "state %d", s);
	}
	cr_assert_str_eq(pc_run_lc_name(PC_RUN_LC_COUNT), "unknown");
	cr_assert_str_eq(pc_run_lc_name(PC_RUN_LC_ATTEMPT), "attempt");
}

Test(run_lifecycle, the_table_allows_the_loop_and_refuses_the_rest)
{
	static const struct {
		pc_run_lc_t from, to;
		bool legal;
	} cases[] = {
		{PC_RUN_LC_QUEUED, PC_RUN_LC_IDLE, true},
		{PC_RUN_LC_QUEUED, PC_RUN_LC_ATTEMPT, false},
		{PC_RUN_LC_QUEUED, PC_RUN_LC_ERROR, true}, /* stopped before it started */
		{PC_RUN_LC_IDLE, PC_RUN_LC_ATTEMPT, true},
		{PC_RUN_LC_IDLE, PC_RUN_LC_IDLE, false},
		{PC_RUN_LC_ATTEMPT, PC_RUN_LC_IDLE, true},
		{PC_RUN_LC_ATTEMPT, PC_RUN_LC_ENDING, false}, /* an attempt's answer comes first */
		{PC_RUN_LC_ATTEMPT, PC_RUN_LC_DELAY, false},
		{PC_RUN_LC_DELAY, PC_RUN_LC_ENDING, true},    /* aborted while sleeping */
		{PC_RUN_LC_RESOLVING, PC_RUN_LC_ENDING, true},
		{PC_RUN_LC_SENDING, PC_RUN_LC_ENDING, true},
		{PC_RUN_LC_COMPACTING, PC_RUN_LC_ENDING, false},
		{PC_RUN_LC_TRUNCATING, PC_RUN_LC_IDLE, true},
		{PC_RUN_LC_ENDING, PC_RUN_LC_OK, true},
		{PC_RUN_LC_ENDING, PC_RUN_LC_TIMEOUT, true},
		{PC_RUN_LC_ENDING, PC_RUN_LC_IDLE, false},
		{PC_RUN_LC_IDLE, PC_RUN_LC_OK, false}, /* only through ending */
		{PC_RUN_LC_OK, PC_RUN_LC_IDLE, false},
		{PC_RUN_LC_ERROR, PC_RUN_LC_ERROR, false},
		{PC_RUN_LC_COUNT, PC_RUN_LC_IDLE, false},
		{PC_RUN_LC_IDLE, PC_RUN_LC_COUNT, false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_eq(pc_run_lc_legal(cases[i].from, cases[i].to), cases[i].legal, "%s -> %s",
			     pc_run_lc_name(cases[i].from), pc_run_lc_name(cases[i].to));
}

Test(run_lifecycle, terminal_states_lead_nowhere_and_every_other_can_end)
{
	for (int f = 0; f < PC_RUN_LC_COUNT; f++) {
		pc_run_lc_t from = (pc_run_lc_t)f;
		int out = 0;
		for (int t = 0; t < PC_RUN_LC_COUNT; t++)
			out += pc_run_lc_legal(from, (pc_run_lc_t)t);
		if (pc_run_lc_terminal(from))
			cr_assert_eq(out, 0, "%s", pc_run_lc_name(from));
		else
			/* whatever stops the run, it can still end once */
			cr_assert(pc_run_lc_legal(from, PC_RUN_LC_ERROR), "%s", pc_run_lc_name(from));
	}
}

Test(run_lifecycle, the_registry_and_store_project_the_state)
{
	for (int s = 0; s < PC_RUN_LC_COUNT; s++) {
		pc_run_lc_t st = (pc_run_lc_t)s;
		pc_run_status_t reg = pc_run_lc_registry_status(st);
		pc_store_run_status_t sto = pc_run_lc_store_status(st);
		if (st == PC_RUN_LC_QUEUED)
			cr_assert_eq(reg, PC_RUN_STATUS_QUEUED);
		else if (!pc_run_lc_terminal(st))
			cr_assert_eq(reg, PC_RUN_STATUS_RUNNING, "%s", pc_run_lc_name(st));
		else
			cr_assert_str_eq(pc_run_status_name(reg), pc_run_lc_name(st));
		/* the store says accepted until the end, never running */
		cr_assert_eq(sto == PC_STORE_RUN_ACCEPTED, !pc_run_lc_terminal(st), "%s", pc_run_lc_name(st));
		cr_assert_neq(sto, PC_STORE_RUN_RUNNING);
	}
	/* an end's status comes back through its terminal state */
	for (int r = PC_RUN_STATUS_OK; r <= PC_RUN_STATUS_TIMEOUT; r++)
		cr_assert_eq(pc_run_lc_registry_status(pc_run_lc_done((pc_run_status_t)r)), (pc_run_status_t)r);
	cr_assert_eq(pc_run_lc_done(PC_RUN_STATUS_RUNNING), PC_RUN_LC_ERROR);
}

Test(run_lifecycle, the_session_sees_the_last_activity_between_steps)
{
	cr_assert_eq(pc_run_lc_session_phase(PC_RUN_LC_QUEUED, PC_RUN_STARTING), PC_RUN_STARTING);
	cr_assert_eq(pc_run_lc_session_phase(PC_RUN_LC_RESOLVING, PC_RUN_STARTING), PC_RUN_STARTING);
	cr_assert_eq(pc_run_lc_session_phase(PC_RUN_LC_ATTEMPT, PC_RUN_STREAMING), PC_RUN_STREAMING);
	cr_assert_eq(pc_run_lc_session_phase(PC_RUN_LC_ATTEMPT, PC_RUN_COMPACTING), PC_RUN_COMPACTING);
	cr_assert_eq(pc_run_lc_session_phase(PC_RUN_LC_COMPACTING, PC_RUN_STREAMING), PC_RUN_COMPACTING);
	cr_assert_eq(pc_run_lc_session_phase(PC_RUN_LC_DELAY, PC_RUN_STREAMING), PC_RUN_STREAMING);
	cr_assert_eq(pc_run_lc_session_phase(PC_RUN_LC_ENDING, PC_RUN_STREAMING), PC_RUN_STREAMING);
}

/* The store keeps the text it always wrote for each status: a state.db
 * written before the run had one state still reads the same. */
Test(run_lifecycle, the_store_writes_the_values_it_always_wrote)
{
	char dir[64], path[128];
	snprintf(dir, sizeof(dir), "/tmp/pc-lifecycle-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/state.db", dir);
	pc_runtime_t *rt = start_rt(1);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.path = path;
	pc_store_t *st = NULL;
	cr_assert_eq(pc_store_open(rt, &cfg, &st), 0);
	static const struct {
		const char *id;
		pc_run_lc_t state;
		const char *text;
		int value; /* pc_store_run_status_t as stored and answered */
	} runs[] = {
		{"r-queued", PC_RUN_LC_QUEUED, "accepted", 0}, {"r-ok", PC_RUN_LC_OK, "ok", 2},
		{"r-error", PC_RUN_LC_ERROR, "error", 3},      {"r-aborted", PC_RUN_LC_ABORTED, "aborted", 4},
		{"r-timeout", PC_RUN_LC_TIMEOUT, "timeout", 5},
	};
	size_t n = sizeof(runs) / sizeof(runs[0]);
	for (size_t i = 0; i < n; i++) {
		pc_store_reply_t r;
		cr_assert_eq(pc_store_run_begin(st, &(pc_store_run_new_t){.key = "s", .run_id = runs[i].id}, &r), 0);
		if (pc_run_lc_terminal(runs[i].state))
			cr_assert_eq(pc_store_run_end(st, &(pc_store_run_end_t){.run_id = runs[i].id,
									  .status = pc_run_lc_store_status(runs[i].state)}),
				     0);
		cr_assert_eq(pc_store_run_get(st, runs[i].id, &r), 0);
		cr_assert_eq(r.status, runs[i].value, "%s", runs[i].id);
		cr_assert_eq((int)pc_run_lc_store_status(runs[i].state), runs[i].value);
	}
	cr_assert_eq(pc_store_close(st), 0);
	pc_runtime_free(rt);

	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	for (size_t i = 0; i < n; i++) {
		sqlite3_stmt *q = NULL;
		cr_assert_eq(sqlite3_prepare_v2(db, "SELECT status FROM runs WHERE run_id = ?", -1, &q, NULL), SQLITE_OK);
		sqlite3_bind_text(q, 1, runs[i].id, -1, SQLITE_STATIC);
		cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
		cr_assert_str_eq((const char *)sqlite3_column_text(q, 0), runs[i].text, "%s", runs[i].id);
		sqlite3_finalize(q);
	}
	sqlite3_close(db);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

Test(run_lifecycle, pincer_trace_names_machines)
{
	cr_assert_eq(pc_trace_parse(NULL), 0u);
	cr_assert_eq(pc_trace_parse(""), 0u);
	cr_assert_eq(pc_trace_parse("run"), (unsigned)PC_TRACE_RUN);
	cr_assert_eq(pc_trace_parse("attempt, run ,session"),
		     (unsigned)(PC_TRACE_RUN | PC_TRACE_ATTEMPT | PC_TRACE_SESSION));
	cr_assert_eq(pc_trace_parse("http,nosuch"), 0u); /* not traced (yet): ignored */
	cr_assert_eq(pc_trace_parse("runs,ru,,"), 0u);
	cr_assert_eq(pc_trace_parse("all"), PC_TRACE_ALL);
}

/* The text of file `f` from its start (malloc'd). */
static char *slurp(FILE *f)
{
	/* the logger writes to the descriptor: the stream only reads */
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	cr_assert_geq(n, 0);
	char *buf = calloc(1, (size_t)n + 1);
	cr_assert_not_null(buf);
	rewind(f);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	return buf;
}

/* A live run with PINCER_TRACE=run: one line per transition, in order,
 * in the fixed format, through the agent's logger. */
Test(run_lifecycle, a_traced_run_writes_each_transition)
{
	FILE *out = tmpfile();
	cr_assert_not_null(out);
	pc_log_config_t lc;
	pc_log_config_init(&lc);
	lc.file = out;
	lc.format = PC_LOG_FORMAT_TEXT;
	pc_log_t *lg = NULL;
	cr_assert_eq(pc_log_new(&lc, &lg), 0);
	cr_assert_eq(setenv("PINCER_TRACE", "attempt,run", 1), 0);
	harness_log = lg;
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"text\":\"hello\"}]}");
	harness_log = NULL;
	char run[80];
	cr_assert_eq(submit(&h, "s", "hi", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	harness_stop(&h);
	/* read once, by pc_agent_new; unset only with no thread left that
	 * could read the environment */
	unsetenv("PINCER_TRACE");
	pc_log_free(lg);

	char *text = slurp(out);
	fclose(out);
	const char *want[] = {"queued -> idle (start)", "idle -> attempt (dispatch)", "attempt -> idle (attempt done)",
			      "idle -> ending (ok)", "ending -> ok (end recorded)"};
	const char *at = text;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char line[256];
		snprintf(line, sizeof(line), "msg=\"trace run %s %s\"", run, want[i]);
		const char *p = strstr(at, line);
		cr_assert_not_null(p, "missing or out of order: %s\nlog:\n%s", line, text);
		at = p + strlen(line);
	}
	/* nothing else of this machine: five transitions, five lines */
	size_t lines = 0;
	for (const char *p = text; (p = strstr(p, "msg=\"trace run ")); p++)
		lines++;
	cr_assert_eq(lines, 5, "log:\n%s", text);
	free(text);
}

/* Without PINCER_TRACE the run says nothing of its transitions. */
Test(run_lifecycle, an_untraced_run_writes_no_trace)
{
	FILE *out = tmpfile();
	cr_assert_not_null(out);
	pc_log_config_t lc;
	pc_log_config_init(&lc);
	lc.file = out;
	lc.format = PC_LOG_FORMAT_TEXT;
	pc_log_t *lg = NULL;
	cr_assert_eq(pc_log_new(&lc, &lg), 0);
	unsetenv("PINCER_TRACE");
	harness_log = lg;
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"text\":\"hello\"}]}");
	harness_log = NULL;
	char run[80];
	cr_assert_eq(submit(&h, "s", "hi", run), PC_AGENT_STARTED);
	cJSON_Delete(finish_of(&h, run, 30000));
	harness_stop(&h);
	pc_log_free(lg);
	char *text = slurp(out);
	fclose(out);
	cr_assert_not_null(strstr(text, "run ended"), "log:\n%s", text);
	cr_assert_null(strstr(text, "trace run"), "log:\n%s", text);
	free(text);
}
