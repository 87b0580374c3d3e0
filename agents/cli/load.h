/*
 * `pincer load` (docs/load.md): what its files share. cmd_load.c reads the
 * options and prints the results; load_run.c drives a run (the runtime,
 * the arrival schedule, progress, the end); load_messages.c reads
 * --messages; load_identity.c pairs --identity's device; load_csv.c
 * writes --csv; load_compare.c reads and sets beside this run an earlier
 * one (--compare); load_session.c is the actor
 * that plays one simulated session against the target; load_report.c
 * turns the figures into the summary, the JSON and the threshold verdict;
 * load_proc.c samples the target's (--target-pid) and the harness's CPU
 * and memory; load_metrics.c reads the target's /metrics before and after
 * (--metrics-url);
 * load_out.h says what writes --out DIR.
 *
 * Every time is on the monotonic clock in ns; every latency is kept in
 * µs in the shared HDR histogram (agents/obs/histogram.h, the
 * one bench/ and the metrics use) and printed in ms.
 */
#ifndef PC_AGENTS_CLI_LOAD_H
#define PC_AGENTS_CLI_LOAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "agents/obs/obs.h"

struct cJSON;

#define PC_LOAD_CMD "pincer load"
/* Exit status when a --threshold does not hold (k6 uses its own too). */
#define PC_LOAD_THRESHOLD_FAILED 3
/* Distinct error codes kept; past them errors count under "other". */
#define PC_LOAD_ERROR_KINDS 32

typedef enum pc_load_proto {
	PC_LOAD_WS,   /* OpenClaw's WebSocket RPC: `agent`, its events, its final answer
		       * (or --via chat: chat.send, its answer, `chat` events) */
	PC_LOAD_HTTP, /* OpenAI chat completions */
} pc_load_proto_t;

typedef struct pc_load_opts {
	const char *target;
	pc_load_proto_t proto;
	bool https;                /* http over TLS: libcurl's connections, not the session's own */
	char host[256], path[256]; /* ws */
	uint16_t port;             /* ws */
	char url[600];             /* http: the target + "/chat/completions" */
	const char *token, *password, *model, *message;
	char model_found[256];     /* http without --model: the target's first model (pc_load_pick_model) */
	const char *session_key;   /* ws: the sessionKey's template */
	char **messages;           /* --messages: one per line, or NULL */
	size_t n_messages;
	struct pc_cli_identity *identity; /* ws: --identity, the device connects sign with */
	bool stream;               /* http: "stream": true */
	bool via_chat;             /* ws: chat.send and `chat` events instead of `agent` */
	bool via_wait;             /* ws: `agent`, then agent.wait for its run's end */
	bool json, progress;
	uint32_t sessions;
	uint64_t turns;            /* per session; 0 with --duration: no limit */
	uint64_t duration_ms;      /* 0: until the turns are done */
	uint64_t think_ms;         /* closed loop: the pause after each turn */
	bool open;                 /* open loop: --rate or --stages */
	double rate;               /* open loop: turns/s in all (with stages: where the first starts) */
	struct pc_load_stage {
		uint64_t ms;       /* its length */
		double rate;       /* the rate it ramps to, linearly, from the one before */
	} *stages;                 /* --stages, or NULL */
	size_t n_stages;
	struct pc_load_stage *session_stages; /* --session-stages (`rate`: the sessions), or NULL */
	size_t n_session_stages;
	uint32_t sessions_start;   /* with session stages: the sessions at the start */
	bool poisson;              /* open loop: exponential gaps, else equal ones */
	uint64_t seed;
	uint64_t max_in_flight;    /* open loop: queued or running turns; 0: no cap */
	uint64_t warmup_ms;
	uint64_t timeout_ms;       /* one turn, from its send */
	uint64_t connect_timeout_ms;
	/* --slo: a successful turn within each limit given (µs; 0: none) is good */
	bool slo;
	uint64_t slo_ttft_us, slo_tpot_us, slo_turn_us;
	int target_pid;             /* --target-pid; 0: none */
	uint64_t target_starttime;  /* its start time: tells it from a later process given its pid */
} pc_load_opts_t;

/* The latency histograms, by what they measure. */
enum { PC_LOAD_ACCEPTED, PC_LOAD_TTFT, PC_LOAD_TPOT, PC_LOAD_ITL, PC_LOAD_TURN, PC_LOAD_HISTS };
/* A series' name in the results: "turn_ms", … (load_report.c). */
const char *pc_load_series_name(int series);

/* The per-second windows --csv reads and empties (load_csv.c). */
enum { PC_LOAD_WINDOW_TURN, PC_LOAD_WINDOW_TTFT, PC_LOAD_WINDOWS };

/* Turns by their number of tool calls: 0 .. PC_LOAD_TOOL_BUCKETS - 2, and
 * the last bucket the rest. */
#define PC_LOAD_TOOL_BUCKETS 17

/* A process's CPU and memory at one time (load_proc.c). */
typedef struct pc_load_proc {
	uint64_t at_ns;  /* 0: not read */
	double cpu_s;    /* user + system, every thread */
	double rss_mib;  /* resident now (VmRSS) */
	double peak_mib; /* the most resident so far (VmHWM) */
	/* voluntary context switches of every living thread: each is a
	 * sleep the OS later woke it from */
	uint64_t wakeups;
} pc_load_proc_t;

/* A thread of the target as last read (load_proc.c). */
typedef struct pc_load_thread {
	int tid;
	uint64_t cpu_ns, wakeups;
} pc_load_thread_t;

/* The target's and the harness's samples: the first, and the last two
 * (--csv's rows take the CPU between them). Written by the driver only. */
typedef struct pc_load_procs {
	pc_load_proc_t target_first, target_prev, target_last;
	/* the target's threads as last read, and what they did since the
	 * first sample, summed thread by thread */
	pc_load_thread_t *threads;
	size_t nthreads;
	uint64_t cpu_ns, wakeups;
	bool per_thread; /* /proc/PID/task/TID/schedstat could be read */
	bool target_gone; /* it ended during the run: its figures are its last second's */
	pc_load_proc_t self_first, self_last;
} pc_load_procs_t;

/* What a run measured. Counters are written by the session actors and
 * read by the driver's progress line while the run goes on. */
typedef struct pc_load_stats {
	pc_hist_t *hist[PC_LOAD_HISTS];
	pc_hist_t *window[PC_LOAD_WINDOWS]; /* NULL without --csv or --out */
	struct pc_load_records *records;    /* --out: every turn (load_out.h), or NULL */
	atomic_uint_fast64_t ok, failed, dropped, warmup, tokens;
	/* the tool calls of the ok turns, and those turns by their number */
	atomic_uint_fast64_t tool_calls, tool_turns[PC_LOAD_TOOL_BUCKETS], tool_calls_max;
	atomic_uint_fast64_t good;          /* --slo: ok turns within it */
	atomic_uint_fast64_t in_flight;     /* queued or running now */
	atomic_uint_fast64_t sessions_done; /* closed loop: sessions past their last turn */
	atomic_uint_fast64_t ws_live;       /* ws: connections not yet ended */
	atomic_uint_fast64_t connections;   /* ws and http://: connections made to the target */
	atomic_bool stopped;                /* the duration is over: nothing more is counted */
	uint64_t t0_ns, warm_until_ns;
	uint64_t wall_ns;                   /* from the start to the end, warmup excluded */
	uint64_t in_flight_at_end;
	uint64_t arrivals;                  /* open loop: turns the schedule asked for */
	bool interrupted;                   /* SIGINT / SIGTERM ended the run */
	pthread_mutex_t mu;                 /* errors */
	struct {
		char code[48];
		uint64_t n;
	} errors[PC_LOAD_ERROR_KINDS];
	size_t error_kinds;
	pc_load_procs_t procs;
} pc_load_stats_t;

/* `windows`: keep the per-second windows too (--csv). */
int pc_load_stats_init(pc_load_stats_t *st, bool windows);
void pc_load_stats_destroy(pc_load_stats_t *st);
/* One failed turn with error `code`. */
void pc_load_stats_error(pc_load_stats_t *st, const char *code);

/* Reads --messages FILE into o->messages (load_messages.c): 0, or
 * PC_CLI_FAIL / PC_CLI_USAGE with the reason printed. */
int pc_load_messages_read(const char *path, pc_load_opts_t *o);
void pc_load_messages_free(pc_load_opts_t *o);

/* --csv FILE (load_csv.c). */
typedef struct pc_load_csv {
	FILE *f;
	const char *path;
	uint64_t ok, failed, dropped, tool_calls, last_ns; /* at the last row */
	int write_errno;                       /* the first write's failure */
} pc_load_csv_t;

/* Creates the file and writes the header: 0, or PC_CLI_FAIL printed. */
int pc_load_csv_open(const char *path, pc_load_csv_t *c);
/* The row of the time since the last one (or the start), ending `now_ns`.
 * NULL c is a no-op. */
void pc_load_csv_row(pc_load_csv_t *c, pc_load_stats_t *st, uint64_t now_ns);
/* Closes it: 0, or PC_CLI_FAIL with the first write error printed. */
int pc_load_csv_close(pc_load_csv_t *c);

/* --target-pid (load_proc.c): 0 with the process's start time, or
 * PC_ENOTFOUND when there is no such process. */
int pc_load_proc_check(int pid, uint64_t *starttime);
/* Samples the harness and the target (when given) at `now_ns`: the first
 * call is the start. A target that is gone is said once on stderr. */
void pc_load_proc_sample(const pc_load_opts_t *o, pc_load_stats_t *st, uint64_t now_ns);
/* The CPU between two samples in % of one core; 0 when there is no time
 * between them. */
double pc_load_proc_cpu_pct(const pc_load_proc_t *from, const pc_load_proc_t *to);

/* --metrics-url (load_metrics.c): the target's cumulative Prometheus
 * series (counters, histograms' and summaries' buckets, sums, counts)
 * read before and after the run, and their changes. */
typedef struct pc_load_metrics {
	const char *url;      /* NULL: no --metrics-url */
	const char *filter;   /* --metrics-filter: the series the summary lists */
	void *re;             /* its compiled regex_t */
	struct pc_load_series {
		char *key;    /* name{labels} as served */
		double value;
	} *before, *delta;    /* before: by key; delta: the changed ones, largest first */
	size_t n_before, n_delta;
	bool before_read;     /* the read before the run succeeded */
	bool read;            /* both did */
} pc_load_metrics_t;

/* Compiles --metrics-filter: 0, or PC_CLI_USAGE / PC_CLI_FAIL printed. */
int pc_load_metrics_init(pc_load_metrics_t *m, const char *url, const char *filter);
/* The reads before and after the run; a failed one is a warning on
 * stderr, and the run has no deltas. No-ops without a URL. */
void pc_load_metrics_before(pc_load_metrics_t *m, uint64_t timeout_ms);
void pc_load_metrics_after(pc_load_metrics_t *m, uint64_t timeout_ms);
/* The summary's lines on `f`: the changes --metrics-filter matches, else
 * the 10 largest (buckets left out). */
void pc_load_metrics_text(FILE *f, const pc_load_metrics_t *m);
/* Adds "metrics_delta": {series: change} (null without both reads) to
 * `j`; false when out of memory. */
bool pc_load_metrics_json(struct cJSON *j, const pc_load_metrics_t *m);
void pc_load_metrics_free(pc_load_metrics_t *m);

struct pc__buf;
/* GETs `url` (with one extra header line, or NULL) into *body, at most
 * `max` bytes within `timeout_ms`: true, or false with the reason in
 * `why`. The command's thread only, while no other thread runs (libcurl's
 * global init). */
bool pc_load_get(const char *url, const char *header, uint64_t timeout_ms, size_t max, struct pc__buf *body,
		 char *why, size_t why_len);

/* An http:// target given no --model: the first model of the target's
 * /models listing (with the --token), else "mock"; before the run. */
void pc_load_pick_model(pc_load_opts_t *o);

/* --identity (load_identity.c): one connection before the run that pairs
 * the device and keeps the device token the gateway gives. 0 (also when
 * the target cannot be reached: the run then measures that), or
 * PC_CLI_FAIL with the reason printed (the gateway refused the device:
 * waiting for approval, with what to run to approve it). */
int pc_load_identity_pair(const pc_load_opts_t *o);

/* Runs the load the options describe; progress on stderr, rows in `csv`
 * (may be NULL). 0, or an error already printed (PC_CLI_FAIL). */
int pc_load_run(const pc_load_opts_t *o, pc_load_stats_t *st, pc_load_csv_t *csv);

/* ---- sessions (load_session.c) ---- */

struct pc_runtime;
struct pc_io;
struct pc_actor;

/* Messages a session takes from the driver. */
enum {
	PC_LOAD_MSG_TURN = 0x10a0, /* u64: the turn's intended send time */
	PC_LOAD_MSG_START,         /* closed loop: play --turns turns (again, after a retire) */
	PC_LOAD_MSG_RETIRE,        /* closed loop: stop after the turn under way */
	PC_LOAD_MSG_BYE,           /* the run is over: close the connection with a close frame */
};

/* Spawns the actor of session `index` (0-based). */
int pc_load_session_spawn(struct pc_runtime *rt, struct pc_io *io, const pc_load_opts_t *o, pc_load_stats_t *st,
			  uint32_t index, struct pc_actor **out);

/* ---- results (load_report.c) ---- */

/* The summary table on `f`. */
void pc_load_report_text(FILE *f, const pc_load_opts_t *o, const pc_load_stats_t *st);

/* The --json object (docs/load.md); NULL when out of memory. */
struct cJSON *pc_load_report_object(const pc_load_opts_t *o, const pc_load_stats_t *st);

/* ---- --compare OLD.json (load_compare.c) ---- */

/* The earlier run's object, or NULL with the reason printed. */
struct cJSON *pc_load_compare_read(const char *path);
/* The table of old, new and change on `f`. */
void pc_load_compare_text(FILE *f, const char *path, const struct cJSON *old, const struct cJSON *now);
/* Adds {"compare": {file, <figure>: {old, new, change}, <series>: {...}}}
 * to `now`; false when out of memory. */
bool pc_load_compare_json(struct cJSON *now, const char *path, const struct cJSON *old);

/* Checks a --threshold expression's grammar: 0, or PC_CLI_USAGE with the
 * reason printed. */
int pc_load_threshold_check(const char *expr);
/* Evaluates it: true when every clause holds; each that does not is
 * printed on `f`. */
bool pc_load_threshold_eval(const char *expr, const pc_load_stats_t *st, FILE *f);

#endif
