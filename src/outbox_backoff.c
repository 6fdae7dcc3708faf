/*-------------------------------------------------------------------------
 *
 * outbox_backoff.c
 *		The retry delay after a failed delivery.
 *
 * delay = min(base × 2^(attempts − 1), cap), computed without overflow for
 * any attempt count.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "outbox_backoff.h"

/* Seconds to wait before the next claim of a message that failed attempt N. */
int64
BackoffDelaySeconds(int attempts, int base_seconds, int max_seconds)
{
	int64		delay = base_seconds;
	int			i;

	if (delay >= max_seconds)
		return max_seconds;

	/* double attempts - 1 times, stopping at the cap */
	for (i = 1; i < attempts; i++)
	{
		delay *= 2;
		if (delay >= max_seconds)
			return max_seconds;
	}
	return delay;
}
