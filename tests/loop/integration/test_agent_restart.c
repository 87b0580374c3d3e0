/*
 * Accepted means it will run, across a crash. The store is left as a
 * process that died would leave it (run rows accepted under an owner whose
 * pid is gone, one of them begun); an agent started on it must run the
 * ones that never began, in their session's order, under their own run
 * ids, end the begun ones as interrupted (replay-invalid when a call of a
 * mutating tool of theirs is in the transcript), and leave a live
 * process's runs alone.
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent_harness.h"
#include "io/lock/session_lock.h"

/* An owner name for process `pid` of this machine, started at `st`. */
static void owner_of(char *out, size_t n, long pid, uint64_t st, const char *nonce)
{
	char host[65] = "";
	cr_assert_eq(gethostname(host, sizeof(host) - 1), 0);
	snprintf(out, n, "%ld.%" PRIu64 "@%s#%s", pid, st, host, nonce);
}

static void accepted_run(harness_t *h, const char *key, const char *run, const char *owner, const char *msg)
{
	char prompt[256];
	snprintf(prompt, sizeof(prompt), "{\"message\":\"%s\",\"queueMode\":\"steer\"}", msg);
	pc_store_run_new_t r = {.key = key, .run_id = run, .owner = owner, .prompt = prompt};
	pc_store_reply_t rep;
	cr_assert_eq(pc_store_run_begin(h->store, &r, &rep), 0);
	cr_assert_eq(rep.flags, PC_STORE_CREATED);
}

/* A begun run of session `key` whose model called `tool` (no result). */
static void begun_run_calling(harness_t *h, const char *key, const char *run, const char *owner, const char *tool)
{
	accepted_run(h, key, run, owner, "call");
	pc_store_msg_t user = {.role = "user", .content = "{\"role\":\"user\",\"content\":\"call\"}", .run_id = run};
	cr_assert_eq(pc_store_append(h->store, key, 0, &user, NULL), 0);
	char content[256];
	snprintf(content, sizeof(content),
		 "{\"role\":\"assistant\",\"content\":[{\"type\":\"toolCall\",\"id\":\"c1\",\"name\":\"%s\","
		 "\"arguments\":{\"path\":\"f\",\"content\":\"x\"}}],\"stopReason\":\"toolUse\"}",
		 tool);
	pc_store_msg_t call = {.role = "assistant", .content = content, .tool_call_ids = "[\"c1\"]", .run_id = run};
	cr_assert_eq(pc_store_append(h->store, key, 0, &call, NULL), 0);
}

static pc_store_run_status_t run_status(harness_t *h, const char *run)
{
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_get(h->store, run, &r), 0);
	return (pc_store_run_status_t)r.status;
}

Test(agent_restart, a_gone_process_s_accepted_runs_run_again_in_order_and_begun_ones_end_interrupted)
{
	harness_t h;
	harness_start(&h, NULL);
	uint64_t my_start = 0;
	cr_assert_eq(pc_proc_starttime(getpid(), &my_start), 0);
	char dead[160], live[160];
	/* a pid that cannot exist (above pid_max's ceiling of 2^22) */
	owner_of(dead, sizeof(dead), 99999999L, 12345, "gone");
	owner_of(live, sizeof(live), (long)getpid(), my_start, "alive");

	accepted_run(&h, "s1", "run-dead-1", dead, "first");
	accepted_run(&h, "s1", "run-dead-2", dead, "second");
	accepted_run(&h, "s2", "run-dead-begun", dead, "begun");
	pc_store_msg_t user = {.role = "user", .content = "{\"role\":\"user\",\"content\":\"begun\"}",
			       .run_id = "run-dead-begun"};
	cr_assert_eq(pc_store_append(h.store, "s2", 0, &user, NULL), 0);
	accepted_run(&h, "s3", "run-live", live, "not mine");
	begun_run_calling(&h, "s4", "run-dead-wrote", dead, "write");
	begun_run_calling(&h, "s5", "run-dead-read", dead, "read");

	/* a second agent on the store: it starts as a restarted process would */
	char locks[128];
	snprintf(locks, sizeof(locks), "%s/locks", h.dir);
	pc_agent_options_t o = {.rt = h.rt, .io = h.io, .store = h.store, .config = h.cfg, .lock_dir = locks,
				.embedded_llm = &harness_mock_llm};
	pc_agent_t *b = NULL;
	cr_assert_eq(pc_agent_new(&o, &b), 0);
	pc_agent_recovery_t rec;
	pc_agent_recovered(b, &rec);
	cr_assert_eq(rec.rerun, 2);
	cr_assert_eq(rec.interrupted, 3);

	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(b, "run-dead-1", 20000, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_OK);
	cr_assert_eq(pc_agent_wait(b, "run-dead-2", 20000, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_OK);
	/* each its own turn, in the order accepted (not steered together):
	 * every message of the first run, then every message of the second */
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h.store, "s1", &hist), 0);
	size_t n = pc_store_history_count(hist), users = 0;
	bool second = false;
	for (size_t i = 0; i < n; i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		cr_assert_not_null(m.run_id);
		if (!strcmp(m.run_id, "run-dead-2"))
			second = true;
		else
			cr_assert(!second && !strcmp(m.run_id, "run-dead-1"), "message %zu of %s out of order", i, m.run_id);
		if (!strcmp(m.role, "user")) {
			cr_assert(strstr(m.content, users == 0 ? "first" : "second"), "%s", m.content);
			users++;
		}
	}
	cr_assert_eq(users, 2);
	cr_assert(second);
	pc_store_history_free(hist);

	cr_assert_eq(pc_agent_wait(b, "run-dead-begun", 1000, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR);
	cr_assert(strstr(w.run.error, "interrupted"), "%s", w.run.error);
	cr_assert_not(w.run.replay_invalid, "no tool of it was called");
	cr_assert_eq(run_status(&h, "run-dead-begun"), PC_STORE_RUN_ERROR);
	/* a call of `write` may have written: running it again could write twice */
	cr_assert_eq(pc_agent_wait(b, "run-dead-wrote", 1000, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR);
	cr_assert(w.run.replay_invalid);
	cr_assert_eq(pc_agent_wait(b, "run-dead-read", 1000, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR);
	cr_assert_not(w.run.replay_invalid, "read changes nothing");

	/* a live process's run is its own: untouched, and a wait here cannot see it end */
	cr_assert_eq(run_status(&h, "run-live"), PC_STORE_RUN_ACCEPTED);
	cr_assert_eq(pc_agent_wait(b, "run-live", 100, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_TIMEOUT);

	/* nothing is left for a third start */
	pc_store_open_runs_t *l = NULL;
	cr_assert_eq(pc_store_runs_open(h.store, &l), 0);
	cr_assert_eq(pc_store_open_runs_count(l), 1);
	pc_store_open_runs_free(l);
	pc_agent_free(b, 10000);
	harness_stop(&h);
}

Test(agent_restart, a_repeated_key_with_other_parameters_is_refused)
{
	harness_t h;
	harness_start(&h, NULL);
	pc_agent_params_t p = {.session_key = "s", .message = "hello", .idempotency_key = "k-1"};
	pc_agent_accepted_t a1, a2;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a1), 0);
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a2), 0, "the same request again");
	cr_assert_eq(a2.disposition, PC_AGENT_DUPLICATE);
	cr_assert_str_eq(a2.run_id, a1.run_id);
	p.message = "something else";
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a2), PC_EEXIST);
	p.session_key = "other";
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a2), 0, "keys are the session's");
	cr_assert_neq(a2.disposition, PC_AGENT_DUPLICATE);
	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(h.agent, a1.run_id, 20000, &w), 0);
	cr_assert_eq(pc_agent_wait(h.agent, a2.run_id, 20000, &w), 0);
	harness_stop(&h);
}

/* The number of messages in session `key`'s transcript. */
static size_t transcript_len(harness_t *h, const char *key)
{
	pc_store_history_t *hist = NULL;
	int rc = pc_store_history(h->store, key, &hist);
	size_t n = rc == 0 ? pc_store_history_count(hist) : 0;
	pc_store_history_free(hist);
	return n;
}

/* One writer per session: when another owner takes the session's lease
 * in the middle of a run, the run's next write is refused and the run
 * stops there (no model answer or tool of it lands after the take); the
 * session runs again only once it holds the lease again. */
Test(agent_restart, a_run_whose_lease_another_owner_took_stops_and_writes_nothing_more)
{
	harness_t h;
	harness_start(&h, NULL);
	char run[80];
	cr_assert_eq(submit(&h, "s", "[[mock:{\"text\":\"too late\",\"ttft_ms\":600}]]", run), PC_AGENT_STARTED);
	/* its user turn is written: the run holds the lease and is streaming */
	for (int i = 0; i < 500 && transcript_len(&h, "s") < 1; i++)
		usleep(10000);
	cr_assert_eq(transcript_len(&h, "s"), 1);
	int64_t epoch = 0;
	cr_assert_eq(pc_store_lease_acquire(h.store, "s", "intruder", 60000, h.agent->owner, &epoch, NULL), 0);

	pc_agent_wait_result_t w = wait_run(&h, run, 20000);
	cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR, "the run went on without its lease");
	cr_assert_eq(transcript_len(&h, "s"), 1, "a write landed after another owner took the session");

	/* the next message waits for the lease, and runs once it is given back */
	char next[80];
	cr_assert_eq(submit(&h, "s", "again", next), PC_AGENT_STARTED);
	pc_agent_wait_result_t pending;
	cr_assert_eq(pc_agent_wait(h.agent, next, 300, &pending), 0);
	cr_assert_eq(pending.status, PC_AGENT_WAIT_TIMEOUT, "it ran while another owner held the lease");
	cr_assert_eq(transcript_len(&h, "s"), 1);
	cr_assert_eq(pc_store_lease_release(h.store, "s", "intruder", epoch), 0);
	cr_assert_eq(wait_run(&h, next, 20000).status, PC_AGENT_WAIT_OK);
	cr_assert_gt(transcript_len(&h, "s"), 1);
	harness_stop(&h);
}
