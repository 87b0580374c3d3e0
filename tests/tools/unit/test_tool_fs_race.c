/*
 * The file tools against a concurrent swap of names for ways out of the
 * workspace (tool_fs_race.h), with the kernel's openat2 resolving paths.
 * The same race without openat2 is in test_tool_fs_fallback.c.
 */
#include "tool_fs_race.h"

Test(fs_race, read_write_never_leave)
{
	fx_t *f = fx_new();
	race_read_write(f);
	fx_free(f);
}
