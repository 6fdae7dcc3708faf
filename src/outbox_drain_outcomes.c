/*-------------------------------------------------------------------------
 *
 * outbox_drain_outcomes.c
 *		The outcomes of a batch of a remote or HTTP route recorded: together
 *		when the batch is through, message by message when its landing
 *		failed, or not at all when even that cannot be done.
 *
 * A batch notes the outcome of each call as it ends (outbox_drain_remote.c):
 * the messages delivered, those that failed and why, those whose turn came
 * too late, and the route's breaker as it changed.  Nothing of that is
 * written until the batch is through; then RemoteBatchFinish records it
 * all in one transaction: each failure with its error (backing off, or
 * dead, or at the time the target asked), the successes completed
 * together, the late ones released untried, the HTTP route's counters and
 * the breaker if it changed.  A batch whose landing raised an error is
 * ended by RemoteBatchAbandon instead, each outcome in a subtransaction of
 * its own.  Every outcome is written as the batch's lease owner: a message
 * whose lease was lost meanwhile is not touched.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_drain_int.h"
#include "outbox_drain_remote_int.h"
#include "outbox_subs.h"

static Datum obx_uuid_array(List *ids);
static bool obx_record_one(RemoteBatch *batch, pg_uuid_t *id, bool complete,
						   const char *error, int64 *delivered, int64 *failed,
						   char **raised);

/* The batch's subscription as text; NULL: the default one */
static text *
obx_subscription(RemoteBatch *batch)
{
	return batch->subscription ? cstring_to_text(batch->subscription) : NULL;
}

/* Fail message id of the batch: back off, or dead; false if the lease was lost */
static bool
obx_fail(RemoteBatch *batch, pg_uuid_t *id, const char *error, TimestampTz now,
		 TimestampTz retry_at, bool dead)
{
	text	   *clipped = ClipErrorText(error, strlen(error));

	if (batch->subscription != NULL)
		return SubsFailAt(id, batch->owner, clipped, obx_subscription(batch), now,
						  retry_at, dead);
	return StoreFailAt(id, batch->owner, clipped, now, retry_at, dead);
}

/* Give back the leases of ids (a list of pg_uuid_t *), untried */
static void
obx_release(RemoteBatch *batch, List *ids)
{
	ArrayType  *arr = DatumGetArrayTypeP(obx_uuid_array(ids));

	if (batch->subscription != NULL)
		(void) SubsRelease(arr, batch->owner, obx_subscription(batch),
						   GetCurrentTimestamp());
	else
		(void) StoreRelease(arr, batch->owner);
}

/*
 * Record the outcomes of a batch that is through: fail each failure with
 * its error, complete what was delivered, release what came too late, and
 * store the route's breaker if it changed.  Adds to *delivered and *failed
 * and frees the batch.  Runs in a transaction, as the extension owner.
 */
void
RemoteBatchFinish(RemoteBatch *batch, int64 *delivered, int64 *failed)
{
	MemoryContext old = MemoryContextSwitchTo(batch->cxt);
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	Assert(batch->call == NULL);
	foreach(lc, batch->failures)
	{
		BatchFailure *f = (BatchFailure *) lfirst(lc);

		if (obx_fail(batch, f->id, f->error, now, f->retry_at, f->dead))
			(*failed)++;
	}
	if (batch->counts.last_call_at != 0)
		StoreHttpCount(batch->topic, batch->subscription, &batch->counts);
	if (batch->done != NIL && batch->subscription != NULL)
		*delivered += SubsCompleteMany(DatumGetArrayTypeP(obx_uuid_array(batch->done)),
									   batch->owner, obx_subscription(batch));
	else if (batch->done != NIL)
		*delivered += StoreCompleteMany(DatumGetArrayTypeP(obx_uuid_array(batch->done)),
										batch->owner, now);
	if (batch->late != NIL)
		obx_release(batch, batch->late);
	if (batch->breaker_changed)
		StoreRouteSetBreaker(batch->topic, batch->subscription, batch->route_created_at,
							 batch->consecutive_failures, batch->paused_until,
							 batch->last_failure == NULL ? NULL :
							 ClipErrorText(batch->last_failure,
										   strlen(batch->last_failure)));

	MemoryContextSwitchTo(old);
	MemoryContextDelete(batch->cxt);
}

/*
 * Record the outcome of message id on its own, in a subtransaction:
 * completed, or failed with error.  Returns whether it was recorded;
 * otherwise *raised is the text of the error that refused it.
 */
static bool
obx_record_one(RemoteBatch *batch, pg_uuid_t *id, bool complete,
			   const char *error, int64 *delivered, int64 *failed,
			   char **raised)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		TimestampTz now = GetCurrentTimestamp();

		if (complete)
		{
			if (batch->subscription != NULL ?
				SubsComplete(id, batch->owner, obx_subscription(batch)) :
				StoreComplete(id, batch->owner, now))
				(*delivered)++;
		}
		else if (obx_fail(batch, id, error, now, 0, false))
			(*failed)++;
		ReleaseCurrentSubTransaction();
		ok = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		*raised = DrainErrorText(edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return ok;
}

/*
 * End a batch whose landing raised error (its transaction already rolled
 * back): each outcome noted so far is recorded on its own message, so
 * that one message whose row refuses it (a trigger) cannot keep the
 * others from theirs; an outcome refused is recorded as the failure of
 * that message with the error that refused it.  The message whose call
 * was starting fails with error when it is the message's (its envelope
 * could not be made); the messages not tried are released.  A message
 * whose failure cannot be recorded either keeps its lease, which expires,
 * and its attempt counts then.  Frees the batch.  Runs in a transaction,
 * as the extension owner; the subtransactions cost only this path.
 */
void
RemoteBatchAbandon(RemoteBatch *batch, const char *error, bool messages,
				   int64 *delivered, int64 *failed)
{
	MemoryContext old = MemoryContextSwitchTo(batch->cxt);
	char	   *raised = NULL;
	ListCell   *lc;

	if (batch->call != NULL)
		BatchCallAbandon(batch->call);
	batch->call = NULL;

	foreach(lc, batch->done)
	{
		pg_uuid_t  *id = (pg_uuid_t *) lfirst(lc);

		if (!obx_record_one(batch, id, true, NULL, delivered, failed, &raised))
			(void) obx_record_one(batch, id, false, raised, delivered, failed,
								  &raised);
	}
	foreach(lc, batch->failures)
	{
		BatchFailure *f = (BatchFailure *) lfirst(lc);

		if (!obx_record_one(batch, f->id, false, f->error, delivered, failed,
							&raised))
			(void) obx_record_one(batch, f->id, false, raised, delivered,
								  failed, &raised);
	}
	if (batch->current != NULL && messages)
		(void) obx_record_one(batch, &batch->current->id, false, error,
							  delivered, failed, &raised);
	else if (batch->current != NULL)
		batch->late = lappend(batch->late, &batch->current->id);
	for (int i = batch->next; i < list_length(batch->messages); i++)
		batch->late = lappend(batch->late,
							  &((ClaimedMessage *) list_nth(batch->messages, i))->id);
	if (batch->late != NIL)
		obx_release(batch, batch->late);

	MemoryContextSwitchTo(old);
	MemoryContextDelete(batch->cxt);
}

/* Free a batch whose outcomes could not be recorded: its leases expire. */
void
RemoteBatchDrop(RemoteBatch *batch)
{
	if (batch->call != NULL)
		BatchCallAbandon(batch->call);
	MemoryContextDelete(batch->cxt);
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
