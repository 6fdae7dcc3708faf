/*-------------------------------------------------------------------------
 *
 * outbox_drain_remote.c
 *		A batch of a remote or HTTP route: claimed, delivered one message
 *		after the other through calls (outbox_drain_call.c), the outcome of
 *		each noted; and the route's circuit breaker.
 *
 * A remote route is not transactional: the remote command commits on its
 * own.  A batch is claimed (leased); each message is delivered in order,
 * each call with a deadline of its own: outbox.remote_timeout_ms, but at
 * most half a lease from its start and one second before the lease ends.
 * Messages whose turn comes too late are released (their attempt does not
 * count) for a later batch.  Then the outcomes are recorded
 * (outbox_drain_outcomes.c): each failure with outbox.fail and the text of
 * its error, the successes completed together.
 *
 * The batch does not wait for its calls: RemoteBatchNext starts the next
 * one and returns it, and whoever drives the batch waits.  drain_once
 * drives one batch at a time, in its caller's transaction, and waits for
 * each call (outbox_drain.c).  The worker drives a batch per remote route
 * side by side and waits for all their calls and its latch at once, with
 * no transaction open (outbox_drain_wait.c); RemoteBatchClaim,
 * RemoteBatchNext and RemoteBatchFinish each run in a short transaction of
 * their own there.  So a batch keeps what it needs in a memory context of
 * its own, and the current message's envelope and call in a second one,
 * reset for each message.
 *
 * The circuit breaker: a call that finds the server unreachable (could
 * not connect, lost the connection, timed out) counts against the route; a
 * call that gets any other outcome ends the count.  After
 * outbox.remote_pause_after such calls in a row the route is paused, the
 * rest of the batch released untried, and no batch is claimed until the
 * pause ends: outbox.backoff_seconds, doubling with each further pause up
 * to outbox.backoff_max_seconds.  Then one message probes the route (a
 * batch of one); its success ends the pause for good.  The state lives in
 * outbox.routes (consecutive_failures, paused_until, last_failure), written
 * only when it changes, without waiting for a row lock, and only while the
 * route is still the one the batch was claimed for; setting the route
 * again resets it.
 *
 * Glossary:
 *	late		a claimed message whose turn came too late in its lease:
 *				released, its attempt not counted
 *	probe		the batch of one message claimed when a pause has ended
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_backoff.h"
#include "outbox_compat.h"
#include "outbox_drain_int.h"
#include "outbox_drain_remote_int.h"
#include "outbox_subs.h"

/* A remote call stops this long before the lease ends */
#define LEASE_MARGIN_US		USECS_PER_SEC

static Oid	obx_route_creator(const OutboxRoute *route, OutboxError *error);
static BatchCall *obx_start_call(RemoteBatch *batch, ClaimedMessage *m,
								 TimestampTz deadline);
static void obx_call_ended(RemoteBatch *batch);
static void obx_http_ended(RemoteBatch *batch);
static void obx_failed(RemoteBatch *batch, char *error);
static void obx_breaker_count(RemoteBatch *batch, bool unreachable,
							  const char *error);

/* Whether the route's breaker keeps it from being called at now. */
bool
RemoteRoutePaused(const OutboxRoute *route, TimestampTz now)
{
	return route->paused_until > now;
}

/*
 * How many messages to claim for the route: a full batch, or one to probe
 * a route whose pause has ended.
 */
int
RemoteRouteBatchSize(const OutboxRoute *route, int batch_size)
{
	return route->consecutive_failures >= outbox_remote_pause_after ?
		1 : batch_size;
}

/*
 * Claim a batch of the route as req says, to be delivered with the
 * credentials of the route's creator.  Returns NULL when nothing is due.
 * The batch lives in a memory context of its own under parent.  Runs in a
 * transaction, as the extension owner.
 */
RemoteBatch *
RemoteBatchClaim(const ClaimRequest *req, const OutboxRoute *route,
				 MemoryContext parent)
{
	MemoryContext cxt = AllocSetContextCreate(parent, "outbox remote batch",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	RemoteBatch *batch = palloc0(sizeof(RemoteBatch));
	volatile int n = 0;

	batch->cxt = cxt;
	PG_TRY();
	{
		n = route->subscription != NULL ?
			SubsClaimMessages(req, cstring_to_text(route->subscription), &batch->messages) :
			StoreClaimMessages(req, &batch->messages);
	}
	PG_CATCH();
	{
		/* the worker's batches live past the transaction: not this one */
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (n == 0)
	{
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		return NULL;
	}

	/*
	 * A remote server keeps what it is sent, so nothing may leave before
	 * the transactions that appended it are safe on disk: a producer that
	 * commits with synchronous_commit = off may not be yet, and a crash
	 * would leave the remote side with an event for work that never
	 * happened.  Their commit records precede this point of the WAL.  (The
	 * worker flushes past them anyway when it commits this claim; drain_once
	 * does not.  A NOTIFY route needs none of this: the notification leaves
	 * after the commit of the claim, whose flush covers them, unless that
	 * session itself commits asynchronously.)
	 */
	XLogFlush(ObxXLogInsertEnd());

	batch->message_cxt = AllocSetContextCreate(cxt, "outbox remote message",
											   ALLOCSET_DEFAULT_SIZES);
	batch->topic = pstrdup(route->topic);
	batch->subscription = route->subscription ? pstrdup(route->subscription) : NULL;
	batch->route_created_at = route->created_at;
	if (route->http)
	{
		/* no credentials of the creator's: what it sends, the route says */
		batch->http = true;
		batch->url = pstrdup(route->url);
		batch->ca_file = route->ca_file ? pstrdup(route->ca_file) : NULL;
		batch->secrets = StoreHttpSecrets(route->topic, route->subscription);
		batch->role = InvalidOid;
	}
	else
	{
		batch->server = pstrdup(route->server);
		batch->command = pstrdup(route->command);
		batch->role = obx_route_creator(route, &batch->no_creator);

		/*
		 * A route made by an ordinary role must not borrow the remote
		 * server's own identity (trust or peer authentication): its
		 * connection must authenticate with a password, the rule of dblink
		 * and postgres_fdw.
		 */
		batch->needs_password = !OidIsValid(batch->role) || !superuser_arg(batch->role);
	}
	batch->owner = DatumGetTextPCopy(PointerGetDatum(req->owner));
	batch->lease_us = (int64) req->lease_seconds * USECS_PER_SEC;
	batch->consecutive_failures = route->consecutive_failures;
	batch->paused_until = route->paused_until;
	MemoryContextSwitchTo(old);
	return batch;
}

/*
 * The role whose credentials deliver a remote route: the role that made it.
 * Its user mapping gives the credentials and its USAGE on the server is
 * checked again at each delivery (RemoteResolve), so revoking that USAGE or
 * dropping that mapping stops the route; whoever delivers (the worker's
 * role, the caller of drain_once) lends nothing of its own.  The role is
 * the one of created_by_role, still named created_by (a role made later
 * under the same name is another), or found by name when the table does
 * not say (tables older than 1.2, a row written by hand).  Returns
 * InvalidOid, with the condition in *error, if the role is gone (dropped
 * or renamed since).
 */
static Oid
obx_route_creator(const OutboxRoute *route, OutboxError *error)
{
	Oid			creator = StoreRouteCreator(route);

	if (!OidIsValid(creator))
	{
		OutboxErrorSet(error, ERRCODE_UNDEFINED_OBJECT,
					   "role \"%s\" that made the route of topic \"%s\" does not exist",
					   route->created_by, route->topic);
		OutboxErrorHint(error, "Make the route again with outbox.route_remote.");
	}
	return creator;
}

/* Whether the batch is of the route's topic and subscription. */
bool
RemoteBatchOfRoute(RemoteBatch *batch, const OutboxRoute *route)
{
	return SameRoute(batch->topic, batch->subscription, route->topic,
					 route->subscription);
}

/*
 * Note how the last call ended, and start the call of the next message
 * that has time left in its lease.  Returns that call, still running, or
 * NULL when the batch is through (RemoteBatchFinish records it then).
 * Runs in a transaction: the call reads the catalogs as it starts.
 */
BatchCall *
RemoteBatchNext(RemoteBatch *batch)
{
	MemoryContext old = MemoryContextSwitchTo(batch->cxt);
	BatchCall  *call = NULL;
	int			timeout_ms = batch->http ? outbox_http_timeout_ms :
		outbox_remote_timeout_ms;

	if (batch->call != NULL)
		obx_call_ended(batch);

	while (call == NULL && batch->next < list_length(batch->messages))
	{
		ClaimedMessage *m = list_nth(batch->messages, batch->next++);
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz deadline;

		CHECK_FOR_INTERRUPTS();

		deadline = Min(TimestampTzPlusMilliseconds(now, timeout_ms),
					   Min(now + batch->lease_us / 2,
						   m->leased_until - LEASE_MARGIN_US));

		/* too late in the lease, or the route was paused meanwhile */
		if (deadline <= now || batch->paused_until > now)
			batch->late = lappend(batch->late, &m->id);
		else
			call = obx_start_call(batch, m, deadline);
	}

	MemoryContextSwitchTo(old);
	return call;
}

/*
 * Start the call of message m, its envelope and call in the message's
 * memory context.  Returns the call while it runs; NULL when it ended at
 * once (its outcome noted).
 */
static BatchCall *
obx_start_call(RemoteBatch *batch, ClaimedMessage *m, TimestampTz deadline)
{
	OutboxError failure;
	bool		ok = true;

	MemoryContextReset(batch->message_cxt);
	MemoryContextSwitchTo(batch->message_cxt);
	batch->current = m;
	if (batch->http)
	{
		char	   *envelope = EnvelopeText(&m->id, m->event_type,
											m->created_at, m->payload,
											OUTBOX_REMOTE_MAX_BYTES, &failure);

		if (envelope == NULL)
			ok = false;
		else
			batch->call = BatchCallHttp(batch->url, batch->ca_file,
										batch->secrets, &m->id, envelope,
										deadline);
	}
	else if (!OidIsValid(batch->role))
	{
		failure = batch->no_creator;
		ok = false;
	}
	else
	{
		/* refused by its sizes before it is built: see EnvelopeText */
		char	   *envelope = EnvelopeText(&m->id, m->event_type,
											m->created_at, m->payload,
											OUTBOX_REMOTE_MAX_BYTES, &failure);

		if (envelope == NULL)
			ok = false;
		else
		{
			batch->call = palloc0(sizeof(BatchCall));
			batch->call->remote = RemoteCallStart(batch->server, batch->role,
												  batch->needs_password,
												  batch->command, envelope,
												  batch->topic, deadline);
		}
	}
	MemoryContextSwitchTo(batch->cxt);

	if (!ok)
	{
		obx_failed(batch, OutboxErrorText(&failure));
		return NULL;
	}
	if (BatchCallPending(batch->call))
		return batch->call;
	obx_call_ended(batch);
	return NULL;
}

/*
 * Note the outcome of the call that ended: the message is done or failed,
 * and the breaker counts it.
 */
static void
obx_call_ended(RemoteBatch *batch)
{
	const OutboxError *error;
	RemoteOutcome outcome;

	if (batch->http)
	{
		obx_http_ended(batch);
		return;
	}
	outcome = RemoteCallOutcome(batch->call->remote, &error);
	Assert(outcome != REMOTE_PENDING);
	if (outcome == REMOTE_DELIVERED)
	{
		batch->done = lappend(batch->done, &batch->current->id);
		obx_breaker_count(batch, false, NULL);
	}
	else
	{
		char	   *text = OutboxErrorText(error);

		obx_failed(batch, text);
		obx_breaker_count(batch, outcome == REMOTE_UNREACHABLE, text);
	}
	batch->call = NULL;
	batch->current = NULL;
}

/*
 * Note the outcome of an HTTP call that ended, by the answer's status: 2xx
 * delivered; 410 stops the route, the message released untried; 3xx, 408,
 * 429 and 5xx fail with the backoff, or at the time Retry-After says;
 * another 4xx makes the message dead; no answer fails it and counts
 * against the route's breaker, as an unreachable remote server does.  Any
 * answer at all ends the breaker's count.
 */
static void
obx_http_ended(RemoteBatch *batch)
{
	const OutboxError *error;
	HttpCallReport report;
	HttpOutcome outcome = HttpCallOutcome(batch->call->http, &error, &report);
	int			class = report.status / 100;
	char	   *text;

	Assert(outcome != HTTP_PENDING);
	batch->counts.calls[class >= 2 && class <= 5 ? class : 0]++;
	batch->counts.latency_seconds += report.latency_ms / 1000.0;
	batch->counts.last_status = report.status;
	batch->counts.last_latency_ms = report.latency_ms;
	batch->counts.last_call_at = GetCurrentTimestamp();

	switch (outcome)
	{
		case HTTP_DELIVERED:
			batch->done = lappend(batch->done, &batch->current->id);
			obx_breaker_count(batch, false, NULL);
			break;
		case HTTP_GONE:
			text = OutboxErrorText(error);
			batch->late = lappend(batch->late, &batch->current->id);
			batch->paused_until = DT_NOEND;
			batch->last_failure = text;
			batch->breaker_changed = true;
			ereport(LOG,
					(errmsg("outbox stops the HTTP route of topic \"%s\": %s",
							batch->topic, text),
					 errhint("Set the route again with outbox.route_http to resume it.")));
			break;
		case HTTP_RETRY:
		case HTTP_REJECTED:
		case HTTP_UNREACHABLE:
		case HTTP_PENDING:
			text = OutboxErrorText(error);
			obx_failed(batch, text);
			((BatchFailure *) llast(batch->failures))->retry_at = report.retry_after;
			((BatchFailure *) llast(batch->failures))->dead = (outcome == HTTP_REJECTED);
			obx_breaker_count(batch, outcome == HTTP_UNREACHABLE, text);
			break;
	}
	batch->call = NULL;
	batch->current = NULL;
}

/* The current message failed with error (kept in the batch's context). */
static void
obx_failed(RemoteBatch *batch, char *error)
{
	BatchFailure *f = palloc0(sizeof(BatchFailure));

	f->id = &batch->current->id;
	f->error = error;
	batch->failures = lappend(batch->failures, f);
}

/*
 * Count a call's outcome in the route's breaker: one more unreachable call
 * in a row, pausing the route at outbox.remote_pause_after of them, or the
 * end of the count.
 */
static void
obx_breaker_count(RemoteBatch *batch, bool unreachable, const char *error)
{
	int			pauses;

	if (!unreachable)
	{
		if (batch->consecutive_failures > 0 || batch->paused_until != DT_NOBEGIN)
			batch->breaker_changed = true;
		batch->consecutive_failures = 0;
		batch->paused_until = DT_NOBEGIN;
		return;
	}

	batch->breaker_changed = true;
	batch->consecutive_failures++;
	batch->last_failure = pstrdup(error);
	pauses = batch->consecutive_failures - outbox_remote_pause_after + 1;
	if (pauses > 0)
		batch->paused_until = GetCurrentTimestamp() +
			BackoffDelaySeconds(pauses, outbox_backoff_seconds,
								outbox_backoff_max_seconds) * USECS_PER_SEC;
}
