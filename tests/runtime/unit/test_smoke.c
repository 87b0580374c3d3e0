#include <criterion/criterion.h>
#include "pincer.h"
#include "test_util.h"
static int recv_count(pc_ctx_t *ctx, void *st, pc_msg_t *m) { (void)ctx; __atomic_fetch_add((int*)st, (int)pc_msg_u64(m), __ATOMIC_RELAXED); return 0; }
static const pc_behavior_t B = {"count", recv_count, NULL};
Test(smoke, send) {
	pc_runtime_t *rt; cr_assert_eq(pc_runtime_new(NULL, &rt), 0);
	cr_assert_eq(pc_runtime_start(rt), 0);
	int n = 0; pc_actor_t *a; cr_assert_eq(pc_spawn(rt, &B, &n, &a), 0);
	for (int i = 0; i < 1000; i++) pc_send_u64(a, 1, 1);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 5000), 0);
	cr_assert_eq(n, 1000);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}
