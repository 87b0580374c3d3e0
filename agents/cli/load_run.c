/*
 * A run of `pincer load` (load.h): the runtime and I/O threads, one
 * session actor per simulated session, and the command's own thread as
 * the clock: it sends open-loop arrivals at their intended times, prints
 * the progress line and the --csv rows, and ends the run when the turns are done, the
 * duration is over, or SIGINT / SIGTERM comes. It sleeps in sigtimedwait,
 * so a signal ends a wait at once.
 */
#include "load.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/runtime.h"
#include "io/io.h"
#include "commands.h"

#define NS_PER_MS 1000000u
#define PROGRESS_NS (1000u * NS_PER_MS)
/* The longest sleep between looks at the sessions' counters. */
#define POLL_NS (20u * NS_PER_MS)
/* How long the end waits for the sessions to stop (each is one handler
 * away from it). */
#define STOP_WAIT_NS (5000u * NS_PER_MS)
/* How long the connections' close handshakes may take at the end. */
#define CLOSE_WAIT_NS (1000u * NS_PER_MS)
/* The step in which a ramp's rate is summed to find the next arrival. */
#define RAMP_STEP_NS (1u * NS_PER_MS)

int pc_load_stats_init(pc_load_stats_t *st, bool windows)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_init(&st->mu, NULL);
	int rc = 0;
	for (int i = 0; rc == 0 && i < PC_LOAD_HISTS; i++)
		rc = pc_hist_new(NULL, &st->hist[i]);
	for (int i = 0; rc == 0 && windows && i < PC_LOAD_WINDOWS; i++)
		rc = pc_hist_new(NULL, &st->window[i]);
	if (rc != 0)
		pc_load_stats_destroy(st);
	return rc;
}

void pc_load_stats_destroy(pc_load_stats_t *st)
{
	for (int i = 0; i < PC_LOAD_HISTS; i++)
		pc_hist_free(st->hist[i]);
	for (int i = 0; i < PC_LOAD_WINDOWS; i++)
		pc_hist_free(st->window[i]);
	free(st->procs.threads);
	pthread_mutex_destroy(&st->mu);
	memset(st, 0, sizeof(*st));
}

void pc_load_stats_error(pc_load_stats_t *st, const char *code)
{
	atomic_fetch_add(&st->failed, 1);
	pthread_mutex_lock(&st->mu);
	size_t i = 0;
	while (i < st->error_kinds && strcmp(st->errors[i].code, code) != 0)
		i++;
	if (i == st->error_kinds && i == PC_LOAD_ERROR_KINDS)
		i--; /* the last kind takes what does not fit */
	if (i == st->error_kinds) {
		const char *name = i + 1 < PC_LOAD_ERROR_KINDS ? code : "other";
		snprintf(st->errors[i].code, sizeof(st->errors[i].code), "%s", name);
		st->error_kinds++;
	}
	st->errors[i].n++;
	pthread_mutex_unlock(&st->mu);
}

/* ---- arrivals ---- */

/* splitmix64: small, and the same sequence for the same seed everywhere. */
static uint64_t next_random(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* Where the `n` ramps of `s`, starting from `from`, stand `ns` after the
 * start (0 past the last). */
static double ramp_at(const struct pc_load_stage *s, size_t n, double from, uint64_t ns)
{
	uint64_t start = 0;
	for (size_t i = 0; i < n; i++) {
		if (ns < start + s[i].ms * NS_PER_MS)
			return from + (s[i].rate - from) * (double)(ns - start) / ((double)s[i].ms * NS_PER_MS);
		start += s[i].ms * NS_PER_MS;
		from = s[i].rate;
	}
	return 0;
}

/* The rate `ns` after the start: --rate, or the stages' ramps. */
static double rate_at(const pc_load_opts_t *o, uint64_t ns)
{
	return o->n_stages ? ramp_at(o->stages, o->n_stages, o->rate, ns) : o->rate;
}

/* The gap from an arrival `ns` after the start to the next, in ns. The
 * next comes when the rate's integral from here reaches 1 (constant
 * arrivals) or an exponential draw of mean 1 (Poisson: the time-varying
 * process by time change). A fixed rate has it in closed form; ramps are
 * summed in steps. Past the stages' end: the gap to the end. */
static uint64_t gap_ns(const pc_load_opts_t *o, uint64_t *rng, uint64_t ns)
{
	double need = 1.0;
	if (o->poisson) {
		/* u in (0, 1]: -ln(u) is an exponential draw of mean 1 */
		double u = (double)((next_random(rng) >> 11) + 1) / 9007199254740992.0;
		need = -log(u);
	}
	if (!o->n_stages)
		return (uint64_t)(need * 1e9 / o->rate);
	uint64_t end = o->duration_ms * NS_PER_MS;
	for (uint64_t t = ns; t < end; t += RAMP_STEP_NS) {
		double r = rate_at(o, t + RAMP_STEP_NS / 2);
		double got = r * RAMP_STEP_NS / 1e9;
		if (got >= need)
			return t - ns + (uint64_t)(need / r * 1e9);
		need -= got;
	}
	return end > ns ? end - ns : 0;
}

/* ---- progress ---- */

typedef struct progress {
	bool tty;
	uint64_t next_ns, last_ok, last_ns;
} progress_t;

static void progress_line(const pc_load_stats_t *st, progress_t *p, uint64_t now)
{
	uint64_t ok = atomic_load(&st->ok);
	double dt = (double)(now - p->last_ns) / 1e9;
	uint64_t p50 = 0, p99 = 0;
	(void)pc_hist_percentile(st->hist[PC_LOAD_TURN], 50, &p50);
	(void)pc_hist_percentile(st->hist[PC_LOAD_TURN], 99, &p99);
	fprintf(stderr, "%s%7.1fs  ok %llu  failed %llu  dropped %llu  in flight %llu  %.1f turns/s  p50 %.1f ms  "
			"p99 %.1f ms%s",
		p->tty ? "\r\033[K" : "", (double)(now - st->t0_ns) / 1e9, (unsigned long long)ok,
		(unsigned long long)atomic_load(&st->failed), (unsigned long long)atomic_load(&st->dropped),
		(unsigned long long)atomic_load(&st->in_flight), dt > 0 ? (double)(ok - p->last_ok) / dt : 0.0,
		(double)p50 / 1000, (double)p99 / 1000, p->tty ? "" : "\n");
	p->last_ok = ok;
	p->last_ns = now;
}

/* ---- the run ---- */

typedef struct driver {
	const pc_load_opts_t *o;
	pc_load_stats_t *st;
	pc_load_csv_t *csv;
	pc_runtime_t *rt;
	pc_io_t *io;
	pc_actor_t **sessions;
	uint32_t spawned;
	uint32_t active; /* closed loop: the first `active` sessions play */
	sigset_t sigs;
	uint64_t rng, next_arrival, arrival_limit, end_ns;
} driver_t;

static void teardown(driver_t *d)
{
	/* WebSocket connections end with a close frame, as a client that is
	 * done says goodbye (a server logs the rest as dropped), for a bounded
	 * while. Then the sessions stop (their stop handlers end what is left
	 * of their connections and requests), so none opens a connection on
	 * I/O threads that are going away. */
	for (uint32_t i = 0; i < d->spawned; i++)
		(void)pc_send_signal(d->sessions[i], PC_LOAD_MSG_BYE);
	uint64_t until = pc__clock_mono_ns() + CLOSE_WAIT_NS;
	while (atomic_load(&d->st->ws_live) > 0 && pc__clock_mono_ns() < until)
		(void)nanosleep(&(struct timespec){0, 1000000}, NULL);
	for (uint32_t i = 0; i < d->spawned; i++)
		(void)pc_actor_stop(d->sessions[i], PC_EXIT_NORMAL);
	until = pc__clock_mono_ns() + STOP_WAIT_NS;
	for (uint32_t i = 0; i < d->spawned; i++)
		while (!pc_actor_stopped(d->sessions[i]) && pc__clock_mono_ns() < until)
			(void)nanosleep(&(struct timespec){0, 1000000}, NULL);
	pc_io_free(d->io);
	for (uint32_t i = 0; i < d->spawned; i++)
		pc_actor_release(d->sessions[i]);
	free(d->sessions);
	pc_runtime_free(d->rt);
}

static int setup(driver_t *d)
{
	pc_runtime_config_t rcfg;
	pc_runtime_config_init(&rcfg);
	int rc = pc_runtime_new(&rcfg, &d->rt);
	if (rc == 0)
		rc = pc_runtime_start(d->rt);
	/* every session may have its request out at once: the client's own
	 * per-host cap would queue them and measure the harness, not the target */
	pc_io_config_t icfg = {.max_host_connections = d->o->sessions, .max_idle_connections = d->o->sessions};
	if (rc == 0)
		rc = pc_io_new(d->rt, &icfg, &d->io);
	d->sessions = rc == 0 ? calloc(d->o->sessions, sizeof(*d->sessions)) : NULL;
	if (rc == 0 && !d->sessions)
		rc = PC_ENOMEM;
	for (; rc == 0 && d->spawned < d->o->sessions; d->spawned++)
		rc = pc_load_session_spawn(d->rt, d->io, d->o, d->st, d->spawned, &d->sessions[d->spawned]);
	if (rc != 0)
		fprintf(stderr, PC_LOAD_CMD ": cannot start: %s\n", pc_strerror(rc));
	return rc;
}

/* Sends the arrivals due by `now`: each to the next session in turn, or
 * counted as dropped when --max-in-flight turns are already out. */
static void arrivals(driver_t *d, uint64_t now)
{
	const pc_load_opts_t *o = d->o;
	pc_load_stats_t *st = d->st;
	while (d->next_arrival <= now && d->next_arrival < d->end_ns && st->arrivals < d->arrival_limit) {
		uint64_t intended = d->next_arrival, k = st->arrivals++;
		d->next_arrival += gap_ns(o, &d->rng, d->next_arrival - st->t0_ns);
		if (o->max_in_flight && atomic_load(&st->in_flight) >= o->max_in_flight) {
			if (intended >= st->warm_until_ns)
				atomic_fetch_add(&st->dropped, 1);
			continue;
		}
		atomic_fetch_add(&st->in_flight, 1);
		if (pc_send_u64(d->sessions[k % o->sessions], PC_LOAD_MSG_TURN, intended) != 0) {
			atomic_fetch_sub(&st->in_flight, 1);
			pc_load_stats_error(st, "client");
		}
	}
}

/* Closed loop: sessions [active, n) start playing, or those past n retire
 * after their turn under way. */
static void set_active(driver_t *d, uint32_t n)
{
	for (; d->active < n; d->active++)
		if (pc_send_signal(d->sessions[d->active], PC_LOAD_MSG_START) != 0)
			atomic_fetch_add(&d->st->sessions_done, 1);
	for (; d->active > n; d->active--)
		(void)pc_send_signal(d->sessions[d->active - 1], PC_LOAD_MSG_RETIRE);
}

/* --session-stages: as many sessions play as the ramp stands at now. */
static void ramp_sessions(driver_t *d, uint64_t now)
{
	const pc_load_opts_t *o = d->o;
	double want = ramp_at(o->session_stages, o->n_session_stages, o->sessions_start, now - d->st->t0_ns);
	set_active(d, want < o->sessions ? (uint32_t)lround(want) : o->sessions);
}

/* True once every turn asked for has ended (not with --duration alone). */
static bool done(const driver_t *d)
{
	const pc_load_stats_t *st = d->st;
	if (!d->o->turns)
		return false;
	if (!d->o->open)
		return atomic_load(&st->sessions_done) >= d->o->sessions;
	return st->arrivals >= d->arrival_limit && atomic_load(&st->in_flight) == 0;
}

/* Sleeps until `until` or a signal: true when a signal came. */
static bool sleep_until(const driver_t *d, uint64_t until)
{
	uint64_t now = pc__clock_mono_ns();
	uint64_t ns = until > now ? until - now : 0;
	struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
	int sig = sigtimedwait(&d->sigs, NULL, &ts);
	return sig == SIGINT || sig == SIGTERM;
}

static void drive(driver_t *d)
{
	const pc_load_opts_t *o = d->o;
	pc_load_stats_t *st = d->st;
	progress_t p = {.tty = isatty(STDERR_FILENO) == 1};
	st->t0_ns = pc__clock_mono_ns();
	pc_load_proc_sample(o, st, st->t0_ns);
	st->warm_until_ns = st->t0_ns + o->warmup_ms * NS_PER_MS;
	d->end_ns = o->duration_ms ? st->warm_until_ns + o->duration_ms * NS_PER_MS : UINT64_MAX;
	/* the first arrival: at the start, or where the stages' ramp has
	 * summed to one */
	d->next_arrival = st->t0_ns + (o->n_stages ? gap_ns(o, &d->rng, 0) : 0);
	d->arrival_limit = o->turns ? o->turns * o->sessions : UINT64_MAX;
	d->rng = o->seed;
	p.next_ns = st->t0_ns + PROGRESS_NS;
	p.last_ns = st->t0_ns;
	if (!o->open && !o->n_session_stages)
		set_active(d, o->sessions);
	for (;;) {
		uint64_t now = pc__clock_mono_ns();
		if (o->open)
			arrivals(d, now);
		else if (o->n_session_stages)
			ramp_sessions(d, now);
		if (now >= d->end_ns || done(d))
			break;
		if (now >= p.next_ns) {
			if (o->progress)
				progress_line(st, &p, now);
			pc_load_proc_sample(o, st, now);
			pc_load_csv_row(d->csv, st, now);
			p.next_ns += PROGRESS_NS;
		}
		uint64_t wake = now + POLL_NS;
		if (o->open && d->next_arrival < wake)
			wake = d->next_arrival;
		if (d->end_ns < wake)
			wake = d->end_ns;
		if (p.next_ns < wake)
			wake = p.next_ns;
		if (sleep_until(d, wake)) {
			st->interrupted = true;
			break;
		}
	}
	atomic_store(&st->stopped, true);
	uint64_t end = pc__clock_mono_ns();
	st->in_flight_at_end = atomic_load(&st->in_flight);
	st->wall_ns = end > st->warm_until_ns ? end - st->warm_until_ns : 0;
	pc_load_proc_sample(o, st, end);
	pc_load_csv_row(d->csv, st, end);
	if (o->progress) {
		progress_line(st, &p, end);
		if (p.tty)
			fputc('\n', stderr);
	}
}

int pc_load_run(const pc_load_opts_t *o, pc_load_stats_t *st, pc_load_csv_t *csv)
{
	driver_t d = {.o = o, .st = st, .csv = csv};
	/* before any thread starts, so only sigtimedwait sees them */
	sigemptyset(&d.sigs);
	sigaddset(&d.sigs, SIGINT);
	sigaddset(&d.sigs, SIGTERM);
	if (pthread_sigmask(SIG_BLOCK, &d.sigs, NULL) != 0) {
		fprintf(stderr, PC_LOAD_CMD ": cannot block signals\n");
		return PC_CLI_FAIL;
	}
	int rc = setup(&d);
	if (rc == 0)
		drive(&d);
	teardown(&d);
	return rc == 0 ? PC_CLI_OK : PC_CLI_FAIL;
}
