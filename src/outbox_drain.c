/*-------------------------------------------------------------------------
 *
 * outbox_drain.c
 *		One delivery path for drain_once and the background worker
 *		(placeholder).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "outbox.h"

/* One round over every routed topic of this database, committing per batch. */
bool
DrainDatabaseRound(Oid delivering_role, TimestampTz *next_wake,
				   int64 *delivered, int64 *failed)
{
	*next_wake = DT_NOEND;
	*delivered = 0;
	*failed = 0;
	return false;
}
