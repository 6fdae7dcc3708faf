/*-------------------------------------------------------------------------
 *
 * outbox_guc.c
 *		The outbox.* settings that every session uses.
 *
 * They are defined on every load of the library, preloaded or not, so that
 * SET, ALTER ROLE ... SET and ALTER DATABASE ... SET work everywhere and are
 * validated by the GUC machinery.  They carry no unit, so that SHOW prints
 * the plain number the documentation gives.  The worker's own settings live
 * with the worker and exist only when the library is preloaded.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"

#include "outbox.h"

int			outbox_batch_size = 50;
int			outbox_lease_seconds = 60;
int			outbox_max_attempts = 8;
int			outbox_backoff_seconds = 30;
int			outbox_backoff_max_seconds = 3600;
int			outbox_retention_days = 7;

/* Define the session settings; called from _PG_init on every load. */
void
OutboxGucInit(void)
{
	DefineCustomIntVariable("outbox.batch_size",
							"Number of messages claim leases when no batch size is passed.",
							NULL,
							&outbox_batch_size,
							50, OUTBOX_BATCH_SIZE_MIN, OUTBOX_BATCH_SIZE_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.lease_seconds",
							"Length of a lease in seconds when none is passed.",
							"Choose it longer than the slowest delivery.",
							&outbox_lease_seconds,
							60, OUTBOX_LEASE_SECONDS_MIN, OUTBOX_LEASE_SECONDS_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.max_attempts",
							"Number of claims after which a failing message is dead.",
							NULL,
							&outbox_max_attempts,
							8, 1, 50,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.backoff_seconds",
							"Delay in seconds before the first retry of a failed message.",
							"Each further failure doubles the delay, up to outbox.backoff_max_seconds.",
							&outbox_backoff_seconds,
							30, 1, 3600,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.backoff_max_seconds",
							"Longest retry delay in seconds.",
							NULL,
							&outbox_backoff_max_seconds,
							3600, 1, 86400,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.retention_days",
							"Age in days after which purge deletes delivered and dead messages.",
							NULL,
							&outbox_retention_days,
							7, 1, 3650,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
}
