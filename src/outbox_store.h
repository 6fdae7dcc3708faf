/*-------------------------------------------------------------------------
 *
 * outbox_store.h
 *		The statements on outbox.message and outbox.processed
 *		(outbox_store.c, outbox_store_claim.c).
 *
 * "owner" here is always the lease owner: the name a claimer gives, which
 * complete, fail, extend and release must repeat.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STORE_H
#define OUTBOX_STORE_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "utils/array.h"
#include "utils/jsonb.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

/* A claim of a batch of due messages */
typedef struct ClaimRequest
{
	text	   *owner;
	text	   *topic;			/* NULL: every topic */
	int			batch_size;
	int			lease_seconds;
	int			max_attempts;
	TimestampTz now;
	bool		by_route;		/* a route's delivery: may claim its
								 * subscription */
	bool		across;			/* part of a claim across topics: a named
								 * subscription that is gone, expired or
								 * routed meanwhile yields nothing */
	bool		no_wait;		/* never wait for a named subscription's
								 * lock (a later one of a claim across
								 * topics: the claim may hold rows) */
} ClaimRequest;

/*
 * What delivery needs of a claimed message.  The payload is held as it is
 * stored, not detoasted: inline (perhaps compressed) it is part of a row
 * that fits in one page; larger, it is an 18-byte pointer to its TOAST
 * value.  So a batch of n messages holds at most n pages of payload, and
 * delivery detoasts one payload at a time, and only the ones it sends
 * whole (see EnvelopeText).
 */
typedef struct ClaimedMessage
{
	pg_uuid_t	id;
	text	   *topic;
	text	   *event_type;
	TimestampTz created_at;
	Datum		payload;		/* jsonb as stored; perhaps a TOAST pointer */
	int			attempts;
	TimestampTz leased_until;
} ClaimedMessage;

/* the columns of a message its envelope is made of */
typedef struct EnvelopeRow
{
	pg_uuid_t	id;
	text	   *event_type;
	TimestampTz created_at;
	Jsonb	   *payload;
} EnvelopeRow;

#define OUTBOX_MESSAGE_MAX_COLS	32

/* appending (outbox_store.c) */
extern void StoreAppend(text *topic, text *event_type, Jsonb *payload,
						pg_uuid_t *id, TimestampTz available_at,
						bool deferred, text *ordering_key);
extern void StoreAppendNew(text *topic, text *event_type, Jsonb *payload,
						   pg_uuid_t *id, TimestampTz available_at,
						   bool deferred, text *ordering_key);
/*
 * outbox_store_append.c: the columns of an append, in the order of the
 * parameters of its INSERT
 */
#define APPEND_NCOLUMNS		9
#define APPEND_COLUMN_SEQ	8
extern bool AppendDirect(const Datum *args, const char *nulls);

extern void StoreAppendBatch(text *topic, text *event_type, ArrayType *ids,
							 ArrayType *payloads, TimestampTz available_at,
							 text *ordering_key);

/*
 * A message of alias a in the stream is neither delivered nor dead.  Said
 * so that it implies nothing about the partial indexes of pending
 * messages: the planner must read the stream index from the claim
 * position, never the pending messages from the start of the topic.
 */
#define STREAM_PENDING(a) \
	"pg_catalog.num_nulls(" a ".delivered_at, " a ".dead_at) OPERATOR(pg_catalog.=) 2"

/*
 * where a claim of a topic starts reading its stream, the holes below it
 * and its passed keys (outbox_store_position.c)
 */
struct StreamClaimState;
#define STORE_SAVED_LOOK	(-1)	/* look the saved floor up when needed */
extern void StoreClaimState(text *topic, TimestampTz now, int64 saved,
							struct StreamClaimState *st);
extern void StoreClaimKeys(text *topic, struct StreamClaimState *st,
						   Datum *keys);

/* the claim positions saved in outbox.claim_position (outbox_store_saved.c) */
struct SavedFloors;
extern int64 StoreSavedFloor(text *topic);
extern struct SavedFloors *StoreSavedFloors(void);
extern int64 StoreSavedFloorOf(struct SavedFloors *floors, text *topic);
extern void StoreSaveFloor(text *topic, struct StreamClaimState *st,
						   TimestampTz now);

/* claiming (outbox_store_claim.c) */
extern int	StoreClaimToTuplestore(const ClaimRequest *req, TupleDesc tupdesc,
								   Tuplestorestate *store);
extern int	StoreClaimMessages(const ClaimRequest *req, List **messages);
extern int	StoreClaimDelivered(const ClaimRequest *req, List **messages);

/* the outcome of a claim (outbox_store.c) */
extern bool StoreComplete(pg_uuid_t *id, text *owner, TimestampTz now);
extern int64 StoreCompleteMany(ArrayType *ids, text *owner, TimestampTz now);
extern bool StoreFail(pg_uuid_t *id, text *owner, text *error, TimestampTz now);
extern bool StoreFailAt(pg_uuid_t *id, text *owner, text *error,
						TimestampTz now, TimestampTz retry_at, bool dead);
extern bool StoreExtend(pg_uuid_t *id, text *owner, int lease_seconds,
						TimestampTz now);
extern int64 StoreRelease(ArrayType *ids, text *owner);
extern void StoreUndeliver(pg_uuid_t *id, text *owner, TimestampTz lease_end);

/* the rest of a message's life (outbox_store.c) */
extern bool StoreRetryDead(pg_uuid_t *id, TimestampTz now);
extern int64 StoreRetryDeadTopic(text *topic, TimestampTz now);
extern int64 StorePurge(TimestampTz horizon, int64 max_rows);
extern bool StoreConsumeOnce(text *consumer, pg_uuid_t *message_id,
							 TimestampTz now);
extern bool StoreEnvelopeById(pg_uuid_t *id, EnvelopeRow *row);
extern TimestampTz StoreNextDue(text *topic, TimestampTz now);

#endif							/* OUTBOX_STORE_H */
