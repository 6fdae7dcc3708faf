/*-------------------------------------------------------------------------
 *
 * outbox_claim_sink.c
 *		Where a claim of the default subscription puts the rows it leased.
 *
 * The SQL function claim() wants the leased rows as rows of
 * outbox.message, delivery wants them as ClaimedMessages; the claims of
 * outbox_store_claim.c hand each row of their statement to a sink, which
 * puts it where its caller wants it.  A row the claim marked dead instead
 * of leasing it is counted, not handed over.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "outbox_claim_int.h"
#include "outbox_claim_sink.h"
#include "outbox_store.h"

static const char *const claim_cols[NUM_CLAIM_COLS] = {
	"id", "topic", "event_type", "created_at", "payload", "attempts",
	"leased_until", "dead_at"
};

static ClaimedMessage *obx_claimed_message(Datum *vals, bool *isnull,
										   const int *attno);
static void obx_put_tuple(ClaimSink *sink, Datum *vals, bool *isnull,
						  const int *attno);
static void obx_put_message(ClaimSink *sink, Datum *vals, bool *isnull,
							const int *attno);

/*
 * Copy the fields delivery needs out of a claimed row, in the current
 * context.  The payload is copied as stored, never detoasted here: see
 * ClaimedMessage.
 */
static ClaimedMessage *
obx_claimed_message(Datum *vals, bool *isnull, const int *attno)
{
	ClaimedMessage *m = palloc(sizeof(ClaimedMessage));

	memcpy(&m->id, DatumGetUUIDP(vals[attno[COL_ID]]), sizeof(pg_uuid_t));
	m->topic = DatumGetTextPCopy(vals[attno[COL_TOPIC]]);
	m->event_type = DatumGetTextPCopy(vals[attno[COL_EVENT_TYPE]]);
	m->created_at = DatumGetTimestampTz(vals[attno[COL_CREATED_AT]]);
	m->payload = datumCopy(vals[attno[COL_PAYLOAD]], false, -1);
	m->attempts = DatumGetInt32(vals[attno[COL_ATTEMPTS]]);
	m->leased_until = isnull[attno[COL_LEASED_UNTIL]] ? DT_NOBEGIN :
		DatumGetTimestampTz(vals[attno[COL_LEASED_UNTIL]]);
	return m;
}

/*
 * Tuplestore sink: the row as a row of outbox.message.  A column an
 * operator added to the table and dropped again stays in the row type,
 * empty, where the statement's rows have no column.
 */
static void
obx_put_tuple(ClaimSink *sink, Datum *vals, bool *isnull, const int *attno)
{
	TupleDesc	desc = sink->tupdesc;
	Datum		row[OUTBOX_MESSAGE_MAX_COLS];
	bool		rownull[OUTBOX_MESSAGE_MAX_COLS];
	int			i;
	int			j = 0;

	if (!sink->dropped)
	{
		tuplestore_putvalues(sink->store, desc, vals, isnull);
		return;
	}
	for (i = 0; i < desc->natts; i++)
	{
		row[i] = (Datum) 0;
		rownull[i] = true;
		if (TupleDescAttr(desc, i)->attisdropped)
			continue;
		row[i] = vals[j];
		rownull[i] = isnull[j];
		j++;
	}
	tuplestore_putvalues(sink->store, desc, row, rownull);
}

/* List sink: the row as a ClaimedMessage in the sink's memory context. */
static void
obx_put_message(ClaimSink *sink, Datum *vals, bool *isnull, const int *attno)
{
	MemoryContext spi = MemoryContextSwitchTo(sink->cxt);

	*sink->messages = lappend(*sink->messages,
							  obx_claimed_message(vals, isnull, attno));
	MemoryContextSwitchTo(spi);
}

/*
 * A sink that puts the rows into store, whose descriptor tupdesc is the
 * row type of outbox.message.
 */
void
ClaimSinkTuplestore(ClaimSink *sink, TupleDesc tupdesc, Tuplestorestate *store)
{
	int			i;

	memset(sink, 0, sizeof(ClaimSink));
	sink->put = obx_put_tuple;
	if (tupdesc->natts > OUTBOX_MESSAGE_MAX_COLS)
		elog(ERROR, "outbox.message has an unexpected shape (%d columns)",
			 tupdesc->natts);
	for (i = 0; i < tupdesc->natts; i++)
	{
		if (TupleDescAttr(tupdesc, i)->attisdropped)
			sink->dropped = true;
		else
			sink->natts++;
	}
	sink->tupdesc = tupdesc;
	sink->store = store;
}

/* A sink that appends ClaimedMessages onto *messages, in the current context. */
void
ClaimSinkList(ClaimSink *sink, List **messages)
{
	memset(sink, 0, sizeof(ClaimSink));
	sink->put = obx_put_message;
	sink->messages = messages;
	sink->cxt = CurrentMemoryContext;
}

/*
 * Hand the rows of the claim statement just executed to sink, reading the
 * first ncols of claim_cols.  With COL_DEAD_AT among them, a row the claim
 * marked dead is counted in *dead instead.  With found, the deferred ones
 * among the rows are counted there too (outbox_claim_hint.c).  Returns the
 * number of rows handed over.
 */
int
ClaimSinkRows(ClaimSink *sink, int ncols, int *dead, ClaimHintFound *found)
{
	TupleDesc	desc = SPI_tuptable->tupdesc;
	int			attno[NUM_CLAIM_COLS];
	int			att_deferred = -1;
	int			att_available = -1;
	int			leased = 0;
	uint64		i;
	int			c;

	if (desc->natts > OUTBOX_MESSAGE_MAX_COLS ||
		(sink->natts > 0 && desc->natts != sink->natts))
		elog(ERROR, "outbox.message has an unexpected shape (%d columns)",
			 desc->natts);
	for (c = 0; c < ncols; c++)
	{
		attno[c] = SPI_fnumber(desc, claim_cols[c]) - 1;
		if (attno[c] < 0)
			elog(ERROR, "outbox.message has no column %s", claim_cols[c]);
	}
	if (found != NULL)
	{
		found->n = 0;
		found->topics = NIL;
		att_deferred = SPI_fnumber(desc, "deferred") - 1;
		att_available = SPI_fnumber(desc, "available_at") - 1;
	}

	for (i = 0; i < SPI_processed; i++)
	{
		Datum		vals[OUTBOX_MESSAGE_MAX_COLS];
		bool		isnull[OUTBOX_MESSAGE_MAX_COLS];

		heap_deform_tuple(SPI_tuptable->vals[i], desc, vals, isnull);
		if (att_deferred >= 0 && att_available >= 0 &&
			!isnull[att_deferred] && DatumGetBool(vals[att_deferred]))
			ClaimHintSee(found, vals[attno[COL_TOPIC]],
						 DatumGetTimestampTz(vals[att_available]),
						 DatumGetUUIDP(vals[attno[COL_ID]]));
		if (ncols > COL_DEAD_AT && !isnull[attno[COL_DEAD_AT]])
		{
			(*dead)++;
			continue;
		}
		sink->put(sink, vals, isnull, attno);
		leased++;
	}
	SPI_freetuptable(SPI_tuptable);
	return leased;
}

