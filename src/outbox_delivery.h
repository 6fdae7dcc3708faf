/*-------------------------------------------------------------------------
 *
 * outbox_delivery.h
 *		Delivery: one round over the routed topics (outbox_drain*.c) and the
 *		two kinds of route it delivers to, a NOTIFY channel
 *		(outbox_notify.c) and a command on a remote PostgreSQL database
 *		(outbox_remote_*.c).
 *
 * The checks made when a route is created raise errors; the deliveries
 * never do for a bad message or a failing destination, but fail with the
 * condition in an OutboxError, which the round records with outbox.fail.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DELIVERY_H
#define OUTBOX_DELIVERY_H

#include <signal.h>

#include "datatype/timestamp.h"
#include "utils/memutils.h"

#include "outbox_error.h"

struct ClaimedMessage;

/*
 * the worker: one delivery round (outbox_drain.c), and the wait between
 * rounds that serves the remote calls in flight (outbox_drain_wait.c)
 */
extern bool DrainDatabaseRound(Oid delivering_role, TimestampTz *next_wake,
							   int64 *delivered, int64 *failed);
extern void DrainWait(long timeout_ms, volatile sig_atomic_t *waiting,
					  volatile sig_atomic_t *stop, bool (*wanted) (void));

/*
 * Whether a step of the worker runs in a transaction, which a cancel
 * (SIGINT: pg_cancel_backend, statement_timeout, lock_timeout) may end
 * (outbox_drain_xact.c)
 */
extern volatile sig_atomic_t DrainStepRunning;

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

/* one step of outbox.check_route (outbox_remote_probe.c) */
typedef struct RouteCheckStep
{
	const char *step;			/* "server", "connect", "prepare" */
	bool		ok;
	char	   *sqlstate;		/* of a failure; else NULL */
	char	   *message;
} RouteCheckStep;

extern List *RemoteProbeRoute(const char *server_name, Oid creator,
							  const char *created_by,
							  const char *command);

/* one message's delivery to a remote route, which never blocks */
typedef struct RemoteCall RemoteCall;

/* how a remote call ended */
typedef enum RemoteOutcome
{
	REMOTE_PENDING,				/* it has not */
	REMOTE_DELIVERED,			/* the remote command committed */
	REMOTE_FAILED,				/* the server said no, or this side refused */
	REMOTE_UNREACHABLE			/* could not connect, lost the connection,
								 * or timed out */
} RemoteOutcome;

extern RemoteCall *RemoteCallStart(const char *server_name, Oid userid,
								   bool require_password, const char *command,
								   const char *envelope, const char *topic,
								   TimestampTz deadline);
extern int	RemoteCallSocket(RemoteCall *call, pgsocket *sock);
extern TimestampTz RemoteCallDeadline(RemoteCall *call);
extern void RemoteCallStep(RemoteCall *call, int ready);
extern void RemoteCallWait(RemoteCall *call);
extern RemoteOutcome RemoteCallOutcome(RemoteCall *call,
									   const OutboxError **error);
extern void RemoteCallAbandon(RemoteCall *call);

#endif							/* OUTBOX_DELIVERY_H */
