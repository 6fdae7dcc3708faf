/*-------------------------------------------------------------------------
 *
 * outbox_claim_sink.h
 *		Where a claim of the default subscription puts the rows it leased:
 *		rows of outbox.message for the SQL function claim(), or
 *		ClaimedMessages for delivery (outbox_claim_sink.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_CLAIM_SINK_H
#define OUTBOX_CLAIM_SINK_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "nodes/pg_list.h"
#include "utils/tuplestore.h"

/* The columns a claim reads, by position in claim_cols */
typedef enum ClaimColumn
{
	COL_ID,
	COL_TOPIC,
	COL_EVENT_TYPE,
	COL_CREATED_AT,
	COL_PAYLOAD,
	COL_ATTEMPTS,
	COL_LEASED_UNTIL,
	COL_DEAD_AT,				/* not returned by stmt_claim_delivered */
	NUM_CLAIM_COLS
} ClaimColumn;

/* Where a claim puts the rows it leased */
typedef struct ClaimSink ClaimSink;
typedef void (*ClaimSinkPut) (ClaimSink *sink, Datum *vals, bool *isnull,
							  const int *attno);

struct ClaimSink
{
	ClaimSinkPut put;
	int			natts;			/* columns the rows must have; 0: any */
	bool		dropped;		/* tupdesc has dropped columns */
	TupleDesc	tupdesc;		/* tuplestore sink: the rows' descriptor */
	Tuplestorestate *store;		/* ... and the store */
	List	  **messages;		/* list sink: ClaimedMessages go onto this */
	MemoryContext cxt;			/* ... allocated here */
};

extern void ClaimSinkTuplestore(ClaimSink *sink, TupleDesc tupdesc,
								Tuplestorestate *store);
extern void ClaimSinkList(ClaimSink *sink, List **messages);
struct ClaimHintFound;
extern int	ClaimSinkRows(ClaimSink *sink, int ncols, int *dead,
						  struct ClaimHintFound *found);

#endif							/* OUTBOX_CLAIM_SINK_H */
