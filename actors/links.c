/*
 * Links, monitors and the news of an actor's death.
 *
 * Each actor's bookkeeping lives in its ext block under the ext's mutex:
 * links (both sides hold a reference to the other), watchers (who monitors
 * me: reference to the watcher), watching (whom I monitor: reference to
 * the target), and muted senders. An actor marks its ext dead when it
 * stops, after setting PC__AF_STOPPED; anyone adding an entry checks both
 * under the lock, so nobody is added after the news went out (the argument
 * is in docs/architecture.md, "Ext blocks, links and monitors").
 */
#include "actor_internal.h"

#include <stdlib.h>
#include <string.h>

#include "../mailbox/atomics.h"

pc__actor_ext_t *pc__actor_ext_peek(const pc_actor_t *a)
{
	return pc_atomic_load_ptr_acq((void *const *)&a->ext);
}

pc__actor_ext_t *pc__actor_ext(pc_actor_t *a)
{
	pc__actor_ext_t *x = pc_atomic_load_ptr_acq((void *const *)&a->ext);
	if (x)
		return x;
	x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	pthread_mutex_init(&x->lock, NULL);
	if (!pc_atomic_cas_ptr((void **)&a->ext, NULL, x)) {
		pthread_mutex_destroy(&x->lock);
		free(x);
		x = pc_atomic_load_ptr_acq((void *const *)&a->ext);
	}
	return x;
}

int pc__vec_add(pc__actor_vec_t *v, uint64_t ref, pc_actor_t *a, pc_msg_t *note)
{
	if (v->n == v->cap) {
		uint32_t cap = v->cap ? v->cap * 2 : 4;
		pc__monitor_t *nv = realloc(v->v, sizeof(*nv) * cap);
		if (!nv)
			return PC_ENOMEM;
		v->v = nv;
		v->cap = cap;
	}
	v->v[v->n++] = (pc__monitor_t){ref, a, note};
	return 0;
}

bool pc__vec_take(pc__actor_vec_t *v, uint64_t ref, pc_actor_t **out)
{
	for (uint32_t i = 0; i < v->n; i++) {
		if (v->v[i].ref == ref) {
			*out = v->v[i].actor;
			pc_msg_free(v->v[i].note);
			v->v[i] = v->v[--v->n];
			return true;
		}
	}
	return false;
}

static void vec_release_all(pc__actor_vec_t *v, bool retained)
{
	for (uint32_t i = 0; i < v->n; i++) {
		pc_msg_free(v->v[i].note);
		if (retained)
			pc_actor_release(v->v[i].actor);
	}
	free(v->v);
	memset(v, 0, sizeof(*v));
}

static bool is_dead(pc_actor_t *a, pc__actor_ext_t *x)
{
	return x->dead || (pc_atomic_load_u32_acq(&a->aflags) & PC__AF_STOPPED);
}

static pc_msg_t *new_note(void)
{
	return pc_msg_new(PC_MSG_DOWN, sizeof(pc_down_t));
}

/* Sends the exit notice `m` (a new_note) about `from` to `to`. */
static void send_note(pc_msg_t *m, pc_actor_t *to, uint32_t type, uint64_t ref, const pc_actor_t *from)
{
	m->type = type;
	pc_down_t *d = pc_msg_data(m);
	d->ref = ref;
	d->actor_id = from->id;
	d->reason = from->exit_reason;
	d->code = from->exit_code;
	pc_send(to, m);
}

/* Removes the entry `ref` from target's watchers (a reference to the
 * watcher, which is released). */
static void unwatch(pc_actor_t *target, uint64_t ref)
{
	pc__actor_ext_t *x = pc_atomic_load_ptr_acq((void *const *)&target->ext);
	pc_actor_t *watcher = NULL;
	if (!x)
		return;
	pthread_mutex_lock(&x->lock);
	bool found = pc__vec_take(&x->watchers, ref, &watcher);
	pthread_mutex_unlock(&x->lock);
	if (found)
		pc_actor_release(watcher);
}

void pc__actor_notify_exit(pc_actor_t *a)
{
	/* PC__AF_STOPPED is already set (a full barrier): an ext installed
	 * after this load sees it. */
	pc__actor_ext_t *x = pc_atomic_load_ptr_acq((void *const *)&a->ext);
	if (!x)
		return;
	pthread_mutex_lock(&x->lock);
	x->dead = true;
	pc__actor_vec_t links = x->links, watchers = x->watchers, watching = x->watching;
	char *name = x->name;
	memset(&x->links, 0, sizeof(x->links));
	memset(&x->watchers, 0, sizeof(x->watchers));
	memset(&x->watching, 0, sizeof(x->watching));
	x->name = NULL;
	pthread_mutex_unlock(&x->lock);

	/* The name goes first: whoever hears of the stop (a supervisor
	 * restarting the child under the same name) must find it free. */
	if (name) {
		pc__registry_forget(a->rt, name, a);
		free(name);
	}
	for (uint32_t i = 0; i < links.n; i++) {
		send_note(links.v[i].note, links.v[i].actor, PC__MSG_LINK_EXIT, 0, a);
		links.v[i].note = NULL;
	}
	for (uint32_t i = 0; i < watchers.n; i++) {
		send_note(watchers.v[i].note, watchers.v[i].actor, PC_MSG_DOWN, watchers.v[i].ref, a);
		watchers.v[i].note = NULL;
	}
	for (uint32_t i = 0; i < watching.n; i++)
		unwatch(watching.v[i].actor, watching.v[i].ref);
	vec_release_all(&links, true);
	vec_release_all(&watchers, true);
	vec_release_all(&watching, true);
	pc__unmute_all(a);
}

void pc__actor_ext_free(pc_actor_t *a)
{
	pc__actor_ext_t *x = a->ext;
	if (!x)
		return;
	a->ext = NULL;
	vec_release_all(&x->links, true);
	vec_release_all(&x->watchers, true);
	vec_release_all(&x->watching, true);
	vec_release_all(&x->muted, false);
	free(x->name);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

bool pc__actor_take_watching(pc_actor_t *a, uint64_t ref)
{
	pc__actor_ext_t *x = pc__actor_ext_peek(a);
	pc_actor_t *target = NULL;
	if (!x)
		return false;
	pthread_mutex_lock(&x->lock);
	bool found = pc__vec_take(&x->watching, ref, &target);
	pthread_mutex_unlock(&x->lock);
	if (found)
		pc_actor_release(target);
	return found;
}

bool pc__actor_drop_link(pc_actor_t *a, uint64_t id)
{
	pc__actor_ext_t *x = pc__actor_ext_peek(a);
	pc_actor_t *other = NULL;
	if (!x)
		return false;
	pthread_mutex_lock(&x->lock);
	bool found = pc__vec_take(&x->links, id, &other);
	pthread_mutex_unlock(&x->lock);
	if (found)
		pc_actor_release(other);
	return found;
}

static void lock_pair(pc__actor_ext_t *a, pc__actor_ext_t *b)
{
	if (a < b) {
		pthread_mutex_lock(&a->lock);
		pthread_mutex_lock(&b->lock);
	} else {
		pthread_mutex_lock(&b->lock);
		pthread_mutex_lock(&a->lock);
	}
}

static void unlock_pair(pc__actor_ext_t *a, pc__actor_ext_t *b)
{
	pthread_mutex_unlock(&a->lock);
	pthread_mutex_unlock(&b->lock);
}

static bool has(const pc__actor_vec_t *v, uint64_t ref)
{
	for (uint32_t i = 0; i < v->n; i++)
		if (v->v[i].ref == ref)
			return true;
	return false;
}

int pc_link(pc_ctx_t *ctx, pc_actor_t *other)
{
	pc_actor_t *self = ctx ? ctx->actor : NULL;
	if (!self || !other || other == self || other->rt != self->rt)
		return PC_EINVAL;
	pc__actor_ext_t *xs = pc__actor_ext(self), *xo = pc__actor_ext(other);
	/* One notice for each direction: sent by whichever side stops. */
	pc_msg_t *to_self = new_note(), *to_other = new_note();
	if (!xs || !xo || !to_self || !to_other) {
		pc_msg_free(to_self);
		pc_msg_free(to_other);
		return PC_ENOMEM;
	}
	int rc = 0;
	bool signal = false;
	lock_pair(xs, xo);
	bool dead = is_dead(other, xo);
	if (has(&xs->links, other->id)) {
		/* Already linked. If `other` is dead, its exit signal is on its
		 * way to us (it sends one to every link it had). */
	} else if (dead) {
		/* Linking to the dead acts at once: our side of the link is what
		 * the exit signal is checked against when it arrives (see
		 * PC__MSG_LINK_EXIT in actor.c), so that pc_unlink before then
		 * still cancels it, as for a link that broke normally. */
		rc = pc__vec_add(&xs->links, other->id, other, to_other);
		if (rc == 0) {
			pc_actor_retain(other);
			to_other = NULL;
			signal = true;
		}
	} else {
		rc = pc__vec_add(&xs->links, other->id, other, to_other);
		if (rc == 0 && (rc = pc__vec_add(&xo->links, self->id, self, to_self)) != 0)
			xs->links.n--;
		if (rc == 0) {
			pc_actor_retain(other);
			pc_actor_retain(self);
			to_self = to_other = NULL;
		}
	}
	unlock_pair(xs, xo);
	pc_msg_free(to_other);
	if (signal) {
		send_note(to_self, self, PC__MSG_LINK_EXIT, 0, other);
		to_self = NULL;
	}
	pc_msg_free(to_self);
	return rc;
}

int pc_unlink(pc_ctx_t *ctx, pc_actor_t *other)
{
	pc_actor_t *self = ctx ? ctx->actor : NULL;
	if (!self || !other || other == self)
		return PC_EINVAL;
	pc__actor_ext_t *xs = pc__actor_ext(self), *xo = pc__actor_ext(other);
	if (!xs || !xo)
		return PC_ENOMEM;
	pc_actor_t *a = NULL, *b = NULL;
	lock_pair(xs, xo);
	bool fa = pc__vec_take(&xs->links, other->id, &a);
	bool fb = pc__vec_take(&xo->links, self->id, &b);
	unlock_pair(xs, xo);
	if (fa)
		pc_actor_release(a);
	if (fb)
		pc_actor_release(b);
	return fa ? 0 : PC_ENOTFOUND;
}

int pc_monitor(pc_ctx_t *ctx, pc_actor_t *target, uint64_t *ref_out)
{
	pc_actor_t *self = ctx ? ctx->actor : NULL;
	if (!self || !target || target == self || target->rt != self->rt)
		return PC_EINVAL;
	pc__actor_ext_t *xs = pc__actor_ext(self), *xt = pc__actor_ext(target);
	if (!xs || !xt)
		return PC_ENOMEM;
	uint64_t ref = pc__next_id(self->rt);
	/* Our side first: a DOWN can only be handled after this handler
	 * returns, and it is dropped unless `watching` has its ref. */
	pthread_mutex_lock(&xs->lock);
	pc_msg_t *note = new_note();
	int rc = note ? pc__vec_add(&xs->watching, ref, target, NULL) : PC_ENOMEM;
	pthread_mutex_unlock(&xs->lock);
	if (rc != 0) {
		pc_msg_free(note);
		return rc;
	}
	pc_actor_retain(target);
	pthread_mutex_lock(&xt->lock);
	bool dead = is_dead(target, xt);
	if (!dead && (rc = pc__vec_add(&xt->watchers, ref, self, note)) == 0) {
		pc_actor_retain(self);
		note = NULL;
	}
	pthread_mutex_unlock(&xt->lock);
	if (rc != 0) {
		pc_msg_free(note);
		pc__actor_take_watching(self, ref);
		return rc;
	}
	if (ref_out)
		*ref_out = ref;
	if (dead)
		send_note(note, self, PC_MSG_DOWN, ref, target);
	return 0;
}

int pc_demonitor(pc_ctx_t *ctx, uint64_t ref)
{
	pc_actor_t *self = ctx ? ctx->actor : NULL;
	if (!self)
		return PC_EINVAL;
	pc__actor_ext_t *xs = pc__actor_ext_peek(self);
	if (!xs)
		return PC_ENOTFOUND; /* it never monitored anything */
	pc_actor_t *target = NULL;
	pthread_mutex_lock(&xs->lock);
	bool found = pc__vec_take(&xs->watching, ref, &target);
	pthread_mutex_unlock(&xs->lock);
	if (!found)
		return PC_ENOTFOUND;
	unwatch(target, ref);
	pc_actor_release(target);
	return 0;
}
