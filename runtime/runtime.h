/*
 * The runtime: worker threads with work-stealing run queues, a timer thread
 * driving a hierarchical timing wheel, and a bounded pool for blocking work.
 *
 * Lifecycle: pc_runtime_new -> pc_runtime_start -> ... -> pc_runtime_stop ->
 * pc_runtime_free. Actors may be spawned and sent to before start; they run
 * once the workers exist.
 *
 * Threads: unless a function says otherwise it may be called from any
 * thread, including from inside actor handlers. pc_runtime_stop and
 * pc_runtime_free must not be called from a runtime thread.
 */
#ifndef PINCER_RUNTIME_RUNTIME_H
#define PINCER_RUNTIME_RUNTIME_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_runtime pc_runtime_t;

typedef struct pc_runtime_config {
	uint32_t workers;          /* worker threads; 0 = online CPUs */
	uint32_t blocking_threads; /* blocking pool bound; 0 = 4 */
	uint32_t blocking_queue;   /* pending blocking jobs before PC_EBUSY; 0 = 65536 */
	uint32_t batch;            /* messages per actor turn; 0 = 64 */
	uint32_t spin_rounds;      /* steal rounds before an idle worker parks; 0 = 4 */
	int64_t malloc_top_pad;    /* glibc's M_TOP_PAD, set for the process when the
				    * runtime is created: 0 = 4 MiB, < 0 = leave the
				    * allocator alone (see below) */
	int64_t trim_after_ms;     /* this long after a worker that did work first
				    * fell asleep, it gives the free heap memory
				    * back (below): 0 = 1000, < 0 = never */
} pc_runtime_config_t;

/* The allocator. Message passing frees on one thread what another
 * allocated, so each worker's malloc arena keeps growing and shrinking by
 * a little: with glibc's default top pad (128 KiB) that is a system call
 * (mprotect to grow, madvise to shrink, each a TLB shootdown across cores)
 * for about every agent run. A 4 MiB top pad keeps that slack per arena
 * instead (about 20% of the agent loop's CPU at 100 sessions). The setting
 * is the process's: set malloc_top_pad < 0 to keep your own. */
#define PC_RUNTIME_DEFAULT_MALLOC_TOP_PAD ((int64_t)4 << 20)

/* After a burst, the allocator keeps the pages the burst freed: resident,
 * though nothing uses them. A worker that did work therefore asks the
 * allocator to give free memory back (mimalloc's mi_collect when it is the
 * process's allocator, else glibc's malloc_trim) trim_after_ms after it
 * first fell asleep since its last trim, if it is idle then: once per
 * busy-to-idle stretch, at most once per trim_after_ms while busy, never a
 * wake-up of its own beyond that one, and not put off by light work (a
 * periodic tick) in between. A thread that did only a little work since
 * its last trim (a trickle, not a burst: runtime/trim.h) waits 32 times as
 * long, so that one turn a second does not pay a trim a turn on every
 * thread it touched. The blocking threads and the I/O threads
 * (io/loop.c) do the same: mimalloc keeps a heap per thread, and an I/O
 * thread's holds what a burst of connections left. */
#define PC_RUNTIME_DEFAULT_TRIM_AFTER_MS 1000

/* Gives the calling thread's free heap memory back to the system, as an
 * idle worker does. Any thread; for threads of the caller's own that
 * allocate in bursts. */
void pc_runtime_trim_heap(const pc_runtime_t *rt);

/* Names the calling thread "pc-<role>-<index>" (cut to the system's 15
 * characters), so that top -H, perf and gdb tell Pincer's threads apart.
 * Best effort: a name that cannot be set changes nothing else. */
void pc_thread_name(const char *role, uint32_t index);

/* The configured trim_after_ms (< 0: never). */
int64_t pc_runtime_trim_after_ms(const pc_runtime_t *rt);

/* Fills `cfg` with the defaults (all zero, meaning "choose"). */
void pc_runtime_config_init(pc_runtime_config_t *cfg);

/* Creates a runtime (threads not started). `cfg` may be NULL for defaults.
 * On success *out is owned by the caller and released by pc_runtime_free. */
int pc_runtime_new(const pc_runtime_config_t *cfg, pc_runtime_t **out);

/* Starts the worker, timer and blocking threads. PC_ESTATE if already
 * started or stopped; PC_ESYS if a thread could not be created (the
 * runtime is then stopped). */
int pc_runtime_start(pc_runtime_t *rt);

/* Waits until no actor has messages or is running, no timer is pending and
 * no blocking job is queued or running: the runtime is quiescent. Returns 0,
 * or PC_ETIMEDOUT after `timeout_ms` (< 0 waits for ever). Meaningful only
 * when no thread outside the runtime is sending concurrently. Not from a
 * runtime thread. */
int pc_runtime_wait_quiescent(pc_runtime_t *rt, int64_t timeout_ms);

/* Stops the runtime: joins every thread, then runs the stop handler of
 * every actor still alive (reason PC_EXIT_SHUTDOWN), frees every queued
 * message, pending timer and blocking job, and every actor. Messages sent
 * during or after stop are freed undelivered. Idempotent. After it returns,
 * every pc_actor_t handle of this runtime is invalid. */
void pc_runtime_stop(pc_runtime_t *rt);

/* Stops the runtime if needed and frees it. NULL is a no-op. */
void pc_runtime_free(pc_runtime_t *rt);

/* Number of worker threads. */
uint32_t pc_runtime_workers(const pc_runtime_t *rt);

/* Milliseconds on the runtime's monotonic clock (the timers' clock). */
uint64_t pc_runtime_now_ms(void);

/* True on a worker thread of any runtime: code that would block (disk,
 * locks, sleeps) must go to the blocking pool instead (pc_blocking_submit). */
bool pc_runtime_on_worker(void);

/* A thread outside the pool that makes actors runnable in bursts (an I/O
 * thread between two polls: a response's head, body and end to one actor,
 * many responses at once) holds what it schedules from _hold_begin and
 * hands it all over at _hold_end: one lock of the injection queue and at
 * most one wake-up for the burst instead of one for each send, and an
 * actor sent several messages in it runs one turn for all of them. The
 * messages themselves are in the mailboxes at once; only the scheduling
 * waits. Nothing held may be waited for between the two calls. No effect
 * on a worker (a turn batches already). */
void pc_runtime_hold_begin(void);
void pc_runtime_hold_end(void);

/* A guest: a thread outside the pool (an I/O thread) that runs the actors
 * it made runnable itself, as a worker would. Handing a burst to a parked
 * worker costs a futex wake on each side (~45 us here) and moves the
 * messages to another core; at low load, when every worker is parked, the
 * thread that read the request is the cheaper one to handle it.
 * pc_runtime_guest_new makes the calling thread a guest (PC_ESTATE on a
 * worker, or a thread that is one already): from then on its
 * pc_runtime_hold_end, with every worker parked, runs the held actors,
 * and what they make runnable, on this thread for up to `budget_ns`, then
 * hands whatever is left to the workers; with a worker awake it hands
 * everything over, as on any thread. While the actors run, the thread
 * counts as a worker (pc_runtime_on_worker): what they do must not block,
 * as always. pc_runtime_guest_free, on the same thread and before the
 * runtime is freed, ends it. */
#define PC_RUNTIME_GUEST_BUDGET_NS (200u * 1000u) /* a lone request's handling
						   * takes tens of us; more waits for
						   * a worker, so that what else the
						   * thread serves does not wait */
typedef struct pc_runtime_guest pc_runtime_guest_t;
int pc_runtime_guest_new(pc_runtime_t *rt, uint64_t budget_ns, pc_runtime_guest_t **out);
void pc_runtime_guest_free(pc_runtime_guest_t *g);

typedef struct pc_worker_stats {
	uint64_t handled;   /* messages handed to behaviours */
	uint64_t sent;      /* messages sent from this worker */
	uint64_t turns;     /* actor turns run */
	uint64_t steals;    /* successful steals (each takes up to half a queue) */
	uint64_t parks;     /* times the worker went to sleep */
	uint64_t wakeups;   /* times another thread woke it */
	uint64_t trims;     /* times it gave free heap memory back (trim_after_ms) */
	uint64_t parked_ns; /* time spent asleep */
	double utilisation; /* 1 - parked time / time since start, 0..1 */
} pc_worker_stats_t;

typedef struct pc_runtime_stats {
	uint64_t sent_external;  /* messages sent from non-worker threads */
	uint64_t spawned;        /* actors spawned */
	uint64_t exited;         /* actors that have stopped */
	uint64_t actors_live;    /* actors whose memory is held: spawned and not
				  * yet reclaimed (stopped ones still referenced
				  * included) */
	uint64_t dead_letters;   /* messages freed undelivered (receiver stopped) */
	uint64_t timers_fired;   /* timer messages delivered */
	uint64_t blocking_done;  /* blocking jobs completed */
	uint64_t mutes;          /* times a sender was held back by backpressure */
	uint64_t blocking_trims; /* times an idle blocking thread gave free heap
				  * memory back (trim_after_ms) */
	uint64_t guest_turns;    /* actor turns run by guests (I/O and blocking
				  * threads, at low load), not by workers */
} pc_runtime_stats_t;

/* Messages waiting in the live actors' mailboxes. */
typedef struct pc_mailbox_stats {
	uint64_t actors;  /* live actors seen */
	uint64_t queued;  /* messages in their mailboxes, summed */
	uint32_t deepest; /* the fullest mailbox */
} pc_mailbox_stats_t;

/* Walks every actor slot (about a millisecond per 100,000 actors, holding
 * off the spawns that need a fresh slot meanwhile): for a metrics scrape,
 * not a hot path. Approximate while actors run. */
void pc_runtime_mailbox_stats(pc_runtime_t *rt, pc_mailbox_stats_t *out);

/* Snapshot of the counters (each read atomically, the set not as a whole).
 * `workers` may be NULL; otherwise up to `n` entries are written. Returns
 * the number of workers. */
uint32_t pc_runtime_stats(pc_runtime_t *rt, pc_runtime_stats_t *out, pc_worker_stats_t *workers,
			  uint32_t n);

#ifdef __cplusplus
}
#endif
#endif
