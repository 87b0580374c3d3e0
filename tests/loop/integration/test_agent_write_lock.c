/*
 * The session write lock's stale rules at the agent level (spec §6.4,
 * docs/session-lock.md), through real runs whose attempt compacts the
 * transcript (the rewrite takes the lock) against the embedded mock LLM:
 * a malformed lock file nobody holds does not stop a run; a lock whose
 * holder died is taken at once; the rewrite's lock carries the run's max
 * hold, max(5 min, run timeout + compaction timeout + 2 min); and a hold
 * past its max hold is reported (log line, metric), not released.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_harness.h"
#include "agents/attempt/attempt_timeout.h"
#include "io/lock/session_lock.h"

TestSuite(agent_write_lock, .timeout = 60);

/* The context passes window - reserve after the first model call, so the
 * attempt compacts (threshold) before its next one. */
#define COMPACTING_CONFIG                                                                          \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"               \
	"\"contextTokens\":16000}},"                                                               \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m\",\"compaction\":{\"keepRecentTokens\":10}}}}"
#define COMPACTING_SCENARIO                                                                        \
	"{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"clock\"}],"                  \
	"\"usage\":{\"input_tokens\":9000,\"output_tokens\":10}},"                                     \
	"{\"text\":\"SUMMARY of the work\"},{\"text\":\"done\"}]}"

#define RUN_TIMEOUT_MS 600000u

static void locks_dir(const harness_t *h, char *out, size_t cap)
{
	snprintf(out, cap, "%s/locks", h->dir);
	cr_assert(mkdir(out, 0700) == 0 || errno == EEXIST);
}

/* Session "s"'s lock file. */
static void lock_path(const harness_t *h, char *out, size_t cap)
{
	char dir[128];
	locks_dir(h, dir, sizeof(dir));
	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(dir, "s", &info), 0);
	snprintf(out, cap, "%s", info.path);
}

/* Runs one message on "s" that compacts; asserts it ended well, with the
 * transcript rewritten (a summary first). Returns its wall time in ms. */
static uint64_t run_compacting(harness_t *h)
{
	uint64_t t0 = now_ms();
	pc_agent_params_t p = {.session_key = "s", .message = "do the work", .timeout_ms = RUN_TIMEOUT_MS};
	pc_agent_accepted_t acc;
	cr_assert_eq(pc_agent_submit(h->agent, &p, &acc), 0);
	cJSON *d = finish_of(h, acc.run_id, 30000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "done");
	cJSON_Delete(d);
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h->store, "s", &hist), 0);
	pc_store_msg_t m;
	pc_store_history_get(hist, 0, &m);
	cr_assert_str_eq(m.role, "compactionSummary", "the rewrite took the lock and committed");
	pc_store_history_free(hist);
	return now_ms() - t0;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	static char buf[8192];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* (a) A lock file of garbage that nobody holds is free: the run's rewrite
 * takes it at once (the spec reclaims a malformed file only once its mtime
 * is older than staleMs, 30 min). */
Test(agent_write_lock, a_malformed_lock_file_does_not_stop_a_run)
{
	harness_t h;
	harness_start_with(&h, COMPACTING_CONFIG, COMPACTING_SCENARIO, NULL);
	char path[PATH_MAX];
	lock_path(&h, path, sizeof(path));
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	static const char garbage[] = "\xff\xfe{\"pid\":\"not a pid\",createdAt:}\n\0\x01 trailing";
	cr_assert_eq(write(fd, garbage, sizeof(garbage)), (ssize_t)sizeof(garbage));
	close(fd);
	cr_assert_lt(run_compacting(&h), 20000);
	char dir[128];
	locks_dir(&h, dir, sizeof(dir));
	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(dir, "s", &info), 0);
	cr_assert_not(info.held);
	harness_stop(&h);
}

/* (b) A lock held by a process that died is reclaimed at once: a child
 * takes it through the API and exits without releasing it. */
Test(agent_write_lock, a_lock_whose_holder_died_is_taken_at_once)
{
	harness_t h;
	harness_start_with(&h, COMPACTING_CONFIG, COMPACTING_SCENARIO, NULL);
	char dir[128];
	locks_dir(&h, dir, sizeof(dir));
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		pc_session_lock_t *lock = NULL;
		int rc = pc_session_lock_acquire(dir, "s", NULL, &lock, NULL);
		_exit(rc == 0 ? 0 : 1); /* no release: the process just dies */
	}
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child took the lock");
	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(dir, "s", &info), 0);
	cr_assert_not(info.held, "the kernel dropped the dead holder's lock");
	/* the acquire timeout is 60 s: a run that waited for it would not end
	 * this soon */
	cr_assert_lt(run_compacting(&h), 20000);
	harness_stop(&h);
}

/* (c) The rewrite's lock carries the run's max hold: its record (voided on
 * release, still in the file) says maxHoldMs = max(5 min, run timeout +
 * compaction timeout + 2 min). */
Test(agent_write_lock, a_runs_rewrite_holds_the_lock_with_the_runs_max_hold)
{
	harness_t h;
	harness_start_with(&h, COMPACTING_CONFIG, COMPACTING_SCENARIO, NULL);
	run_compacting(&h);
	char path[PATH_MAX];
	lock_path(&h, path, sizeof(path));
	const char *rec = slurp(path);
	uint64_t comp = h.cfg->agent.compaction.timeout_ms ? h.cfg->agent.compaction.timeout_ms
							   : PC_ATTEMPT_COMPACTION_TIMEOUT_MS;
	uint64_t want = pc_attempt_lock_max_hold_ms(RUN_TIMEOUT_MS, comp);
	cr_assert_gt(want, (uint64_t)PC_SESSION_LOCK_MAX_HOLD_MS, "the run's hold is longer than the default");
	char field[64];
	snprintf(field, sizeof(field), "\"maxHoldMs\":%llu,", (unsigned long long)want);
	cr_assert_not_null(strstr(rec, field), "%s not in the record %s", field, rec);
	cr_assert_eq(rec[0], '-', "released: the record is voided");
	harness_stop(&h);
}

/* (c) A hold past its max hold is reported by the watchdog -- a log line
 * and the overdue counter -- and left held: Pincer does not force-release
 * (docs/session-lock.md). */
Test(agent_write_lock, a_hold_past_its_max_hold_is_reported_not_released)
{
	harness_t h;
	harness_start_with(&h, COMPACTING_CONFIG, COMPACTING_SCENARIO, NULL);
	FILE *logf = tmpfile();
	cr_assert_not_null(logf);
	pc_log_config_t lc;
	pc_log_config_init(&lc);
	lc.file = logf;
	pc_log_t *lg = NULL;
	cr_assert_eq(pc_log_new(&lc, &lg), 0);
	h.agent->log = lg;

	char dir[128];
	locks_dir(&h, dir, sizeof(dir));
	pc_session_lock_opts_t o;
	pc_session_lock_opts_init(&o);
	o.max_hold_ms = 1;
	pc_session_lock_t *lock = NULL;
	cr_assert_eq(pc_session_lock_acquire(dir, "s", &o, &lock, NULL), 0);
	sleep_ms(20);
	cr_assert_eq(pc__lock_watchdog(h.agent), 1u);

	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(dir, "s", &info), 0);
	cr_assert(info.held, "still held");
	cr_assert(info.overdue);

	char *text = NULL;
	size_t len = 0;
	cr_assert_eq(pc_metrics_render(pc_agent_metrics(h.agent), &text, &len), 0);
	cr_assert_not_null(strstr(text, "pincer_session_lock_overdue_total 1"), "%s", text);
	free(text);

	cr_assert_eq(pc_session_lock_release(lock), 0);
	cr_assert_eq(pc__lock_watchdog(h.agent), 0u, "nothing held: nothing to report");
	h.agent->log = NULL;
	pc_log_free(lg);
	rewind(logf);
	char line[2048] = "";
	size_t n = fread(line, 1, sizeof(line) - 1, logf);
	line[n] = '\0';
	fclose(logf);
	cr_assert_not_null(strstr(line, "session write lock held past its max hold"), "%s", line);
	cr_assert_not_null(strstr(line, "\"sessionKey\":\"s\""), "%s", line);
	cr_assert_not_null(strstr(line, "\"maxHoldMs\":1"), "%s", line);
	harness_stop(&h);
}
