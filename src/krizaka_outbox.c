/*-------------------------------------------------------------------------
 *
 * krizaka_outbox.c
 *		Library entry point of krizaka_outbox.
 *
 * _PG_init only checks where it is being loaded and hands over to each
 * subsystem's initialisation; everything else lives in the outbox_*.c files.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "outbox.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Module load: define the settings on every load; the worker registers
 * itself only when the library is preloaded.
 */
void
_PG_init(void)
{
	OutboxGucInit();
	OutboxWorkerInit();
	OutboxWakeupInit();

	MarkGUCPrefixReserved("outbox");
}
