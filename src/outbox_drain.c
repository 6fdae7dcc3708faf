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
 * claimed (leased), each message is delivered in order, and the outcomes
 * are recorded: the failures with outbox.fail and the text of their error,
 * the successes completed together at the end of the batch.  A remote call
 * has until the earlier of half a lease from its start and one second
 * before the lease ends; messages whose turn comes too late are released
 * (their attempt does not count) for the next round.
 *
 * Nothing in delivery raises an error for bad data or a failing server:
 * the envelope's timestamp is checked first, a broken channel or server
 * becomes the failure of the message, and the others go on.  So no
 * subtransaction is needed.  Errors that do escape (an interrupt, memory
 * exhaustion) abort the whole batch.
 *
 * drain_once runs all of this inside its caller's transaction, one batch of
 * outbox.batch_size per topic.  The worker commits each NOTIFY batch, and
 * while a topic fills whole batches it doubles that topic's next one, up to
 * NOTIFY_BATCH_MAX: the claim reads the head of the topic's index once per
 * batch, and under a backlog (all the more with dead index entries that a
 * long-running snapshot keeps from being removed) larger batches spread
 * that read and the commit over more messages.  For a remote route the
 * worker commits the claim first, in a transaction of its own, and then
 * delivers in a second one: if the worker dies while delivering, the
 * leases it took expire and the messages are claimed again with one more
 * attempt, so a message that kills the worker ends dead instead of killing
 * it forever.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
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

/* A remote call stops this long before the lease ends */
#define LEASE_MARGIN_US		USECS_PER_SEC

/* The largest NOTIFY batch of the worker under a backlog */
#define NOTIFY_BATCH_MAX	1000

static const char *obx_lease_owner(const char *kind);
static void obx_init_state(DrainState *st, Oid role, const char *owner);
static void obx_claim_request(DrainState *st, OutboxRoute *route, int size,
							  ClaimRequest *req);
static void obx_notify_batch(DrainState *st, OutboxRoute *route, int size);
static int	obx_claim(DrainState *st, OutboxRoute *route, List **messages);
static void obx_deliver_batch(DrainState *st, OutboxRoute *route, List *messages);
static Oid	obx_route_creator(OutboxRoute *route, OutboxError *error);
static Datum obx_uuid_array(List *ids);
static void obx_commit(void);

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

/* Claim (lease) a batch of the route's topic; the messages go onto *messages. */
static int
obx_claim(DrainState *st, OutboxRoute *route, List **messages)
{
	ClaimRequest req;

	obx_claim_request(st, route, st->batch_size, &req);
	st->claimed = StoreClaimMessages(&req, messages);
	return st->claimed;
}

/*
 * The role whose credentials deliver a remote route: the role that made it.
 * Its user mapping gives the credentials and its USAGE on the server is
 * checked again at each delivery (RemoteResolve), so revoking that USAGE or
 * dropping that mapping stops the route; whoever delivers (the worker's
 * role, the caller of drain_once) lends nothing of its own.  Returns
 * InvalidOid, with the condition in *error, if the role is gone (dropped or
 * renamed since).
 */
static Oid
obx_route_creator(OutboxRoute *route, OutboxError *error)
{
	Oid			creator = get_role_oid(route->created_by, true);

	if (!OidIsValid(creator))
	{
		OutboxErrorSet(error, ERRCODE_UNDEFINED_OBJECT,
					   "role \"%s\" that made the route of topic \"%s\" does not exist",
					   route->created_by, route->topic);
		OutboxErrorHint(error, "Make the route again with outbox.route_remote.");
	}
	return creator;
}

/* A uuid[] datum of the ids in the list (of pg_uuid_t pointers). */
static Datum
obx_uuid_array(List *ids)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(ids), 1));
	ListCell   *lc;
	int			n = 0;

	foreach(lc, ids)
		elems[n++] = UUIDPGetDatum((pg_uuid_t *) lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, UUIDOID, UUID_LEN, false,
										   TYPALIGN_CHAR));
}

/*
 * Deliver a claimed batch of a remote route in order and record each
 * outcome: fail each failure with its error, release what came too late,
 * complete the rest.
 */
static void
obx_deliver_batch(DrainState *st, OutboxRoute *route, List *messages)
{
	List	   *done = NIL;
	List	   *late = NIL;
	ListCell   *lc;
	int64		lease_us = (int64) st->lease_seconds * USECS_PER_SEC;
	OutboxError no_creator;
	Oid			creator = obx_route_creator(route, &no_creator);

	/*
	 * A route made by an ordinary role must not borrow the remote server's
	 * own identity (trust or peer authentication): its connection must
	 * authenticate with a password, the rule of dblink and postgres_fdw.
	 */
	bool		needs_password = !OidIsValid(creator) || !superuser_arg(creator);

	/*
	 * A remote server keeps what it is sent, so nothing may leave before
	 * the transactions that appended it are safe on disk: a producer that
	 * commits with synchronous_commit = off may not be yet, and a crash
	 * would leave the remote side with an event for work that never
	 * happened.  Their commit records precede this point of the WAL.  (The
	 * worker has flushed past them already, by committing its claim;
	 * drain_once has not.  A NOTIFY route needs none of this: the
	 * notification leaves after the commit of the claim, whose flush covers
	 * them, unless that session itself commits asynchronously.)
	 */
	XLogFlush(GetXLogInsertRecPtr());

	foreach(lc, messages)
	{
		ClaimedMessage *m = (ClaimedMessage *) lfirst(lc);
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz deadline = Min(now + lease_us / 2,
								   m->leased_until - LEASE_MARGIN_US);
		OutboxError failure;
		char	   *error = NULL;
		bool		ok;

		CHECK_FOR_INTERRUPTS();

		if (deadline <= now)
		{
			late = lappend(late, &m->id);
			continue;
		}

		if (!OidIsValid(creator))
		{
			failure = no_creator;
			ok = false;
		}
		else if (!EnvelopeCheckTimestamp(m->created_at, &failure))
			ok = false;
		else
		{
			Jsonb	   *env = BuildEnvelope(&m->id, m->event_type,
											m->created_at, m->payload);

			ok = RemoteDeliver(route->server, creator, needs_password,
							   route->command,
							   JsonbToCString(NULL, &env->root, VARSIZE(env)),
							   route->topic, deadline, &failure);
		}
		if (!ok)
			error = OutboxErrorText(&failure);

		if (ok)
			done = lappend(done, &m->id);
		else if (StoreFail(&m->id, st->owner, ClipErrorText(error, strlen(error)),
						   GetCurrentTimestamp()))
			st->failed++;
	}

	if (done != NIL)
		st->delivered += StoreCompleteMany(DatumGetArrayTypeP(obx_uuid_array(done)),
										   st->owner, GetCurrentTimestamp());
	if (late != NIL)
		StoreRelease(DatumGetArrayTypeP(obx_uuid_array(late)), st->owner);
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
		List	   *messages = NIL;

		if (!route->remote)
			obx_notify_batch(&st, route, st.batch_size);
		else if (obx_claim(&st, route, &messages) > 0)
			obx_deliver_batch(&st, route, messages);
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
 * Start a transaction of the worker's round and take the tables' locks
 * without waiting; on false the transaction is already over (the tables
 * are gone or locked, and the round gives up).
 */
static bool
obx_begin_locked(const char *activity, MemoryContext cxt)
{
	obx_begin(activity);
	MemoryContextSwitchTo(cxt);
	if (IdentityTryLockTables())
		return true;
	obx_commit();
	return false;
}

/* Commit a transaction of the worker's round. */
static void
obx_commit(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
}

/*
 * One round of the background worker over every routed topic of this
 * database: batches are taken from each topic in turn while some topic
 * still fills whole batches.  Called outside a transaction; each claim and
 * each delivery commits in a transaction of its own.  Returns false when
 * the round could not run (the extension's tables are missing or locked);
 * otherwise sets *next_wake to when something next becomes due (DT_NOEND:
 * nothing pending), and *delivered and *failed to the round's outcomes.
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
	bool		more;
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

	if (!obx_begin_locked("loading routes", round_cxt))
		goto done;
	obx_init_state(&st, delivering_role,
				   obx_lease_owner("krizaka_outbox worker"));	/* reads the catalogs */
	IdentityBecomeExtensionOwner(&save);
	routes = StoreRouteList(NULL);
	IdentityRestore(&save);
	obx_commit();
	sizes = palloc(sizeof(int) * Max(list_length(routes), 1));
	for (int i = 0; i < list_length(routes); i++)
		sizes[i] = st.batch_size;

	do
	{
		more = false;
		foreach(lc, routes)
		{
			OutboxRoute *route = (OutboxRoute *) lfirst(lc);
			int		   *size = &sizes[foreach_current_index(lc)];
			List	   *messages = NIL;
			int			claimed;

			CHECK_FOR_INTERRUPTS();

			MemoryContextReset(batch_cxt);
			if (!obx_begin_locked(route->remote ? "claiming" : "delivering to a channel",
								  batch_cxt))
				goto done;
			IdentityBecomeExtensionOwner(&save);
			if (route->remote)
				claimed = obx_claim(&st, route, &messages);
			else
			{
				obx_notify_batch(&st, route, *size);
				claimed = st.claimed;
			}
			IdentityRestore(&save);
			obx_commit();

			if (claimed >= (route->remote ? st.batch_size : *size))
			{
				more = true;
				if (!route->remote)
					*size = Min(*size * 2, Max(NOTIFY_BATCH_MAX, st.batch_size));
			}
			if (!route->remote || claimed == 0)
				continue;

			/* a remote batch: the claim committed on its own, see above */
			if (!obx_begin_locked("delivering to a remote server", batch_cxt))
				goto done;
			IdentityBecomeExtensionOwner(&save);
			obx_deliver_batch(&st, route, messages);
			IdentityRestore(&save);
			obx_commit();
		}
	} while (more);

	/* when to look again */
	if (obx_begin_locked("computing next due time", round_cxt))
	{
		TimestampTz now = GetCurrentTimestamp();

		IdentityBecomeExtensionOwner(&save);
		foreach(lc, routes)
		{
			OutboxRoute *route = (OutboxRoute *) lfirst(lc);
			TimestampTz next = StoreNextDue(cstring_to_text(route->topic), now);

			if (next < *next_wake)
				*next_wake = next;
		}
		IdentityRestore(&save);
		obx_commit();
		ran = true;
	}

done:
	pgstat_report_activity(STATE_IDLE, NULL);
	*delivered = st.delivered;
	*failed = st.failed;

	MemoryContextSwitchTo(old);
	MemoryContextDelete(round_cxt);
	return ran;
}
