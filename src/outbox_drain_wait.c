/*-------------------------------------------------------------------------
 *
 * outbox_drain_wait.c
 *		The drain worker's remote batches in flight, and its wait between
 *		rounds, which serves their calls and its latch at once.
 *
 * A round claims a batch of each remote route (outbox_drain.c) and leaves
 * it here.  The worker's wait for its next round is one WaitEventSet over
 * its latch and the socket of every call in flight, with the earliest of
 * their deadlines as timeout.  Each call takes a step when its socket is
 * ready or its deadline passes.  A batch whose call has ended, or that has
 * none yet, lands: in a short transaction the outcome is noted and the
 * batch's next call started, or the batch is recorded when it is through.
 * (The first call starts in a transaction after the claim's: a message
 * that takes the worker down has its attempt counted, and ends dead.)  No transaction stays open while the worker waits, so a commit
 * that wakes it runs the next round at once, NOTIFY batches included,
 * whatever the remote servers do; and the calls of different routes never
 * wait for one another.  What a remote server can still cost the others
 * is a host name lookup (libpq resolves names before connecting, and
 * blocks while it does: give hostaddr) and a cancel request after a
 * timeout (libpq 15 sends it blocking, to a server that answered moments
 * before).
 *
 * When a batch lands the wait ends, so that a round launches the route's
 * next batch: a route is left alone by the rounds while it flies.
 *
 * Glossary:
 *	flight		a remote batch and its call in progress
 *	landing		taking a flight whose call ended a step further, in a
 *				transaction
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_drain_int.h"

/*
 * how soon a flight that could not land (tables locked by ALTER TABLE,
 * VACUUM FULL, CREATE INDEX...) tries again: never a wait of no time
 */
#define OBX_LAND_RETRY_MS	100

/* a remote batch in flight */
typedef struct Flight
{
	RemoteBatch *batch;
	BatchCall  *call;			/* NULL before the first one; running, or
								 * ended and waiting to land */
	int			ready;			/* socket events the last wait reported */
	TimestampTz retry_at;		/* not to land before (tables were locked) */
} Flight;

static MemoryContext obx_flight_cxt = NULL; /* the flights and their batches */
static MemoryContext obx_wait_cxt = NULL;	/* one wait's wait set, reset */
static List *obx_flights = NIL;
static int64 obx_delivered = 0;		/* outcomes recorded since the last round */
static int64 obx_failed = 0;

static bool obx_wait_once(TimestampTz end, volatile sig_atomic_t *waiting);
static bool obx_land(void);
static void obx_abandon(RemoteBatch *batch, ErrorData *edata, bool at_commit);

/* The memory context that batches in flight live in. */
MemoryContext
DrainFlightContext(void)
{
	if (obx_flight_cxt == NULL)
	{
		obx_flight_cxt = AllocSetContextCreate(TopMemoryContext,
											   "outbox remote batches in flight",
											   ALLOCSET_DEFAULT_SIZES);
		obx_wait_cxt = AllocSetContextCreate(TopMemoryContext,
											 "outbox drain wait",
											 ALLOCSET_SMALL_SIZES);
	}
	return obx_flight_cxt;
}

/* Whether a batch of the route is in flight. */
bool
DrainFlying(const OutboxRoute *route)
{
	ListCell   *lc;

	foreach(lc, obx_flights)
	{
		Flight	   *f = (Flight *) lfirst(lc);

		if (RemoteBatchOfRoute(f->batch, route))
			return true;
	}
	return false;
}

/*
 * Leave a claimed batch in flight; it must live in DrainFlightContext().
 * Its first call starts when it first lands.
 */
void
DrainFly(RemoteBatch *batch)
{
	MemoryContext old = MemoryContextSwitchTo(DrainFlightContext());
	Flight	   *f = palloc0(sizeof(Flight));

	f->batch = batch;
	obx_flights = lappend(obx_flights, f);
	MemoryContextSwitchTo(old);
}

/* Add the outcomes recorded by landings since the last call. */
void
DrainFlightCounts(int64 *delivered, int64 *failed)
{
	*delivered += obx_delivered;
	*failed += obx_failed;
	obx_delivered = 0;
	obx_failed = 0;
}

/*
 * The drain worker's wait for its next round: until its latch is set and
 * wanted() says a round is asked for (a commit that woke it, a reload),
 * the timeout passes or a batch has landed, serving the calls in flight
 * meanwhile.  A latch set for PostgreSQL's own reasons (a catch-up of
 * invalidations that other sessions' DDL sent, a barrier) only has its
 * interrupt taken, and the wait goes on.  *waiting is set while it sleeps
 * (and only then: a landing is a transaction that a termination must be
 * able to end, row lock waits included); it returns at once when *stop is
 * set.  Then takes any interrupt.
 */
void
DrainWait(long timeout_ms, volatile sig_atomic_t *waiting,
		  volatile sig_atomic_t *stop, bool (*wanted) (void))
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  timeout_ms);

	(void) DrainFlightContext();
	for (;;)
	{
		bool		woken;
		bool		landed;

		if (*stop)
			return;
		woken = obx_wait_once(end, waiting);
		if (*stop)
			return;
		landed = obx_land();
		if (woken && !wanted())
		{
			woken = false;
			CHECK_FOR_INTERRUPTS();
		}

		if (woken || landed || GetCurrentTimestamp() >= end)
			break;
	}
	CHECK_FOR_INTERRUPTS();
}

/*
 * Wait once, on the latch and the sockets of the calls in flight, until
 * end or the earliest of their deadlines; then step every call, with the
 * events its socket reported (none: it only looks at its deadline).
 * Returns whether the latch was set; it is reset then, before the work
 * that follows, as WorkerWait does.  *waiting is set while it sleeps.
 */
static bool
obx_wait_once(TimestampTz end, volatile sig_atomic_t *waiting)
{
	int			size = list_length(obx_flights) + 2;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz until = end;
	WaitEventSet *set;
	WaitEvent  *occurred;
	ListCell   *lc;
	bool		woken = false;
	int			n;

	/* nothing in flight: the latch's own wait set, as WorkerWait */
	if (obx_flights == NIL)
	{
		int			rc;

		*waiting = true;
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   TimestampDifferenceMilliseconds(now, end),
					   PG_WAIT_EXTENSION);
		*waiting = false;
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			woken = true;
		}
		return woken;
	}

	MemoryContextReset(obx_wait_cxt);
	set = ObxCreateWaitEventSet(obx_wait_cxt, size);
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	foreach(lc, obx_flights)
	{
		Flight	   *f = (Flight *) lfirst(lc);
		pgsocket	sock;
		int			events;

		f->ready = 0;
		if (f->call == NULL)	/* its first call is to start */
		{
			until = Min(until, Max(now, f->retry_at));
			continue;
		}
		events = BatchCallSocket(f->call, &sock);
		if (events == 0 && BatchCallPending(f->call))	/* waits on its time */
			until = Min(until, BatchCallDeadline(f->call));
		else if (events == 0)	/* ended: it could not land, try again */
			until = Min(until, TimestampTzPlusMilliseconds(now, OBX_LAND_RETRY_MS));
		else if (sock == PGINVALID_SOCKET)	/* its next step ends it */
			until = now;
		else
		{
			AddWaitEventToSet(set, events, sock, NULL, f);
			until = Min(until, BatchCallDeadline(f->call));
		}
	}

	occurred = MemoryContextAlloc(obx_wait_cxt, sizeof(WaitEvent) * size);
	*waiting = true;
	n = WaitEventSetWait(set, TimestampDifferenceMilliseconds(now, until),
						 occurred, size, PG_WAIT_EXTENSION);
	*waiting = false;
	FreeWaitEventSet(set);

	for (int i = 0; i < n; i++)
	{
		if (occurred[i].events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			woken = true;
		}
		else if (occurred[i].user_data != NULL)
			((Flight *) occurred[i].user_data)->ready = occurred[i].events;
	}

	foreach(lc, obx_flights)
	{
		Flight	   *f = (Flight *) lfirst(lc);

		if (f->call != NULL)
			BatchCallStep(f->call, f->ready);
	}
	return woken;
}

/*
 * Land every flight whose call has ended (or that has none yet), each in a
 * transaction of its own: start the batch's next call, or record the batch
 * when it is through.  A flight that cannot take the tables' locks now
 * tries again after OBX_LAND_RETRY_MS.  A landing that raises an error
 * (its message's payload gone under it, a trigger refusing an outcome)
 * ends its batch: what it noted so far is recorded message by message in
 * a new transaction (RemoteBatchAbandon); the other flights go on.
 * Returns whether a batch is through.
 */
static bool
obx_land(void)
{
	bool		landed = false;
	ListCell   *lc;

	foreach(lc, obx_flights)
	{
		Flight	   *f = (Flight *) lfirst(lc);
		TimestampTz now = GetCurrentTimestamp();
		volatile bool through = false;
		ErrorData  *edata = NULL;
		bool		at_commit;

		if (f->call != NULL && BatchCallPending(f->call))
			continue;
		if (f->retry_at > now)
			continue;

		PG_TRY();
		{
			SavedIdentity save;

			if (!DrainBeginLocked("delivering to a remote server", obx_wait_cxt))
				f->retry_at = TimestampTzPlusMilliseconds(now, OBX_LAND_RETRY_MS);
			else
			{
				IdentityBecomeExtensionOwner(&save);
				f->call = RemoteBatchNext(f->batch);
				if (f->call == NULL)
				{
					RemoteBatchFinish(f->batch, &obx_delivered, &obx_failed);
					through = true;
				}
				IdentityRestore(&save);
				DrainCommit();
				f->retry_at = 0;
			}
		}
		PG_CATCH();
		{
			edata = DrainCatch(obx_wait_cxt, &at_commit);
		}
		PG_END_TRY();
		pgstat_report_activity(STATE_IDLE, NULL);

		if (edata != NULL)
		{
			/* a batch that finished has already been freed */
			if (!through)
				obx_abandon(f->batch, edata, at_commit);
			through = true;
		}
		if (through)
		{
			obx_flights = foreach_delete_current(obx_flights, lc);
			pfree(f);
			landed = true;
		}
	}
	return landed;
}

/*
 * End a flight whose landing raised edata: record what its batch noted
 * so far in a transaction of its own (RemoteBatchAbandon).  If that fails
 * too, or the tables are locked, the batch is dropped and its leases
 * expire: its messages come back with their attempt counted.
 */
static void
obx_abandon(RemoteBatch *batch, ErrorData *edata, bool at_commit)
{
	char	   *text = DrainErrorText(edata);
	bool		messages = !at_commit && DrainErrorIsMessages(edata);
	volatile bool recorded = false;

	PG_TRY();
	{
		SavedIdentity save;

		if (DrainBeginLocked("recording a failure", obx_wait_cxt))
		{
			IdentityBecomeExtensionOwner(&save);
			RemoteBatchAbandon(batch, text, messages, &obx_delivered, &obx_failed);
			recorded = true;
			IdentityRestore(&save);
			DrainCommit();
		}
	}
	PG_CATCH();
	{
		bool		again;

		(void) DrainCatch(obx_wait_cxt, &again);
	}
	PG_END_TRY();
	if (!recorded)
		RemoteBatchDrop(batch);
}
