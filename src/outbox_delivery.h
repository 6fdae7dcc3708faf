/*-------------------------------------------------------------------------
 *
 * outbox_delivery.h
 *		Delivery: one round over the routed topics (outbox_drain.c) and the
 *		two kinds of route it delivers to, a NOTIFY channel
 *		(outbox_notify.c) and a command on a remote PostgreSQL database
 *		(outbox_remote_*.c).
 *
 * The checks made when a route is created raise errors; the deliveries
 * never do for a bad message or a failing destination, but return false
 * with the condition in an OutboxError, which the round records with
 * outbox.fail.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DELIVERY_H
#define OUTBOX_DELIVERY_H

#include "datatype/timestamp.h"
#include "utils/memutils.h"

#include "outbox_error.h"

struct ClaimedMessage;

/* one delivery round of the worker (outbox_drain.c) */
extern bool DrainDatabaseRound(Oid delivering_role, TimestampTz *next_wake,
							   int64 *delivered, int64 *failed);

/* NOTIFY routes (outbox_notify.c) */
#define OUTBOX_NOTIFY_MAX_BYTES		7999	/* pg_notify payloads stay below 8000 bytes */
extern void CheckChannel(text *channel);
extern bool NotifyDeliver(const char *channel, struct ClaimedMessage *m,
						  OutboxError *error);

/*
 * remote routes (outbox_remote_check.c, outbox_remote_command.c)
 *
 * The envelope travels as a parameter in one protocol message, which a
 * server accepts up to 1 GB; the rest of that message (the topic, the
 * lengths) takes far less than the 64 kB kept for it.
 */
#define OUTBOX_REMOTE_MAX_BYTES		((int) (MaxAllocSize - 1) - 65536)
extern void RemoteCheckCommand(const char *command);
extern void RemoteCheckRoute(const char *server_name, Oid creator);
extern bool RemoteDeliver(const char *server_name, Oid userid,
						  bool require_password, const char *command,
						  const char *envelope, const char *topic,
						  TimestampTz deadline, OutboxError *error);

#endif							/* OUTBOX_DELIVERY_H */
