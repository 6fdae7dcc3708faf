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
 * the failure of that message, and the others go on.  So no subtransaction
 * is needed.  Errors that do escape (an interrupt, memory exhaustion)
 * abort the whole batch.  A batch holds its payloads as stored; each
 * message's envelope is made in turn, detoasting its payload only if it
 * may be sent whole.
 *
 * drain_once runs all of this inside its caller's transaction, one batch of
 * outbox.batch_size per topic, waiting for each remote call in turn.
 *
 * The worker's round never waits for a remote server.  It commits each
 * NOTIFY batch, and while a topic fills whole batches it doubles that
 * topic's next one, up to NOTIFY_BATCH_MAX: the claim reads the head of the
 * topic's index once per batch, and under a backlog (all the more with
 * dead index entries that a long-running snapshot keeps from being
 * removed) larger batches spread that read and the commit over more
 * messages.  For a remote route it claims a batch, commits, and leaves the
 * batch in flight (outbox_drain_wait.c): the worker's wait between rounds
 * serves the calls of every route in flight together with its latch, so
 * that a commit wakes it for the next round however long a remote server
 * takes, and no route waits for another.  The claim commits before
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
#include "outbox_delivery.h"
#include "outbox_drain_int.h"
#include "outbox_envelope.h"
#include "outbox_error.h"

PG_FUNCTION_INFO_V1(outbox_drain_once);

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

/* Random bytes in a lease owner name, written in hex */
#define OUTBOX_OWNER_TOKEN_BYTES	16

/* The largest NOTIFY batch of the worker under a backlog */
#define NOTIFY_BATCH_MAX	1000

static const char *obx_lease_owner(const char *kind);
static void obx_init_state(DrainState *st, Oid role, const char *owner);
static void obx_claim_request(DrainState *st, OutboxRoute *route, int size,
							  ClaimRequest *req);
static void obx_notify_batch(DrainState *st, OutboxRoute *route, int size);
static RemoteBatch *obx_remote_claim(DrainState *st, OutboxRoute *route,
									 MemoryContext cxt);
static void obx_remote_batch(DrainState *st, OutboxRoute *route);
static void obx_remote_launch(DrainState *st, OutboxRoute *route);
static TimestampTz obx_next_due(OutboxRoute *route, TimestampTz now);

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

/* A claim of one batch of size messages of the route's topic, as of now. */
static void
obx_claim_request(DrainState *st, OutboxRoute *route, int size,
				  ClaimRequest *req)
{
	req->owner = st->owner;
	req->topic = cstring_to_text(route->topic);
	req->batch_size = size;
	req->lease_seconds = st->lease_seconds;
	req->max_attempts = outbox_max_attempts;
	req->now = GetCurrentTimestamp();
}

/*
 * One batch of at most size messages of a NOTIFY route: claimed and marked
 * delivered by one statement, then each notification queued for this
 * transaction's commit.  A message that cannot be sent is taken back and
 * failed.
 */
static void
obx_notify_batch(DrainState *st, OutboxRoute *route, int size)
{
	ClaimRequest req;
	List	   *messages = NIL;
	ListCell   *lc;
	int			claimed;

	obx_claim_request(st, route, size, &req);
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
	obx_claim_request(st, route, RemoteRouteBatchSize(route, st->batch_size),
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
	RemoteCall *call;

	if (batch == NULL)
		return;
	while ((call = RemoteBatchNext(batch)) != NULL)
		RemoteCallWait(call);
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

		if (route->remote)
			obx_remote_batch(&st, route);
		else
			obx_notify_batch(&st, route, st.batch_size);
	}
	IdentityRestore(&save);

	PG_RETURN_INT32((int32) st.delivered);
}

/* Start a transaction of the worker's round, with a snapshot. */
static void
obx_begin(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

/*
 * Start a transaction of the worker and take the tables' locks without
 * waiting, in memory context cxt; on false the transaction is already over
 * (the tables are gone or locked, and the caller gives up for now).
 */
bool
DrainBeginLocked(const char *activity, MemoryContext cxt)
{
	obx_begin(activity);
	MemoryContextSwitchTo(cxt);
	if (IdentityTryLockTables())
		return true;
	DrainCommit();
	return false;
}

/* Commit a transaction of the worker. */
void
DrainCommit(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
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
 * When something of the route next becomes due: a message, but not while
 * its breaker has the route paused.  DT_NOEND: nothing pending.
 */
static TimestampTz
obx_next_due(OutboxRoute *route, TimestampTz now)
{
	TimestampTz next = StoreNextDue(cstring_to_text(route->topic), now);

	if (route->remote && next != DT_NOEND && RemoteRoutePaused(route, now))
		next = Max(next, route->paused_until);
	return next;
}

/*
 * One round of the background worker over every routed topic of this
 * database: NOTIFY batches are taken from each topic in turn while some
 * topic still fills whole batches, and a batch of each remote route is
 * launched unless one is in flight.  Called outside a transaction; each
 * batch commits in a transaction of its own.  Returns false when the round
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
	List	   *routes;
	ListCell   *lc;
	int		   *sizes;			/* the next NOTIFY batch of each route */
	bool		more;			/* a NOTIFY route filled its batch */
	bool		first = true;	/* the first pass over the routes */
	bool		ran = false;

	*next_wake = DT_NOEND;
	*delivered = 0;
	*failed = 0;
	round_cxt = AllocSetContextCreate(CurrentMemoryContext, "outbox drain round",
									  ALLOCSET_DEFAULT_SIZES);
	batch_cxt = AllocSetContextCreate(round_cxt, "outbox drain batch",
									  ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(round_cxt);

	memset(&st, 0, sizeof(st));

	if (!DrainBeginLocked("loading routes", round_cxt))
		goto done;
	obx_init_state(&st, delivering_role,
				   obx_lease_owner("krizaka_outbox worker"));	/* reads the catalogs */
	IdentityBecomeExtensionOwner(&save);
	routes = StoreRouteList(NULL);
	IdentityRestore(&save);
	DrainCommit();
	/* the commit left TopMemoryContext current: say where the sizes live */
	sizes = MemoryContextAlloc(round_cxt, sizeof(int) * Max(list_length(routes), 1));
	for (int i = 0; i < list_length(routes); i++)
		sizes[i] = st.batch_size;

	do
	{
		more = false;
		foreach(lc, routes)
		{
			OutboxRoute *route = (OutboxRoute *) lfirst(lc);
			int		   *size = &sizes[foreach_current_index(lc)];

			CHECK_FOR_INTERRUPTS();

			/* a remote route: once a round, and not while a batch flies */
			if (route->remote && (!first || DrainFlying(route->topic)))
				continue;

			MemoryContextReset(batch_cxt);
			if (!DrainBeginLocked(route->remote ? "claiming" : "delivering to a channel",
								  batch_cxt))
				goto done;
			IdentityBecomeExtensionOwner(&save);
			if (route->remote)
				obx_remote_launch(&st, route);
			else
				obx_notify_batch(&st, route, *size);
			IdentityRestore(&save);
			DrainCommit();

			/*
			 * Another batch while this one found messages: a full one
			 * doubles the size; a short one may still leave messages due,
			 * the next of an ordering key whose head it delivered.
			 */
			if (!route->remote && st.claimed > 0)
			{
				more = true;
				if (st.claimed >= *size)
					*size = Min(*size * 2, Max(NOTIFY_BATCH_MAX, st.batch_size));
			}
		}
		first = false;
	} while (more);

	/* when to look again; a route in flight says so when its batch ends */
	if (DrainBeginLocked("computing next due time", round_cxt))
	{
		TimestampTz now = GetCurrentTimestamp();

		IdentityBecomeExtensionOwner(&save);
		foreach(lc, routes)
		{
			OutboxRoute *route = (OutboxRoute *) lfirst(lc);
			TimestampTz next;

			if (route->remote && DrainFlying(route->topic))
				continue;
			next = obx_next_due(route, now);
			if (next < *next_wake)
				*next_wake = next;
		}
		IdentityRestore(&save);
		DrainCommit();
		ran = true;
	}

done:
	pgstat_report_activity(STATE_IDLE, NULL);
	DrainFlightCounts(&st.delivered, &st.failed);
	*delivered = st.delivered;
	*failed = st.failed;

	MemoryContextSwitchTo(old);
	MemoryContextDelete(round_cxt);
	return ran;
}
