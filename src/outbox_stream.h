/*-------------------------------------------------------------------------
 *
 * outbox_stream.h
 *		The stream of a topic: claim positions and the first position of a
 *		transaction's appends (outbox_stream.c), the order of a key's
 *		appends (outbox_key_lock.c), and the appends in their gap
 *		(outbox_gap.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STREAM_H
#define OUTBOX_STREAM_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/* install the shared memory and transaction hooks; only when preloaded */
extern void OutboxStreamInit(void);

/* whether the tables have positions (1.2); and claims can keep them */
extern bool StreamSchema(void);
extern bool StreamSavedSchema(void);
extern Oid	StreamMessageRelid(void);
extern Oid	StreamKeyIndexRelid(void);
extern bool StreamAvailable(void);

/*
 * around an append, with its ordering key or NULL: wait for the key's other
 * appenders, and hold the key's lock until the row is in (outbox_key_lock.c)
 */
extern void KeyLockTake(text *topic, text *key);
extern void KeyLockRelease(void);

/* before this transaction appends its first message: the position it takes */
extern int64 StreamNoteAppend(void);

/* taking a position, and a floor of the next one (outbox_gap.c) */
extern int64 StreamTakePosition(void);
extern int64 StreamFloor(void);

/* appends between taking a position and inserting their row (outbox_gap.c) */
extern void OutboxGapInit(bool preloaded);
extern bool GapAvailable(void);
extern void GapBegin(void);
extern void GapEnd(void);
extern int64 GapHorizon(void);
extern bool GapTryHorizon(int64 *horizon);

/*
 * A topic's claim position; the holes below it: positions of appends that
 * were still in progress, long after the others, when the position moved
 * past them; and its passed keys: ordering keys whose pending messages the
 * position moved past, a long run of them behind the key's head
 * (outbox_store_position.c).  A passed key is known by from, its first
 * pending fresh message: the key is that message's ordering_key, whatever
 * its length, read again by whoever needs it (StoreClaimKeys).
 */
#define STREAM_MAX_HOLES	8
#define STREAM_MAX_PASSED_KEYS	16

typedef struct StreamPassedKey
{
	int64		from;			/* no pending fresh message of the key below */
} StreamPassedKey;

/*
 * Where the claims of a topic read its deferred messages from, as the last
 * of them published it (outbox_claim_hint.c)
 */
typedef struct StreamHint
{
	bool		set;			/* the claims read from (at, id) */
	TimestampTz at;
	uint8		id[16];			/* a pg_uuid_t */
	TimestampTz walked;			/* when a claim last read from the first entry */
} StreamHint;

typedef struct StreamClaimState
{
	int64		position;		/* 0: none kept */
	int			nholes;
	int64		holes[STREAM_MAX_HOLES];
	int			nkeys;
	StreamPassedKey keys[STREAM_MAX_PASSED_KEYS];
	int64		key_refused;	/* a position where no key was worth passing */
	TimestampTz key_tried;		/* when that was found */
	int64		saved;			/* the floor saved last (outbox_store_saved.c) */
	TimestampTz saved_at;		/* when */
	TimestampTz searched;		/* when a claim last searched how far it may move */
	TimestampTz moved;			/* when it last moved */
	uint32		version;		/* changes with each change of the above */
	bool		reached;		/* the last search passed all below its horizon */
	uint64		notes_seen;		/* the topic's appends noted when it began */
	StreamHint	hint;			/* kept by StreamHintPut, not StreamPositionSet */
} StreamClaimState;

/*
 * Where a read of the stream that does not know the passed keys starts:
 * the position, or the first message of a passed key below it
 */
static inline int64
StreamStateFloor(const StreamClaimState *state)
{
	int64		floor = state->position;
	int			i;

	for (i = 0; i < state->nkeys; i++)
		if (state->keys[i].from < floor)
			floor = state->keys[i].from;
	return floor;
}

extern void StreamPositionGet(text *topic, StreamClaimState *state);
extern void StreamPositionSet(text *topic, const StreamClaimState *state);

extern void StreamHintPut(text *topic, const StreamHint *hint);
extern List *StreamHintedTopics(TimestampTz since);

/*
 * The topics a claim across all topics visits (outbox_stream_across.c):
 * the appends of this transaction noted at its commit, and the topics
 * whose claim state says they may have fresh messages to claim.
 */
extern void StreamAcrossInit(void);
extern void StreamNoteTopic(text *topic);
extern void StreamAcrossForget(void);
extern bool StreamAcrossTopics(TimestampTz now, List **topics);
extern uint64 StreamAcrossBegin(void);
extern void StreamAcrossComplete(uint64 lost, TimestampTz until);
extern TimestampTz StreamAcrossUntil(TimestampTz now);
extern void StreamMarkHeld(text *topic);

#endif							/* OUTBOX_STREAM_H */
