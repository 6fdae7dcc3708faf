/*-------------------------------------------------------------------------
 *
 * outbox_claim_int.h
 *		What the claims of one topic (outbox_store_claim.c) and across all
 *		topics (outbox_store_across.c) share: the fragments of their SQL,
 *		and the claim across all topics' arguments.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_CLAIM_INT_H
#define OUTBOX_CLAIM_INT_H

#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/uuid.h"

#include "outbox_spi.h"
#include "outbox_store.h"
#include "outbox_stream.h"

/*
 * The last_error of a message whose lease expired on its last allowed
 * attempt; max names the parameter that holds the allowed attempts.
 */
#define LEASE_EXPIRED_ERROR(max) \
	"pg_catalog.format('lease of owner \"%s\" expired on attempt %s of %s'," \
	" m.lease_owner, m.attempts, " max ")"

/*
 * A candidate of the claim whose lease expired on its last allowed attempt
 * ($6), after the dead-marking statement ran (or that it skipped because it
 * was locked): it is marked dead here too, instead of being leased again.
 * Every CASE of the claim reads this one condition.  The candidates reach
 * the UPDATE as an array of ids (= ANY (ARRAY(...))), the form that keeps
 * the claim on its index with SKIP LOCKED, so the condition cannot be
 * computed once in the subselect and carried along.
 */
#define CLAIM_EXPIRED_LAST \
	"m.leased_until IS NOT NULL AND m.attempts OPERATOR(pg_catalog.>=) $6"

/*
 * The claim's UPDATE, up to its candidates, which are identified by column
 * col: their id, or where the candidates were locked in the same statement,
 * their ctid, which saves a descent of the primary key per row.  A locked
 * row cannot move, and a row a concurrent transaction moved (committed
 * after this statement's snapshot) is left out by the TID scan instead of
 * being followed; the next claim takes it, if it is still due.
 *
 * $1 topic, $2 now, $3 batch size, $4 owner, $5 lease end, $6 max attempts
 */
#define CLAIM_UPDATE_BY(col) \
	"claimed AS (UPDATE outbox.message m SET " \
	" attempts = CASE WHEN " CLAIM_EXPIRED_LAST \
	"   THEN m.attempts ELSE m.attempts OPERATOR(pg_catalog.+) 1 END," \
	" leased_until = CASE WHEN " CLAIM_EXPIRED_LAST \
	"   THEN NULL ELSE $5 END," \
	" lease_owner = CASE WHEN " CLAIM_EXPIRED_LAST \
	"   THEN m.lease_owner ELSE $4 END," \
	" dead_at = CASE WHEN " CLAIM_EXPIRED_LAST \
	"   THEN $2 END," \
	" last_error = CASE WHEN " CLAIM_EXPIRED_LAST \
	"   THEN " LEASE_EXPIRED_ERROR("$6") \
	"   ELSE m.last_error END " \
	"WHERE m." col " OPERATOR(pg_catalog.=) ANY (ARRAY("
#define CLAIM_UPDATE CLAIM_UPDATE_BY("id")

/* A message of alias a is due at $2 (or expired on its last attempt) */
#define CLAIM_DUE(a) \
	" " a ".delivered_at IS NULL AND " a ".dead_at IS NULL" \
	" AND " a ".available_at OPERATOR(pg_catalog.<=) $2" \
	" AND (" a ".leased_until IS NULL OR " a ".leased_until OPERATOR(pg_catalog.<=) $2)"

/*
 * A keyed message of alias a is the head of its key when no message of its
 * topic and key before it is pending.  Messages before the claim position
 * of topic are finished or deferred, or the messages of its holes (see
 * outbox_store_position.c), so the pending ones before a are
 *	- the pending messages of the key between lower and a, found in
 *	  message_key_idx; usually there is none, and the probe reads no row;
 *	- the pending messages of the key among the holes (a bigint[] of
 *	  positions, or NULL), looked up one hole at a time: a hole that
 *	  committed is fresh below the position until a search makes it
 *	  deferred.  Asked as one search of the key's messages before a with
 *	  the holes as a filter, it read every kept message of the key for each
 *	  candidate; the LIMIT keeps each hole's probe from being merged into
 *	  such a search;
 *	- the deferred pending messages of the key before a, found in the small
 *	  message_key_deferred_idx; looked for only when the topic has any
 *	  (an uncorrelated EXISTS, computed once per claim).
 * lower is the claim position, or where no holes are given the lowest of
 * the position and the holes (a claim across all topics).  A message
 * revived by retry_dead is deferred: the later messages of its key that
 * are not yet handed out wait for it again.
 */
#define KEY_HEAD_AT(a, topic, lower, holes) \
	" AND (" a ".ordering_key IS NULL OR (NOT EXISTS (" \
	"SELECT FROM outbox.message k" \
	" WHERE k.topic OPERATOR(pg_catalog.=) " a ".topic" \
	" AND k.ordering_key OPERATOR(pg_catalog.=) " a ".ordering_key" \
	" AND k.ordering_key IS NOT NULL" \
	" AND k.seq OPERATOR(pg_catalog.>=) " lower " AND k.seq OPERATOR(pg_catalog.<) " a ".seq" \
	" AND " STREAM_PENDING("k") ")" \
	" AND NOT EXISTS (" \
	"SELECT FROM pg_catalog.unnest(" holes ") AS hole(seq), LATERAL (" \
	"SELECT FROM outbox.message k" \
	" WHERE k.topic OPERATOR(pg_catalog.=) " a ".topic" \
	" AND k.ordering_key OPERATOR(pg_catalog.=) " a ".ordering_key" \
	" AND k.seq OPERATOR(pg_catalog.=) hole.seq AND " STREAM_PENDING("k") " LIMIT 1) kh" \
	" WHERE hole.seq OPERATOR(pg_catalog.<) " a ".seq)" \
	" AND (NOT EXISTS (" \
	"SELECT FROM outbox.message k" \
	" WHERE k.deferred AND k.topic OPERATOR(pg_catalog.=) " topic \
	" AND k.ordering_key IS NOT NULL AND k.delivered_at IS NULL AND k.dead_at IS NULL)" \
	" OR NOT EXISTS (" \
	"SELECT FROM outbox.message k" \
	" WHERE k.deferred AND k.topic OPERATOR(pg_catalog.=) " a ".topic" \
	" AND k.ordering_key OPERATOR(pg_catalog.=) " a ".ordering_key" \
	" AND k.ordering_key IS NOT NULL AND k.delivered_at IS NULL AND k.dead_at IS NULL" \
	" AND k.seq OPERATOR(pg_catalog.<) " a ".seq))))"

/*
 * The claims of the tables of 1.2 read the topics' streams (see
 * outbox_stream.c).  The due messages of alias a in topic, claim position
 * pos: the deferred ones (read oldest first in the deferred index), and the
 * fresh ones from the position on (read in stream order in the stream
 * index).
 */
#define STREAM_DEFERRED_DUE(a, topic, lower, holes) \
	" WHERE " a ".deferred AND " a ".topic OPERATOR(pg_catalog.=) " topic \
	" AND " CLAIM_DUE(a) KEY_HEAD_AT(a, topic, lower, holes)

#define STREAM_FRESH_AT(a, topic, pos) \
	" WHERE " a ".topic OPERATOR(pg_catalog.=) " topic \
	" AND " a ".seq OPERATOR(pg_catalog.>=) " pos \
	" AND NOT " a ".deferred AND " STREAM_PENDING(a) \
	" AND " a ".available_at OPERATOR(pg_catalog.<=) $2" \
	" AND (" a ".leased_until IS NULL OR " a ".leased_until OPERATOR(pg_catalog.<=) $2)"

#define STREAM_FRESH_DUE(a, topic, pos, lower, holes) \
	STREAM_FRESH_AT(a, topic, pos) KEY_HEAD_AT(a, topic, lower, holes)

/* A bigint[] of the n Datums elems */
static inline Datum
ClaimInt8Array(Datum *elems, int n)
{
	return PointerGetDatum(construct_array(elems, n, INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * The claim across all topics, and its arguments $1 and $7 to $12 into
 * args (outbox_store_across.c); NULL when there is no topic to claim, or
 * when only one topic is (*single, then claimed as a claim of the topic).
 * It runs in rounds (ClaimAcrossRound) of ClaimAcrossReach candidates.
 */
extern SavedStatement *ClaimAcrossPrepare(TimestampTz now, Datum *args, text **single);
extern int	ClaimAcrossReach(int wanted, int round);
extern int	ClaimAcrossRound(SavedStatement *candidates, Datum *args, int wanted,
							 int reach);

/*
 * Where a claim of one topic, or of each topic of a claim across all
 * topics, reads the deferred messages from: the hint that the claims
 * before it left, or the first entry (outbox_claim_hint.c)
 */
typedef struct ClaimHintFound
{
	bool		across;			/* a claim across all topics */
	int			n;				/* the deferred messages a claim took */
	TimestampTz at;				/* the last of them */
	pg_uuid_t	id;
	List	   *topics;			/* across all topics: the same for each topic */
} ClaimHintFound;

extern bool ClaimHintsHeld(void);
extern Datum ClaimHintTopics(TimestampTz now);
extern bool ClaimHintArgs(text *topic, const StreamHint *shared, TimestampTz now,
						  Datum *args);
extern void ClaimHintArgsAcross(Datum *names, const StreamHint *shared, int n,
								TimestampTz now, Datum *args);
extern void ClaimHintSee(ClaimHintFound *found, Datum topic, TimestampTz at,
						 const pg_uuid_t *id);
extern void ClaimHintNote(text *topic, TimestampTz now, bool hinted, int wanted,
						  const ClaimHintFound *found);
extern void ClaimHintNoteAcross(TimestampTz now, const ClaimHintFound *found);

#endif							/* OUTBOX_CLAIM_INT_H */
