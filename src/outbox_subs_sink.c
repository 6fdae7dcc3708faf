/*-------------------------------------------------------------------------
 *
 * outbox_subs_sink.c
 *		Where the claim of a named subscription puts the rows it leased:
 *		rows of outbox.message for the SQL function claim(), or
 *		ClaimedMessages for delivery by a route; and the arrays its
 *		statements take.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "outbox_subs_sink.h"

/* the columns a claim returns that the sink reads */
#define SUBS_COL_OWNER		9

/*
 * A sink into store, whose descriptor tupdesc is the row type of
 * outbox.message.
 */
void
SubsSinkTuplestore(SubsSink *sink, TupleDesc tupdesc, Tuplestorestate *store)
{
	if (tupdesc->natts > OUTBOX_MESSAGE_MAX_COLS)
		elog(ERROR, "outbox.message has an unexpected shape (%d columns)",
			 tupdesc->natts);
	sink->tupdesc = tupdesc;
	sink->store = store;
	sink->messages = NULL;
}

/* A sink onto *messages: ClaimedMessages in the current memory context */
void
SubsSinkList(SubsSink *sink, List **messages)
{
	sink->tupdesc = NULL;
	sink->store = NULL;
	sink->messages = messages;
	sink->cxt = CurrentMemoryContext;
}

/* The row of SPI_tuptable i as a ClaimedMessage in sink's context */
static void
obx_sink_message(SubsSink *sink, HeapTuple row, TupleDesc desc)
{
	MemoryContext spi = MemoryContextSwitchTo(sink->cxt);
	ClaimedMessage *m = palloc(sizeof(ClaimedMessage));
	bool		isnull;
	Datum		until;

	memcpy(&m->id, DatumGetUUIDP(SPI_getbinval(row, desc, 1, &isnull)), sizeof(pg_uuid_t));
	m->topic = DatumGetTextPCopy(SPI_getbinval(row, desc, 2, &isnull));
	m->event_type = DatumGetTextPCopy(SPI_getbinval(row, desc, 3, &isnull));
	m->payload = datumCopy(SPI_getbinval(row, desc, 4, &isnull), false, -1);
	m->created_at = DatumGetTimestampTz(SPI_getbinval(row, desc, 5, &isnull));
	m->attempts = DatumGetInt32(SPI_getbinval(row, desc, 7, &isnull));
	until = SPI_getbinval(row, desc, 8, &isnull);
	m->leased_until = isnull ? DT_NOBEGIN : DatumGetTimestampTz(until);
	*sink->messages = lappend(*sink->messages, m);
	MemoryContextSwitchTo(spi);
}

/*
 * Put the leased rows of SPI_tuptable into the sink, the columns in order
 * into the live attributes of outbox.message.  Returns how many; *last is
 * the position of the last row read (leased or not).
 */
int
SubsSinkRows(SubsSink *sink, int64 *last)
{
	SPITupleTable *tt = SPI_tuptable;
	uint64		i;
	int			n = 0;

	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = tt->vals[i];
		bool		isnull;
		int			col = 1;
		int			att;

		*last = DatumGetInt64(SPI_getbinval(row, tt->tupdesc, SUBS_COL_SEQ, &isnull));
		(void) SPI_getbinval(row, tt->tupdesc, SUBS_COL_OWNER, &isnull);
		if (isnull)
			continue;
		n++;
		if (sink->messages != NULL)
		{
			obx_sink_message(sink, row, tt->tupdesc);
			continue;
		}
		for (att = 0; att < sink->tupdesc->natts; att++)
		{
			if (TupleDescAttr(sink->tupdesc, att)->attisdropped || col > SUBS_CLAIM_COLS)
			{
				sink->values[att] = (Datum) 0;
				sink->nulls[att] = true;
				continue;
			}
			sink->values[att] = SPI_getbinval(row, tt->tupdesc, col, &sink->nulls[att]);
			col++;
		}
		tuplestore_putvalues(sink->store, sink->tupdesc, sink->values, sink->nulls);
	}
	return n;
}

/* an array of n Datums of type typid */
Datum
SubsArray(Datum *elems, bool *nulls, int n, Oid typid)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			dims[1] = {n};
	int			lbs[1] = {1};

	get_typlenbyvalalign(typid, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, typid,
											  typlen, typbyval, typalign));
}
