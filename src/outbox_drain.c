/*-------------------------------------------------------------------------
 *
 * outbox_drain.c
 *		The one delivery path, used by drain_once and by the background
 *		worker: claim a batch of a routed topic, deliver it in order, and
 *		record each outcome.
 *
 * Delivery of one batch:
 *	- each message is delivered in a subtransaction of its own, so that an
 *	  error raised while delivering it (bad data, a NOTIFY that cannot be
 *	  queued) becomes a failure of that message only: outbox.fail with the
 *	  error text, and the others go on;
 *	- the messages delivered are completed together at the end of the batch,
 *	  in the same transaction, so a NOTIFY and the completion of its message
 *	  commit together;
 *	- a remote call has until the earlier of half a lease from its start and
 *	  one second before the lease ends; messages whose turn comes too late
 *	  are released (their attempt does not count) for the next round.
 *
 * drain_once runs all of this inside its caller's transaction.  The worker
 * commits the claim first, in a transaction of its own, and then delivers
 * in a second one: if the worker dies while delivering, the leases it took
 * expire and the messages are claimed again with one more attempt, so a
 * message that kills the worker ends dead instead of killing it forever.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
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

PG_FUNCTION_INFO_V1(outbox_drain_once);

/* Who delivers, and what has been done so far */
typedef struct DrainState
{
	Oid			role;			/* the delivering role */
	bool		role_superuser;
	text	   *owner;			/* lease owner */
	int			batch_size;
	int			lease_seconds;
	int64		delivered;
	int64		failed;
} DrainState;

/* A remote call stops this long before the lease ends */
#define LEASE_MARGIN_US		USECS_PER_SEC

static void obx_init_state(DrainState *st, Oid role, const char *owner);
static int	obx_claim(DrainState *st, OutboxRoute *route, List **messages);
static void obx_deliver_batch(DrainState *st, OutboxRoute *route, List *messages);
static bool obx_deliver_one(DrainState *st, OutboxRoute *route,
							ClaimedMessage *m, TimestampTz deadline, char **error);
static bool obx_route_needs_password(DrainState *st, OutboxRoute *route);
static Datum obx_uuid_array(List *ids);

/* Prepare a drain as role with lease owner name owner. */
static void
obx_init_state(DrainState *st, Oid role, const char *owner)
{
	st->role = role;
	st->role_superuser = superuser_arg(role);
	st->owner = cstring_to_text(owner);
	st->batch_size = outbox_batch_size;
	st->lease_seconds = outbox_lease_seconds;
	st->delivered = 0;
	st->failed = 0;
}

/* Claim a batch of the route's topic; the messages go onto *messages. */
static int
obx_claim(DrainState *st, OutboxRoute *route, List **messages)
{
	ClaimRequest req;

	req.owner = st->owner;
	req.topic = cstring_to_text(route->topic);
	req.batch_size = st->batch_size;
	req.lease_seconds = st->lease_seconds;
	req.max_attempts = outbox_max_attempts;
	req.now = GetCurrentTimestamp();
	return StoreClaim(&req, NULL, NULL, messages);
}

/*
 * Remote connections must authenticate with a password unless both the
 * delivering role and the role that made the route are superusers: a route
 * made by an ordinary role must not borrow the server's own identity (trust
 * or peer authentication), the rule of dblink and postgres_fdw.
 */
static bool
obx_route_needs_password(DrainState *st, OutboxRoute *route)
{
	Oid			creator;

	if (!st->role_superuser)
		return true;
	creator = get_role_oid(route->created_by, true);
	return !OidIsValid(creator) || !superuser_arg(creator);
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
 * Deliver one message in a subtransaction.  Returns true when it was
 * delivered (for NOTIFY: queued for this transaction's commit); otherwise
 * false with the reason in *error.  Query cancel is not swallowed.
 */
static bool
obx_deliver_one(DrainState *st, OutboxRoute *route, ClaimedMessage *m,
				TimestampTz deadline, char **error)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);

	PG_TRY();
	{
		if (route->remote)
		{
			Jsonb	   *env = BuildEnvelope(&m->id, m->event_type,
											m->created_at, m->payload);
			char	   *env_text = JsonbToCString(NULL, &env->root, VARSIZE(env));

			ok = RemoteDeliver(route->server, st->role,
							   obx_route_needs_password(st, route),
							   route->command, env_text, route->topic,
							   deadline, error);
		}
		else
		{
			NotifyDeliver(route->channel, m);
			ok = true;
		}
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;

		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
			ReThrowError(edata);

		*error = psprintf("%s: %s%s%s", unpack_sql_state(edata->sqlerrcode),
						  edata->message,
						  edata->detail ? "\nDETAIL: " : "",
						  edata->detail ? edata->detail : "");
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();

	return ok;
}

/*
 * Deliver a claimed batch in order and record each outcome: fail each
 * failure with its error, release what came too late, complete the rest.
 */
static void
obx_deliver_batch(DrainState *st, OutboxRoute *route, List *messages)
{
	List	   *done = NIL;
	List	   *late = NIL;
	ListCell   *lc;
	int64		lease_us = (int64) st->lease_seconds * USECS_PER_SEC;

	foreach(lc, messages)
	{
		ClaimedMessage *m = (ClaimedMessage *) lfirst(lc);
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz deadline = Min(now + lease_us / 2,
								   m->leased_until - LEASE_MARGIN_US);
		char	   *error = NULL;

		CHECK_FOR_INTERRUPTS();

		if (route->remote && deadline <= now)
		{
			late = lappend(late, &m->id);
			continue;
		}

		if (obx_deliver_one(st, route, m, deadline, &error))
			done = lappend(done, &m->id);
		else
		{
			text	   *err = ClipErrorText(error, strlen(error));

			if (StoreFail(&m->id, st->owner, err, GetCurrentTimestamp()))
				st->failed++;
		}
	}

	if (done != NIL)
		st->delivered += StoreComplete(obx_uuid_array(done), true, st->owner,
									   GetCurrentTimestamp());
	if (late != NIL)
		StoreRelease(obx_uuid_array(late), st->owner);
}

/*
 * outbox.drain_once(topic) returns integer
 *
 * One round of delivery in the caller's transaction: a batch of the topic,
 * or of each routed topic when NULL.  Runs as its caller, whose user
 * mappings serve remote routes; the outbox tables are used as their owner.
 */
Datum
outbox_drain_once(PG_FUNCTION_ARGS)
{
	Oid			caller = GetUserId();
	text	   *topic = PG_ARGISNULL(0) ? NULL :
		CheckName(PG_GETARG_DATUM(0), false, "topic");
	DrainState	st;
	StoreIdentity save;
	List	   *routes;
	ListCell   *lc;
	char		owner[64];

	snprintf(owner, sizeof(owner), "drain_once %d", MyProcPid);
	obx_init_state(&st, caller, owner);

	StoreBecomeOwner(&save);
	routes = StoreRouteList(topic);
	foreach(lc, routes)
	{
		OutboxRoute *route = (OutboxRoute *) lfirst(lc);
		List	   *messages = NIL;

		if (obx_claim(&st, route, &messages) > 0)
			obx_deliver_batch(&st, route, messages);
	}
	StoreRestoreIdentity(&save);

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
	StoreIdentity save;
	List	   *routes;
	ListCell   *lc;
	bool		more;
	char		owner[64];

	*next_wake = DT_NOEND;
	*delivered = 0;
	*failed = 0;
	round_cxt = AllocSetContextCreate(CurrentMemoryContext, "outbox drain round",
									  ALLOCSET_DEFAULT_SIZES);
	batch_cxt = AllocSetContextCreate(round_cxt, "outbox drain batch",
									  ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(round_cxt);

	snprintf(owner, sizeof(owner), "krizaka_outbox worker %d", MyProcPid);

	obx_begin("loading routes");
	MemoryContextSwitchTo(round_cxt);
	if (!StoreTryLock())
	{
		obx_commit();
		MemoryContextSwitchTo(old);
		MemoryContextDelete(round_cxt);
		return false;
	}
	obx_init_state(&st, delivering_role, owner);
	StoreBecomeOwner(&save);
	routes = StoreRouteList(NULL);
	StoreRestoreIdentity(&save);
	obx_commit();

	do
	{
		more = false;
		foreach(lc, routes)
		{
			OutboxRoute *route = (OutboxRoute *) lfirst(lc);
			List	   *messages = NIL;
			int			claimed;

			CHECK_FOR_INTERRUPTS();

			/* the claim commits on its own: see the file header */
			MemoryContextReset(batch_cxt);
			obx_begin("claiming");
			MemoryContextSwitchTo(batch_cxt);
			if (!StoreTryLock())
			{
				obx_commit();
				MemoryContextSwitchTo(old);
				MemoryContextDelete(round_cxt);
				return false;
			}
			StoreBecomeOwner(&save);
			claimed = obx_claim(&st, route, &messages);
			StoreRestoreIdentity(&save);
			obx_commit();

			if (claimed == 0)
				continue;
			if (claimed >= st.batch_size)
				more = true;

			obx_begin(route->remote ? "delivering to a remote server" :
					  "delivering to a channel");
			MemoryContextSwitchTo(batch_cxt);
			if (!StoreTryLock())
			{
				obx_commit();
				MemoryContextSwitchTo(old);
				MemoryContextDelete(round_cxt);
				return false;
			}
			StoreBecomeOwner(&save);
			obx_deliver_batch(&st, route, messages);
			StoreRestoreIdentity(&save);
			obx_commit();
		}
	} while (more);

	/* when to look again */
	obx_begin("computing next due time");
	MemoryContextSwitchTo(round_cxt);
	if (StoreTryLock())
	{
		TimestampTz now = GetCurrentTimestamp();

		StoreBecomeOwner(&save);
		foreach(lc, routes)
		{
			OutboxRoute *route = (OutboxRoute *) lfirst(lc);
			TimestampTz next = StoreNextDue(cstring_to_text(route->topic), now);

			if (next < *next_wake)
				*next_wake = next;
		}
		StoreRestoreIdentity(&save);
	}
	obx_commit();
	pgstat_report_activity(STATE_IDLE, NULL);

	*delivered = st.delivered;
	*failed = st.failed;

	MemoryContextSwitchTo(old);
	MemoryContextDelete(round_cxt);
	return true;
}
