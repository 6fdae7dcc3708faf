/*-------------------------------------------------------------------------
 *
 * outbox_drain_int.h
 *		What the files of a delivery round share, and nothing else
 *		includes: the batches of remote routes and the worker's
 *		transactions.
 *
 *	outbox_drain.c			the round of drain_once and of the worker;
 *							NOTIFY batches
 *	outbox_drain_pace.c		the size of the worker's next NOTIFY batch of
 *							each topic
 *	outbox_drain_remote.c	a batch of a remote or HTTP route, and its
 *							circuit breaker
 *	outbox_drain_outcomes.c	the outcomes of such a batch recorded
 *	outbox_drain_call.c		the call of one message of such a batch: a
 *							remote command or an HTTP request
 *	outbox_drain_wait.c		the worker's remote batches in flight, and its
 *							wait that serves them
 *	outbox_drain_xact.c		the worker's transactions, and what an error in
 *							one leaves
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DRAIN_INT_H
#define OUTBOX_DRAIN_INT_H

#include "datatype/timestamp.h"
#include "utils/elog.h"
#include "utils/palloc.h"

#include "outbox_delivery.h"
#include "outbox_http.h"
#include "outbox_store.h"
#include "outbox_store_routes.h"

/*
 * the call of one message of a batch (outbox_drain_call.c): one of the
 * two is set
 */
typedef struct BatchCall
{
	RemoteCall *remote;
	HttpCall   *http;
} BatchCall;

extern BatchCall *BatchCallHttp(const char *url, const char *ca_file,
								const HttpRouteSecrets *secrets,
								const pg_uuid_t *id, const char *envelope,
								TimestampTz deadline);
extern int	BatchCallSocket(BatchCall *call, pgsocket *sock);
extern TimestampTz BatchCallDeadline(BatchCall *call);
extern void BatchCallStep(BatchCall *call, int ready);
extern void BatchCallWait(BatchCall *call);
extern bool BatchCallPending(BatchCall *call);
extern void BatchCallAbandon(BatchCall *call);

/*
 * Whether a route is delivered by calls, one message after the other, in
 * batches that fly (remote and HTTP routes), rather than by NOTIFY
 */
#define ROUTE_BY_CALLS(route)	((route)->remote || (route)->http)

/* Whether two routes are of the same topic and subscription (NULL: default) */
static inline bool
SameRoute(const char *topic1, const char *sub1, const char *topic2, const char *sub2)
{
	if (strcmp(topic1, topic2) != 0 || (sub1 == NULL) != (sub2 == NULL))
		return false;
	return sub1 == NULL || strcmp(sub1, sub2) == 0;
}

/* Who delivers, and what has been done so far */
typedef struct DrainState
{
	Oid			role;			/* the role that runs the round */
	text	   *owner;			/* lease owner */
	int			batch_size;
	int			lease_seconds;
	int64		delivered;
	int64		failed;
	int			claimed;		/* by the last batch */
} DrainState;

/*
 * The size of the next NOTIFY batch of a topic, kept from round to round.
 * A full batch doubles it; a short one that found messages (the heads of
 * ordering keys, whose next messages must wait for them) shrinks it to
 * what it found, and holds it there for a second, then two, four... up to
 * PACE_HOLD_MAX_MS: the claim reads past every message it cannot take
 * whenever it asks for more than it finds, which under one ordering key
 * with a large backlog costs seconds, and a batch that asks for no more
 * than it finds never does.  A batch that finds nothing resets it.
 */
typedef struct TopicPace
{
	char	   *topic;
	char	   *subscription;	/* of the route; NULL: the default one */
	int			size;			/* of its next batch */
	TimestampTz grow_after;		/* no larger batch before */
	int			hold_ms;		/* how long the last short batch held it */
} TopicPace;

/* the worker's paces (outbox_drain_pace.c) */
extern TopicPace *DrainPacesFor(List *routes, int batch_size);
extern void DrainPace(TopicPace *pace, int claimed, int batch_size);

/* one batch of a route (outbox_drain_batch.c) */
extern void DrainClaimRequest(DrainState *st, OutboxRoute *route, int size,
							  ClaimRequest *req);
extern int	DrainRouteClaim(const ClaimRequest *req, const OutboxRoute *route,
							List **messages);
extern bool DrainRouteFail(DrainState *st, const OutboxRoute *route, pg_uuid_t *id,
						   const char *error, TimestampTz now);
extern void DrainNotifyBatch(DrainState *st, OutboxRoute *route, int size);
extern TimestampTz DrainNextDue(OutboxRoute *route, TimestampTz now);

/* a batch of a remote or HTTP route (outbox_drain_remote.c) */
typedef struct RemoteBatch RemoteBatch;

extern bool RemoteRoutePaused(const OutboxRoute *route, TimestampTz now);
extern int	RemoteRouteBatchSize(const OutboxRoute *route, int batch_size);
extern RemoteBatch *RemoteBatchClaim(const ClaimRequest *req,
									 const OutboxRoute *route,
									 MemoryContext parent);
extern bool RemoteBatchOfRoute(RemoteBatch *batch, const OutboxRoute *route);
extern BatchCall *RemoteBatchNext(RemoteBatch *batch);

/* its outcomes recorded (outbox_drain_outcomes.c) */
extern void RemoteBatchFinish(RemoteBatch *batch, int64 *delivered,
							  int64 *failed);
extern void RemoteBatchAbandon(RemoteBatch *batch, const char *error,
							   bool messages, int64 *delivered, int64 *failed);
extern void RemoteBatchDrop(RemoteBatch *batch);

/* the worker's transactions (outbox_drain_xact.c) */
extern bool DrainBeginLocked(const char *activity, MemoryContext cxt);
extern void DrainCommit(void);
extern ErrorData *DrainCatch(MemoryContext cxt, bool *at_commit);
extern char *DrainErrorText(const ErrorData *edata);
extern bool DrainErrorIsMessages(const ErrorData *edata);

/* the worker's batches in flight (outbox_drain_wait.c) */
extern MemoryContext DrainFlightContext(void);
extern bool DrainFlying(const OutboxRoute *route);
extern void DrainFly(RemoteBatch *batch);
extern void DrainFlightCounts(int64 *delivered, int64 *failed);

#endif							/* OUTBOX_DRAIN_INT_H */
