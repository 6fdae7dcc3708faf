/*-------------------------------------------------------------------------
 *
 * outbox_stream_int.h
 *		The claim positions in shared memory, shared by outbox_stream.c
 *		(the positions) and outbox_stream_across.c (the topics a claim
 *		across all topics visits).  Included by those two files only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STREAM_INT_H
#define OUTBOX_STREAM_INT_H

#include "postgres.h"

#include "mb/pg_wchar.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "utils/hsearch.h"

#include "outbox.h"
#include "outbox_stream.h"

/*
 * The longest topic: OUTBOX_NAME_MAX_CHARS characters (CheckName) of at
 * most MAX_MULTIBYTE_CHAR_LEN bytes each, 800 bytes.  The key holds its
 * bytes without a terminator (the rest is zeros, and a topic contains no
 * zero byte), so a topic of exactly this length keeps a position too.
 */
#define STREAM_TOPIC_BYTES		(OUTBOX_NAME_MAX_CHARS * MAX_MULTIBYTE_CHAR_LEN)

typedef struct StreamKey
{
	Oid			dboid;
	Oid			relid;			/* outbox.message of that database */
	char		topic[STREAM_TOPIC_BYTES];
} StreamKey;

typedef struct StreamPosition
{
	StreamKey	key;
	TimestampTz used;
	pg_atomic_uint64 notes;		/* commits that appended to the topic */
	bool		held;			/* its default subscription is dropped or paused */
	StreamClaimState state;
} StreamPosition;

/* the tables whose claims across all topics may visit only some topics */
#define STREAM_ACROSS_TABLES	32

typedef struct StreamAcross
{
	Oid			dboid;
	Oid			relid;
	uint64		lost;			/* StreamShared.lost when its last walk began */
	TimestampTz until;			/* when the walk's finding goes stale */
	pg_atomic_uint64 walker;	/* until when a claim walks to renew it */
} StreamAcross;

/* the positions that may make room next, found by one look at them all */
#define STREAM_VICTIMS			32

typedef struct StreamShared
{
	LWLock	   *position_lock;	/* everything here, the positions' hash too */
	int			max_positions;	/* outbox.claim_positions at server start */
	uint64		lost;			/* topics with work that may lack a position */
	pg_atomic_uint32 across_used;	/* tables in across[] (none: no notes) */
	StreamAcross across[STREAM_ACROSS_TABLES];
	int			nvictims;
	StreamPosition *victims[STREAM_VICTIMS];	/* the least recently used last */
	TimestampTz none_idle;		/* when a look at all found no victim */
} StreamShared;

extern StreamShared *stream_shared;
extern HTAB *stream_positions;

extern bool StreamKeyOf(StreamKey *key, text *topic);
extern bool StreamPositionLock(text *topic, LWLockMode mode, StreamPosition **p);
extern void StreamMakeRoom(void);

/*
 * A position a claim across all topics need not visit: its last search
 * passed every message below its horizon, and no commit appended to the
 * topic since that search began (what a later one appended has positions
 * at or above that horizon, or was seen by the search); or its default
 * subscription is held (dropped or paused: every change of that makes the
 * next claim across all topics walk every topic).
 */
static inline bool
StreamPositionIdle(const StreamPosition *p)
{
	return p->held ||
		(p->state.position > 0 && p->state.reached && p->state.nholes == 0 &&
		 p->state.nkeys == 0 && p->state.notes_seen == pg_atomic_read_u64((pg_atomic_uint64 *) &p->notes));
}

#endif							/* OUTBOX_STREAM_INT_H */
