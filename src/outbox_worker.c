/*-------------------------------------------------------------------------
 *
 * outbox_worker.c
 *		The launcher and the per-database drain workers (placeholder).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "outbox.h"

bool		outbox_preloaded = false;

PG_FUNCTION_INFO_V1(outbox_worker_status);

/* Define the worker settings and, when preloaded, register the launcher. */
void
OutboxWorkerInit(void)
{
}

/* outbox.worker_status(): one row per drain worker */
Datum
outbox_worker_status(PG_FUNCTION_ARGS)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("the outbox worker is not available")));
	PG_RETURN_NULL();
}
