/*-------------------------------------------------------------------------
 *
 * outbox_subs_sink.h
 *		Where the claim of a named subscription puts the rows it leased,
 *		and the arrays its statements take (outbox_subs_sink.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SUBS_SINK_H
#define OUTBOX_SUBS_SINK_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "nodes/pg_list.h"
#include "utils/tuplestore.h"

#include "outbox_spi.h"
#include "outbox_store.h"

/*
 * The columns of outbox.message a claim returns (SUBS_LEASED_MESSAGES); a
 * statement may return more after them, which the sink leaves out
 */
#define SUBS_CLAIM_COLS		15
/* three of them: the message's id, its position and its ordering key */
#define SUBS_COL_ID			1
#define SUBS_COL_SEQ		13
#define SUBS_COL_KEY		15
/* the column of the fresh read (1.5) that says a row is in the lease row */
#define SUBS_COL_BY_RANGE	(SUBS_CLAIM_COLS + 1)

/*
 * Where the rows of a claim go: a tuplestore of the row type of
 * outbox.message, or (messages) a list of ClaimedMessages in cxt.
 */
typedef struct SubsSink
{
	TupleDesc	tupdesc;
	Tuplestorestate *store;
	List	  **messages;
	MemoryContext cxt;
	Datum		values[OUTBOX_MESSAGE_MAX_COLS];
	bool		nulls[OUTBOX_MESSAGE_MAX_COLS];
} SubsSink;

extern void SubsSinkTuplestore(SubsSink *sink, TupleDesc tupdesc,
							   Tuplestorestate *store);
extern void SubsSinkList(SubsSink *sink, List **messages);
extern int	SubsSinkRows(SubsSink *sink, int64 *last);
extern Datum SubsArray(Datum *elems, bool *nulls, int n, Oid typid);

/* the reads of the rows a subscription has (outbox_store_subs_due.c) */
extern int	SubsClaimExpired(Datum *args, SubsSink *sink);
extern int	SubsClaimDue(int32 sub, const ClaimRequest *req, Datum *args, int want,
						 SubsSink *sink);

/* the holes looked at again by a claim (outbox_store_subs_holes.c) */
extern int	SubsClaimHoles(Datum sub, const ClaimRequest *req, TimestampTz lease_end,
						   int want, int64 from, SubsSink *sink, bool *changed,
						   int64 *first);

/* the statement of a fresh read (outbox_subs_fresh.c) */
extern SavedStatement *SubsFreshRead(bool chain, bool plain);

#endif							/* OUTBOX_SUBS_SINK_H */
