/*
 * The gateway's view of a WebSocket client (agents/gateway/rpc_internal.h,
 * "gwclient"): which transitions its table allows, and their names.
 */
#include <criterion/criterion.h>

#include "agents/gateway/rpc_internal.h"

Test(gwclient_lifecycle, the_table)
{
	/* a client that connects, works and leaves */
	cr_assert(pc__gw_phase_legal(PC__GW_C_NEW, PC__GW_C_CHALLENGE));
	cr_assert(pc__gw_phase_legal(PC__GW_C_CHALLENGE, PC__GW_C_OPEN));
	cr_assert(pc__gw_phase_legal(PC__GW_C_OPEN, PC__GW_C_CLOSED));
	/* our close: a refused connect, the handshake's deadline, a drain */
	cr_assert(pc__gw_phase_legal(PC__GW_C_CHALLENGE, PC__GW_C_CLOSING));
	cr_assert(pc__gw_phase_legal(PC__GW_C_OPEN, PC__GW_C_CLOSING));
	cr_assert(pc__gw_phase_legal(PC__GW_C_CLOSING, PC__GW_C_CLOSED));
	/* not accepted */
	cr_assert(pc__gw_phase_legal(PC__GW_C_NEW, PC__GW_C_CLOSED));
	for (int p = 0; p < PC__GW_C_CLOSED; p++)
		cr_assert(pc__gw_phase_legal((pc__gw_phase_t)p, PC__GW_C_CLOSED), "%s -> closed",
			  pc__gw_phase_name((pc__gw_phase_t)p));

	/* refused */
	for (int p = 0; p < PC__GW_C_COUNT; p++)
		cr_assert(!pc__gw_phase_legal(PC__GW_C_CLOSED, (pc__gw_phase_t)p), "closed is terminal");
	cr_assert(!pc__gw_phase_legal(PC__GW_C_NEW, PC__GW_C_OPEN), "connect comes after the challenge");
	cr_assert(!pc__gw_phase_legal(PC__GW_C_NEW, PC__GW_C_CLOSING), "nothing to close before the upgrade");
	cr_assert(!pc__gw_phase_legal(PC__GW_C_OPEN, PC__GW_C_CHALLENGE), "one handshake per connection");
	cr_assert(!pc__gw_phase_legal(PC__GW_C_CLOSING, PC__GW_C_OPEN));
	cr_assert(!pc__gw_phase_legal(PC__GW_C_OPEN, PC__GW_C_OPEN));
	cr_assert(!pc__gw_phase_legal(PC__GW_C_COUNT, PC__GW_C_CLOSED));
	cr_assert(!pc__gw_phase_legal(PC__GW_C_OPEN, PC__GW_C_COUNT));

	cr_assert_str_eq(pc__gw_phase_name(PC__GW_C_CHALLENGE), "challenge");
	cr_assert_str_eq(pc__gw_phase_name(PC__GW_C_CLOSED), "closed");
	cr_assert_str_eq(pc__gw_phase_name(PC__GW_C_COUNT), "unknown");
	for (int p = 0; p < PC__GW_C_COUNT; p++)
		cr_assert_str_neq(pc__gw_phase_name((pc__gw_phase_t)p), "unknown");
}
