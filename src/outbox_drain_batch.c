/*-------------------------------------------------------------------------
 *
 * outbox_drain_batch.c
 *		One batch of a route: the claim of its subscription's messages (the
 *		topic's default subscription, or a named one), a NOTIFY route's
 *		batch delivered in the claim's transaction, the failure of one of
 *		its messages, and when the route next has something due.
 *
 * A NOTIFY route of the default subscription claims and marks its batch
 * delivered in one statement; one of a named subscription leases it,
 * queues the notifications and completes the messages queued, all in the
 * transaction whose commit sends them.  A message that cannot be sent is
 * failed in its subscription.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "outbox.h"
#include "outbox_delivery.h"
#include "outbox_drain_int.h"
#include "outbox_error.h"
#include "outbox_subs.h"

static void obx_notify_subscription(DrainState *st, OutboxRoute *route,
									ClaimRequest *req);

/* A claim of one batch of size messages of the route's topic, as of now. */
void
DrainClaimRequest(DrainState *st, OutboxRoute *route, int size,
				  ClaimRequest *req)
{
	req->owner = st->owner;
	req->topic = cstring_to_text(route->topic);
	req->batch_size = size;
	req->lease_seconds = st->lease_seconds;
	req->max_attempts = outbox_max_attempts;
	req->now = GetCurrentTimestamp();
	req->by_route = true;
	req->across = false;
	req->no_wait = false;

	/* a named subscription's claims need what its pull claims need */
	if (route->subscription != NULL)
		CheckSubscriptionClaim(req->topic, cstring_to_text(route->subscription));
}

/* The messages of a claim of the route, leased; their number. */
int
DrainRouteClaim(const ClaimRequest *req, const OutboxRoute *route, List **messages)
{
	if (route->subscription != NULL)
		return SubsClaimMessages(req, cstring_to_text(route->subscription), messages);
	return StoreClaimMessages(req, messages);
}

/*
 * A failure of message m of the route: back off, or dead at the last
 * attempt.  False when the lease was lost.
 */
bool
DrainRouteFail(DrainState *st, const OutboxRoute *route, pg_uuid_t *id,
			   const char *error, TimestampTz now)
{
	text	   *clipped = ClipErrorText(error, strlen(error));

	if (route->subscription != NULL)
		return SubsFail(id, st->owner, clipped, cstring_to_text(route->subscription), now);
	return StoreFail(id, st->owner, clipped, now);
}

/*
 * The batch of a NOTIFY route of a named subscription: claimed (leased),
 * each notification queued for this transaction's commit, and the ones
 * queued completed in the same transaction; a message that cannot be sent
 * is failed.
 */
static void
obx_notify_subscription(DrainState *st, OutboxRoute *route, ClaimRequest *req)
{
	text	   *name = cstring_to_text(route->subscription);
	List	   *messages = NIL;
	Datum	   *done;
	int			ndone = 0;
	ListCell   *lc;

	st->claimed = SubsClaimMessages(req, name, &messages);
	done = palloc(sizeof(Datum) * Max(list_length(messages), 1));
	foreach(lc, messages)
	{
		ClaimedMessage *m = (ClaimedMessage *) lfirst(lc);
		OutboxError failure;

		if (NotifyDeliver(route->channel, m, &failure))
		{
			done[ndone++] = UUIDPGetDatum(&m->id);
			continue;
		}
		if (DrainRouteFail(st, route, &m->id, OutboxErrorText(&failure),
						   GetCurrentTimestamp()))
			st->failed++;
	}
	if (ndone > 0)
		st->delivered += SubsCompleteMany(construct_array(done, ndone, UUIDOID, UUID_LEN,
														  false, TYPALIGN_CHAR),
										  st->owner, name);
}

/*
 * One batch of at most size messages of a NOTIFY route: claimed and marked
 * delivered by one statement, then each notification queued for this
 * transaction's commit.  A message that cannot be sent is taken back and
 * failed.
 */
void
DrainNotifyBatch(DrainState *st, OutboxRoute *route, int size)
{
	ClaimRequest req;
	List	   *messages = NIL;
	ListCell   *lc;
	int			claimed;

	DrainClaimRequest(st, route, size, &req);
	if (route->subscription != NULL)
	{
		obx_notify_subscription(st, route, &req);
		return;
	}
	if (SubsDefaultHeld(req.topic, req.now, NULL))
	{
		st->claimed = 0;
		return;					/* paused: nothing to deliver now */
	}
	claimed = StoreClaimDelivered(&req, &messages);
	st->claimed = claimed;

	foreach(lc, messages)
	{
		ClaimedMessage *m = (ClaimedMessage *) lfirst(lc);
		OutboxError failure;
		char	   *error;
		TimestampTz now;

		if (NotifyDeliver(route->channel, m, &failure))
		{
			st->delivered++;
			continue;
		}
		error = OutboxErrorText(&failure);
		now = GetCurrentTimestamp();
		StoreUndeliver(&m->id, st->owner,
					   now + (int64) st->lease_seconds * USECS_PER_SEC);
		if (StoreFail(&m->id, st->owner, ClipErrorText(error, strlen(error)), now))
			st->failed++;
	}
}

/*
 * When something of the route next becomes due: a message; for a paused
 * route (its breaker, or errors of its own) the end of the pause, as its
 * messages due now are not counted by StoreNextDue.  DT_NOEND: nothing
 * pending.
 */
TimestampTz
DrainNextDue(OutboxRoute *route, TimestampTz now)
{
	TimestampTz until;

	if (RemoteRoutePaused(route, now))
		return route->paused_until;
	if (route->subscription != NULL)
		return SubsNextDue(cstring_to_text(route->topic),
						   cstring_to_text(route->subscription), now);
	if (SubsDefaultHeld(cstring_to_text(route->topic), now, &until))
		return until;			/* a paused default subscription: its end */
	return StoreNextDue(cstring_to_text(route->topic), now);
}
