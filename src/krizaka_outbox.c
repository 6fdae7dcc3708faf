/*-------------------------------------------------------------------------
 *
 * krizaka_outbox.c
 *		Library entry point of krizaka_outbox.
 *
 * _PG_init shows, in order, everything the library registers when it is
 * loaded: the settings on every load; and only when the postmaster preloads
 * it, the shared state, the launcher of the background workers and the
 * callbacks that wake them.  Everything else lives in the outbox_*.c files.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "outbox.h"
#include "outbox_shmem.h"
#include "outbox_stream.h"
#include "outbox_subs.h"
#include "outbox_worker.h"

PG_MODULE_MAGIC;

bool		outbox_preloaded = false;

void		_PG_init(void);

/* Module load: register what this kind of load calls for. */
void
_PG_init(void)
{
	outbox_preloaded = process_shared_preload_libraries_in_progress;

	/* the settings; the worker's take effect only when preloaded */
	OutboxGucInit();
	MarkGUCPrefixReserved("outbox");

	/* appends in their gap: a lock of theirs without preloading */
	if (!outbox_preloaded)
	{
		OutboxGapInit(false);
		return;
	}

	/* the shared state: request it, and create it with shared memory */
	OutboxShmemInit();

	/*
	 * the topics' claim positions, the topics a claim across all of them
	 * visits, and the appends in their gap
	 */
	OutboxStreamInit();
	StreamAcrossInit();
	OutboxGapInit(true);

	/* the due hints of named subscriptions, shared between backends */
	SubsHintsInit();

	/* the launcher; pg_upgrade's server must not deliver anything */
	if (!IsBinaryUpgrade)
		OutboxLauncherRegister();

	/* per backend: wake the workers at commit, clear the way for DDL */
	OutboxWakeupInit();
}
