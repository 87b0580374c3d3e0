/*
 * Transcript rewrites under the session write lock. The lock is taken
 * around the store's own rewrite rather than inside the store actor: an
 * acquire may wait up to a minute, and the actor's one writer connection
 * must not wait with it.
 */
#include "store.h"

int pc_store_rewrite_locked(pc_store_t *s, const char *lock_dir, const pc_session_lock_opts_t *opts,
			    const char *key, int64_t epoch, int64_t expected_last_seq, int64_t from_seq,
			    const pc_store_msg_t *msgs, size_t n, int64_t *last_seq, pc_session_lock_info_t *busy)
{
	if (!s || !lock_dir || !key)
		return PC_EINVAL;
	pc_session_lock_opts_t o;
	if (opts)
		o = *opts;
	else
		pc_session_lock_opts_init(&o);
	pc_session_lock_t *lock = NULL;
	int rc = pc_session_lock_acquire(lock_dir, key, &o, &lock, busy);
	if (rc != 0)
		return rc;
	rc = pc_store_rewrite(s, key, epoch, expected_last_seq, from_seq, msgs, n, last_seq);
	int rel = pc_session_lock_release(lock);
	return rc != 0 ? rc : rel;
}
