/*-------------------------------------------------------------------------
 *
 * outbox_drain.c
 *		The one delivery path, used by drain_once and by the background
 *		worker: claim a batch of a routed topic, deliver it in order, and
 *		record each outcome.
 *
 * A NOTIFY route is transactional: the notification leaves when the
 * transaction commits.  So a batch is claimed and marked delivered by one
 * statement, one write per message, and the notifications are queued in the
 * same transaction; nothing is sent unless that transaction commits.
 *
 * A remote route is not: the remote command commits on its own.  A batch is
 * claimed (leased), each message is delivered in order with a deadline of
 * its own, and the outcomes are recorded; a route whose server keeps
 * timing out is paused by its circuit breaker (outbox_drain_remote.c).
 *
 * Nothing in delivery raises an error for bad data or a failing server:
 * an envelope that cannot be made (its timestamp, its size as jsonb or as
 * text, all judged before it is built), a broken channel or server becomes
 * the failure of that message, and the others go on.  Errors that do
 * escape come from around delivery: a user trigger on outbox.message, a
 * full NOTIFY queue at commit, a TOAST value removed under a batch, a
 * cancel or a timeout.  drain_once lets them abort its caller's
 * transaction.  In the worker each step on a route runs in a transaction
 * of its own and an error ends that step only (obx_route_step): it is
 * recorded on the message that caused it, found one message at a time,
 * or else on the route, which pauses; the other topics go on and the
 * process stays.  A batch holds its payloads as stored; each message's
 * envelope is made in turn, detoasting its payload only if it may be sent
 * whole.
 *
 * drain_once runs all of this inside its caller's transaction, one batch of
 * outbox.batch_size per topic, waiting for each remote call in turn.
 *
 * The worker's round never waits for a remote server.  It commits each
 * NOTIFY batch, of the size the topic's pace sets (outbox_drain_pace.c):
 * doubled while the topic fills whole batches, up to NOTIFY_BATCH_MAX, and
 * shrunk for a while after a short one.  For a remote route it claims a
 * batch, commits, and leaves the batch in flight (outbox_drain_wait.c):
 * the worker's wait between rounds serves the calls of every route in
 * flight together with its latch, so that a commit wakes it for the next
 * round however long a remote server takes, and no route waits for
 * another.  The claim commits before
 * anything is sent: if the worker dies while delivering, the leases it
 * took expire and the messages are claimed again with one more attempt, so
 * a message that kills the worker ends dead instead of killing it forever.
 * A remote route whose batch is in flight is left alone by the rounds
 * until the batch is through.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_backoff.h"
#include "outbox_delivery.h"
#include "outbox_drain_int.h"
#include "outbox_envelope.h"
#include "outbox_error.h"
#include "outbox_subs.h"

PG_FUNCTION_INFO_V1(outbox_drain_once);

/* Random bytes in a lease owner name, written in hex */
#define OUTBOX_OWNER_TOKEN_BYTES	16

/* How long a round of the worker goes on while messages remain */
#define ROUND_MAX_MS		100

/* What a step of the worker's round on a route leaves */
typedef enum StepResult
{
	STEP_DONE,					/* nothing more now */
	STEP_MORE,					/* a NOTIFY route has more now */
	STEP_LOCKED					/* the tables are locked or gone */
} StepResult;

static const char *obx_lease_owner(const char *kind);
static void obx_init_state(DrainState *st, Oid role, const char *owner);
static RemoteBatch *obx_remote_claim(DrainState *st, OutboxRoute *route,
									 MemoryContext cxt);
static void obx_remote_batch(DrainState *st, OutboxRoute *route);
static void obx_remote_launch(DrainState *st, OutboxRoute *route);
static void obx_route_failed(OutboxRoute *route, const char *error,
							 MemoryContext cxt);
static void obx_route_recovered(OutboxRoute *route, MemoryContext cxt);
static bool obx_notify_poison(DrainState *st, OutboxRoute *route,
							  const char *error, MemoryContext cxt);
static StepResult obx_route_step(DrainState *st, OutboxRoute *route,
								 TopicPace *pace, MemoryContext cxt);

/*
 * The lease owner of this process's deliveries: what it is, its pid (for
 * the operator reading outbox.message) and a random token made once per
 * process.  The pid alone is public (pg_stat_activity), and a role granted
 * complete, fail or extend could then act on the worker's leases; with the
 * token nobody can name them, so nobody can complete, fail or extend them
 * or hold their rows locked against the worker.
 */
static const char *
obx_lease_owner(const char *kind)
{
	static char token[2 * OUTBOX_OWNER_TOKEN_BYTES + 1] = "";
	uint8		bytes[OUTBOX_OWNER_TOKEN_BYTES];

	if (token[0] == '\0')
	{
		if (!pg_strong_random(bytes, sizeof(bytes)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random lease owner token")));
		hex_encode((const char *) bytes, sizeof(bytes), token);
		token[2 * OUTBOX_OWNER_TOKEN_BYTES] = '\0';
	}
	return psprintf("%s %d %s", kind, MyProcPid, token);
}

/* Prepare a drain as role with lease owner name owner. */
static void
obx_init_state(DrainState *st, Oid role, const char *owner)
{
	st->role = role;
	st->owner = cstring_to_text(owner);
	st->batch_size = outbox_batch_size;
	st->lease_seconds = outbox_lease_seconds;
	st->delivered = 0;
	st->failed = 0;
	st->claimed = 0;
}

/*
 * Claim (lease) a batch of a remote route, in a memory context under cxt,
 * unless its breaker has paused it: a full batch, or one message to probe
 * the route after a pause.  NULL when there is nothing to deliver.
 */
static RemoteBatch *
obx_remote_claim(DrainState *st, OutboxRoute *route, MemoryContext cxt)
{
	ClaimRequest req;

	if (RemoteRoutePaused(route, GetCurrentTimestamp()))
		return NULL;
	if (route->subscription == NULL &&
		SubsDefaultHeld(cstring_to_text(route->topic), GetCurrentTimestamp(), NULL))
		return NULL;			/* a paused default subscription */
	DrainClaimRequest(st, route, RemoteRouteBatchSize(route, st->batch_size),
					  &req);
	return RemoteBatchClaim(&req, route, cxt);
}

/*
 * drain_once's batch of a remote route: claim it, deliver it in order,
 * waiting for each call, and record the outcomes.
 */
static void
obx_remote_batch(DrainState *st, OutboxRoute *route)
{
	RemoteBatch *batch = obx_remote_claim(st, route, CurrentMemoryContext);
	BatchCall  *call;

	if (batch == NULL)
		return;
	while ((call = RemoteBatchNext(batch)) != NULL)
		BatchCallWait(call);
	RemoteBatchFinish(batch, &st->delivered, &st->failed);
}

/*
 * outbox.drain_once(topic) returns integer
 *
 * One round of delivery in the caller's transaction: a batch of the topic,
 * or of each routed topic when NULL.  A remote route is delivered with its
 * creator's user mapping, whoever calls; the outbox tables are used as
 * their owner.
 */
Datum
outbox_drain_once(PG_FUNCTION_ARGS)
{
	Oid			caller = GetUserId();
	text	   *topic = PG_ARGISNULL(0) ? NULL :
		CheckName(PG_GETARG_DATUM(0), false, "topic");
	DrainState	st;
	SavedIdentity save;
	List	   *routes;
	ListCell   *lc;
	obx_init_state(&st, caller, obx_lease_owner("drain_once"));

	IdentityBecomeExtensionOwner(&save);
	routes = StoreRouteList(topic);
	foreach(lc, routes)
	{
		OutboxRoute *route = (OutboxRoute *) lfirst(lc);

		if (ROUTE_BY_CALLS(route))
			obx_remote_batch(&st, route);
		else
			DrainNotifyBatch(&st, route, st.batch_size);
	}
	IdentityRestore(&save);

	PG_RETURN_INT32((int32) st.delivered);
}

/*
 * Launch a batch of a remote route: claim it, and leave it in flight
 * (outbox_drain_wait.c), where its calls start once this claim has
 * committed.
 */
static void
obx_remote_launch(DrainState *st, OutboxRoute *route)
{
	RemoteBatch *batch = obx_remote_claim(st, route, DrainFlightContext());

	if (batch != NULL)
		DrainFly(batch);
}

/*
 * Record an error that a step of the route raised on the route itself:
 * its last_failure and one more failure in a row, and a pause of the
 * topic that doubles with each (outbox.backoff_seconds up to
 * outbox.backoff_max_seconds), in a transaction of its own.  The copy of
 * the route the round holds pauses at once.  If even that fails, the
 * pause holds in this round only, and the log has both errors.
 */
static void
obx_route_failed(OutboxRoute *route, const char *error, MemoryContext cxt)
{
	TimestampTz now = GetCurrentTimestamp();
	int			failures = route->consecutive_failures + 1;

	route->consecutive_failures = failures;
	route->paused_until = now +
		BackoffDelaySeconds(failures, outbox_backoff_seconds,
							outbox_backoff_max_seconds) * USECS_PER_SEC;
	ereport(LOG,
			(errmsg("krizaka_outbox worker pauses the route of topic \"%s\" until %s",
					route->topic, timestamptz_to_str(route->paused_until)),
			 errdetail("The route failed %d time(s) in a row, last with: %s",
					   failures, error)));

	PG_TRY();
	{
		SavedIdentity save;

		if (DrainBeginLocked("recording a failure", cxt))
		{
			IdentityBecomeExtensionOwner(&save);
			StoreRouteSetBreaker(route->topic, route->subscription,
								 route->created_at, failures,
								 route->paused_until,
								 ClipErrorText(error, strlen(error)));
			IdentityRestore(&save);
			DrainCommit();
		}
	}
	PG_CATCH();
	{
		bool		at_commit;

		(void) DrainCatch(cxt, &at_commit);
	}
	PG_END_TRY();
}

/*
 * A NOTIFY route whose batch of one failed with error: the message at the
 * head of its topic is the one.  Its claim rolled back with the error, so
 * in a transaction of its own it is claimed again (the attempt counts) and
 * failed with that error: it backs off, and ends dead at
 * outbox.max_attempts.  Returns false when that failed too, or found no
 * message to fail (the error is then the route's).
 */
static bool
obx_notify_poison(DrainState *st, OutboxRoute *route, const char *error,
				  MemoryContext cxt)
{
	volatile bool done = false;

	PG_TRY();
	{
		SavedIdentity save;
		ClaimRequest req;
		List	   *messages = NIL;
		ListCell   *lc;
		bool		found = false;

		if (DrainBeginLocked("recording a failure", cxt))
		{
			IdentityBecomeExtensionOwner(&save);
			DrainClaimRequest(st, route, 1, &req);
			(void) DrainRouteClaim(&req, route, &messages);
			foreach(lc, messages)
			{
				ClaimedMessage *m = (ClaimedMessage *) lfirst(lc);

				if (DrainRouteFail(st, route, &m->id, error, GetCurrentTimestamp()))
				{
					st->failed++;
					found = true;
				}
			}
			IdentityRestore(&save);
			DrainCommit();
			done = found;
		}
	}
	PG_CATCH();
	{
		bool		at_commit;

		(void) DrainCatch(cxt, &at_commit);
	}
	PG_END_TRY();
	return done;
}

/*
 * One step of the worker's round on a route, in a transaction of its own:
 * a NOTIFY batch of the topic's pace, or the launch of a remote batch.  An
 * error in it is contained (outbox_drain_xact.c) and recorded: a NOTIFY
 * batch that failed in its statements is retried one message at a time,
 * and a batch of one that fails fails its message, with the error as its
 * last_error (the claim that counted its attempt rolled back with the
 * error); any other error (of the commit, such as a full NOTIFY queue; of
 * a remote claim; a cancel, a timeout, a lock) pauses the route.  Says
 * whether the route has more to deliver now (a NOTIFY route that found
 * messages, or is looking for the one that failed), or the tables were
 * locked or gone.
 */
static StepResult
obx_route_step(DrainState *st, OutboxRoute *route, TopicPace *pace,
			   MemoryContext cxt)
{
	volatile bool locked = true;
	ErrorData  *edata = NULL;
	bool		at_commit = false;

	st->claimed = 0;
	PG_TRY();
	{
		SavedIdentity save;

		if (!DrainBeginLocked(ROUTE_BY_CALLS(route) ? "claiming" : "delivering to a channel",
							  cxt))
			locked = false;
		else
		{
			IdentityBecomeExtensionOwner(&save);
			if (ROUTE_BY_CALLS(route))
				obx_remote_launch(st, route);
			else
				DrainNotifyBatch(st, route, pace->size);
			IdentityRestore(&save);
			DrainCommit();
		}
	}
	PG_CATCH();
	{
		edata = DrainCatch(cxt, &at_commit);
	}
	PG_END_TRY();

	if (edata == NULL)
	{
		if (!locked)
			return STEP_LOCKED;
		if (ROUTE_BY_CALLS(route))
			return STEP_DONE;
		DrainPace(pace, st->claimed, st->batch_size);
		if (st->claimed == 0)
			return STEP_DONE;
		/* a NOTIFY route that delivers again ends its pause */
		if (route->consecutive_failures > 0)
			obx_route_recovered(route, cxt);

		/*
		 * Another batch while this one found messages: a short one may
		 * still leave messages due, the next of an ordering key whose head
		 * it delivered.
		 */
		return STEP_MORE;
	}

	if (!ROUTE_BY_CALLS(route) && !at_commit && DrainErrorIsMessages(edata))
	{
		char	   *error = DrainErrorText(edata);

		/* which message: one at a time from the head of the topic */
		if (pace->size > 1)
		{
			pace->size = 1;
			return STEP_MORE;
		}
		if (obx_notify_poison(st, route, error, cxt))
			return STEP_MORE;	/* the next one may be fine */
	}
	obx_route_failed(route, DrainErrorText(edata), cxt);
	return STEP_DONE;
}

/*
 * A NOTIFY route delivered again after failures of its own: its count and
 * pause end, in a transaction of its own.  An error here is only logged
 * (the next delivery tries again).
 */
static void
obx_route_recovered(OutboxRoute *route, MemoryContext cxt)
{
	route->consecutive_failures = 0;
	route->paused_until = DT_NOBEGIN;
	PG_TRY();
	{
		SavedIdentity save;

		if (DrainBeginLocked("recording a recovery", cxt))
		{
			IdentityBecomeExtensionOwner(&save);
			StoreRouteSetBreaker(route->topic, route->subscription,
								 route->created_at, 0,
								 DT_NOBEGIN, NULL);
			IdentityRestore(&save);
			DrainCommit();
		}
	}
	PG_CATCH();
	{
		bool		at_commit;

		(void) DrainCatch(cxt, &at_commit);
	}
	PG_END_TRY();
}

/*
 * One round of the background worker over every routed topic of this
 * database, read afresh: NOTIFY batches are taken from each topic in turn
 * while some topic still has messages, and a batch of each remote route is
 * launched unless one is in flight or its route is paused; a NOTIFY route
 * paused by errors of its own is left alone too.  A round ends after
 * ROUND_MAX_MS even if messages remain, so that the wait between rounds
 * serves the remote calls in flight, a reload and the interrupts, and the
 * next round sees routes made or dropped meanwhile; it then says that
 * something is due at once.  Called outside a transaction; each step
 * commits in a transaction of its own, and an error in one is recorded
 * and ends that step only (obx_route_step).  Returns false when the round
 * could not run (the extension's tables are missing or locked); otherwise
 * sets *next_wake to when something next becomes due (DT_NOEND: nothing
 * pending), and *delivered and *failed to the outcomes recorded since the
 * last round.
 */
bool
DrainDatabaseRound(Oid delivering_role, TimestampTz *next_wake,
				   int64 *delivered, int64 *failed)
{
	MemoryContext round_cxt;
	MemoryContext batch_cxt;
	MemoryContext old;
	DrainState	st;
	SavedIdentity save;
	List	   *volatile routes = NIL;
	ListCell   *lc;
	TopicPace  *paces;			/* the next NOTIFY batch of each route */
	bool		more;			/* a NOTIFY route has more now */
	bool		first = true;	/* the first pass over the routes */
	volatile bool ran = false;
	TimestampTz start = GetCurrentTimestamp();

	*next_wake = DT_NOEND;
	*delivered = 0;
	*failed = 0;
	round_cxt = AllocSetContextCreate(CurrentMemoryContext, "outbox drain round",
									  ALLOCSET_DEFAULT_SIZES);
	batch_cxt = AllocSetContextCreate(round_cxt, "outbox drain batch",
									  ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(round_cxt);

	memset(&st, 0, sizeof(st));

	PG_TRY();
	{
		if (DrainBeginLocked("loading routes", round_cxt))
		{
			obx_init_state(&st, delivering_role,
						   obx_lease_owner("krizaka_outbox worker"));	/* reads the catalogs */
			IdentityBecomeExtensionOwner(&save);
			routes = StoreRouteList(NULL);
			IdentityRestore(&save);
			DrainCommit();
			ran = true;
		}
	}
	PG_CATCH();
	{
		bool		at_commit;

		(void) DrainCatch(round_cxt, &at_commit);
	}
	PG_END_TRY();
	if (!ran)
		goto done;
	ran = false;

	paces = DrainPacesFor(routes, st.batch_size);

	do
	{
		more = false;
		foreach(lc, routes)
		{
			OutboxRoute *route = (OutboxRoute *) lfirst(lc);
			TopicPace  *pace = &paces[foreach_current_index(lc)];

			CHECK_FOR_INTERRUPTS();

			/* a remote route: once a round, and not while a batch flies */
			if (ROUTE_BY_CALLS(route) && (!first || DrainFlying(route)))
				continue;
			/* paused by its breaker, or by errors of its own */
			if (RemoteRoutePaused(route, GetCurrentTimestamp()))
				continue;

			MemoryContextReset(batch_cxt);
			switch (obx_route_step(&st, route, pace, batch_cxt))
			{
				case STEP_LOCKED:
					goto done;
				case STEP_MORE:
					more = true;
					break;
				case STEP_DONE:
					break;
			}
		}
		first = false;

		/* bounded: the rest waits for the next round, which comes at once */
		if (more && GetCurrentTimestamp() >= TimestampTzPlusMilliseconds(start, ROUND_MAX_MS))
		{
			*next_wake = GetCurrentTimestamp();
			ran = true;
			goto done;
		}
	} while (more);

	/* when to look again; a route in flight says so when its batch ends */
	PG_TRY();
	{
		if (DrainBeginLocked("computing next due time", round_cxt))
		{
			TimestampTz now = GetCurrentTimestamp();

			IdentityBecomeExtensionOwner(&save);
			foreach(lc, routes)
			{
				OutboxRoute *route = (OutboxRoute *) lfirst(lc);
				TimestampTz next;

				if (ROUTE_BY_CALLS(route) && DrainFlying(route))
					continue;
				next = DrainNextDue(route, now);
				if (next < *next_wake)
					*next_wake = next;
			}
			IdentityRestore(&save);
			DrainCommit();
			ran = true;
		}
	}
	PG_CATCH();
	{
		bool		at_commit;

		(void) DrainCatch(round_cxt, &at_commit);
	}
	PG_END_TRY();

done:
	pgstat_report_activity(STATE_IDLE, NULL);
	DrainFlightCounts(&st.delivered, &st.failed);
	*delivered = st.delivered;
	*failed = st.failed;

	MemoryContextSwitchTo(old);
	MemoryContextDelete(round_cxt);
	return ran;
}
