/*-------------------------------------------------------------------------
 *
 * outbox_wakeup.c
 *		Waking the drain worker of this database when a transaction that
 *		appended messages commits (placeholder).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "outbox.h"

/* Install the per-backend hooks; called once from _PG_init. */
void
OutboxWakeupInit(void)
{
}

/* Ask for the worker of this database to be woken when this transaction commits. */
void
WakeWorkerAtCommit(void)
{
}
