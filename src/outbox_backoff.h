/*-------------------------------------------------------------------------
 *
 * outbox_backoff.h
 *		The retry delay after a failed delivery (outbox_backoff.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_BACKOFF_H
#define OUTBOX_BACKOFF_H

#include "postgres.h"

extern int64 BackoffDelaySeconds(int attempts, int base_seconds, int max_seconds);

#endif							/* OUTBOX_BACKOFF_H */
