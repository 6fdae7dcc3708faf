/*-------------------------------------------------------------------------
 *
 * outbox_stream_across.c
 *		Which topics a claim across all topics visits: the appends of each
 *		transaction noted on their topics' positions when it commits, and
 *		the positions that may have fresh messages to claim.
 *
 * A claim across all topics (claim(owner) without a topic) used to find
 * the topics by walking the stream index, one probe per topic that has
 * messages, and read each from its claim position: with 10,000 topics,
 * most of them idle, every claim visited them all.  Now it visits only
 * the positions that may have work (StreamAcrossTopics), and the topics
 * with deferred messages due (found through their own index,
 * outbox_store_across.c).
 *
 * A position need not be visited when its last search passed every
 * message below its horizon (no hole, no passed key) and no transaction
 * that appended to the topic committed since that search began: every
 * message appended before the search took its horizon was below it (the
 * gap horizon, outbox_gap.c), and any later one was appended by a
 * transaction that notes its topics when it commits or prepares (a count
 * per position, StreamNoteTopic).  A message that becomes due again
 * (failed, revived, a hole or a long lease deferred) is deferred, and
 * found through the deferred index.
 *
 * That holds only while every topic with work has a position.  So claims
 * across all topics walk every topic, as before, after a restart (no
 * position is kept), when a position that may have work made room for
 * another (more than outbox.claim_positions topics with work at once), when
 * a transaction appended to more than STREAM_NOTE_MAX topics or committed
 * a prepared transaction (whose topics this backend does not know), when
 * a default subscription is dropped, paused, resumed or brought back, and
 * in any case at least every STREAM_ACROSS_REWALK (a safety net for rows
 * written into outbox.message other than through append).  A walk marks
 * the positions of topics whose default subscription is held, so that
 * later claims skip them; it makes its finding the table's once it ends
 * with no such loss since it began (StreamAcrossBegin,
 * StreamAcrossComplete).
 *
 * Without shared_preload_libraries there are no shared positions, and
 * every claim across all topics walks every topic.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_stream.h"
#include "outbox_stream_int.h"

/* the most topics a transaction's commit notes one by one */
#define STREAM_NOTE_MAX			64

/* how long a note takes it that no position is idle, after a look found none */
#define STREAM_NONE_IDLE_INTERVAL	(10 * USECS_PER_SEC / 1000)

/* how long a walk's finding serves the claims across all topics, at most */
#define STREAM_ACROSS_REWALK	(60 * USECS_PER_SEC)

/* how long the walk that renews a finding is left to one claim */
#define STREAM_ACROSS_WALK_TURN	(10 * USECS_PER_SEC)

/* this transaction's topics (keys in TopTransactionContext) */
static StreamKey *noted[STREAM_NOTE_MAX];
static int	nnoted = 0;
static bool noted_unknown = false;	/* more of them, or not known */

static void obx_across_xact(XactEvent event, void *arg);
static void obx_note_commit(void);
static StreamAcross *obx_across_slot(Oid dboid, Oid relid, bool create);

void
StreamAcrossInit(void)
{
	RegisterXactCallback(obx_across_xact, NULL);
}

/*
 * Before an append to topic: note it for the commit of this transaction.
 * The key is made here, where an error may still be raised.
 */
void
StreamNoteTopic(text *topic)
{
	StreamKey	key;
	int			len = VARSIZE_ANY_EXHDR(topic);
	int			i;

	if (noted_unknown || len > STREAM_TOPIC_BYTES)
		return;
	/* noted already (the usual case): no key to make, on every append */
	for (i = nnoted - 1; i >= 0; i--)
		if ((len == STREAM_TOPIC_BYTES || noted[i]->topic[len] == '\0') &&
			memcmp(noted[i]->topic, VARDATA_ANY(topic), len) == 0)
			return;
	if (!StreamAvailable() || !StreamKeyOf(&key, topic))
		return;
	if (nnoted >= STREAM_NOTE_MAX)
	{
		noted_unknown = true;
		return;
	}
	noted[nnoted] = MemoryContextAlloc(TopTransactionContext, sizeof(StreamKey));
	memcpy(noted[nnoted], &key, sizeof(StreamKey));
	nnoted++;
}

/*
 * Claims across all topics walk every topic once this transaction commits:
 * it made messages claimable whose topics it does not note (COMMIT
 * PREPARED) or changed a default subscription.
 */
void
StreamAcrossForget(void)
{
	if (StreamAvailable())
		noted_unknown = true;
}

static void
obx_across_xact(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			obx_note_commit();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			nnoted = 0;
			noted_unknown = false;
			break;
		default:
			break;
	}
}

/*
 * Count the commit (or PREPARE: its messages are seen in progress by every
 * search from now on) on the positions of its topics, made when missing.
 * Nothing here may fail: the transaction has committed.
 */
static void
obx_note_commit(void)
{
	TimestampTz now;
	bool		done[STREAM_NOTE_MAX];
	bool		missing = noted_unknown;
	int			i;

	/*
	 * No claim across all topics has begun a walk since the start: nobody
	 * needs the notes.  (A walk that begins later reads, after it began,
	 * every row this transaction committed; see StreamAcrossBegin.)
	 */
	pg_memory_barrier();
	if ((nnoted == 0 && !noted_unknown) || stream_shared == NULL ||
		pg_atomic_read_u32(&stream_shared->across_used) == 0)
	{
		nnoted = 0;
		noted_unknown = false;
		return;
	}
	now = GetCurrentTimestamp();

	/* the usual case: every topic has its position, counted under a shared lock */
	LWLockAcquire(stream_shared->position_lock, LW_SHARED);
	for (i = 0; i < nnoted; i++)
	{
		StreamPosition *p;

		done[i] = true;
		/* not of a table whose claims across all topics use them */
		if (obx_across_slot(noted[i]->dboid, noted[i]->relid, false) == NULL)
			continue;
		p = hash_search(stream_positions, noted[i], HASH_FIND, NULL);
		if (p != NULL)
			pg_atomic_fetch_add_u64(&p->notes, 1);
		else
			done[i] = false;
		missing |= !done[i];
	}
	LWLockRelease(stream_shared->position_lock);
	if (!missing)
	{
		nnoted = 0;
		noted_unknown = false;
		return;
	}

	LWLockAcquire(stream_shared->position_lock, LW_EXCLUSIVE);
	if (noted_unknown)
		stream_shared->lost++;
	for (i = 0; i < nnoted && !noted_unknown; i++)
	{
		StreamPosition *p;
		bool		found;

		if (done[i])
			continue;
		p = hash_search(stream_positions, noted[i], HASH_FIND, NULL);
		if (p == NULL)
		{
			/*
			 * Every position may have work (a look at them all found none
			 * idle lately): more topics have work than positions are kept,
			 * and claims across all topics walk them all anyway.
			 */
			if (hash_get_num_entries(stream_positions) >= stream_shared->max_positions &&
				stream_shared->nvictims == 0 &&
				stream_shared->none_idle > now - STREAM_NONE_IDLE_INTERVAL)
			{
				stream_shared->lost++;
				break;
			}
			if (hash_get_num_entries(stream_positions) >= stream_shared->max_positions)
				StreamMakeRoom();
			p = hash_search(stream_positions, noted[i], HASH_ENTER_NULL, &found);
			if (p == NULL)
			{
				stream_shared->lost++;
				break;
			}
			memset(&p->state, 0, sizeof(StreamClaimState));
			p->state.searched = DT_NOBEGIN;
			p->state.moved = now;
			p->used = now;
			pg_atomic_init_u64(&p->notes, 0);
			p->held = false;
		}
		pg_atomic_fetch_add_u64(&p->notes, 1);
	}
	LWLockRelease(stream_shared->position_lock);
	nnoted = 0;
	noted_unknown = false;
}

/* The claims across all topics of a table; NULL when none is kept. */
static StreamAcross *
obx_across_slot(Oid dboid, Oid relid, bool create)
{
	StreamAcross *oldest = NULL;
	int			i;

	for (i = 0; i < STREAM_ACROSS_TABLES; i++)
	{
		StreamAcross *a = &stream_shared->across[i];

		if (a->dboid == dboid && a->relid == relid)
			return a;
		if (oldest == NULL || a->until < oldest->until)
			oldest = a;
	}
	if (!create)
		return NULL;
	oldest->dboid = dboid;
	oldest->relid = relid;
	return oldest;
}

/*
 * The topics of this database whose positions a claim across all topics
 * visits, as a List of text (the topics with deferred messages due are
 * not among them); false when it must walk every topic instead.
 *
 * When a finding has gone stale, or a position that may have work was lost
 * since it was made, one claim at a time walks to renew it (its turn ends
 * with StreamAcrossComplete, or after STREAM_ACROSS_WALK_TURN should it
 * fail).  The other claims visit the positions that may have work
 * meanwhile: every topic they visit may have work, and a topic they leave
 * out (a position lost, a pause ended, rows written by hand) waits for that
 * walk.  So with 100,000 topics one claim, not every claim, pays for the
 * walk once a minute; and with more topics with work than positions are
 * kept, claims take turns at walking.  Only the first walk, when there is
 * no finding at all, is made by every claim that comes.
 */
bool
StreamAcrossTopics(TimestampTz now, List **topics)
{
	Oid			relid;
	StreamAcross *a;
	HASH_SEQ_STATUS status;
	StreamPosition *p;
	bool		known;

	*topics = NIL;
	if (!StreamAvailable())
		return false;
	relid = StreamMessageRelid();
	LWLockAcquire(stream_shared->position_lock, LW_SHARED);
	a = obx_across_slot(MyDatabaseId, relid, false);
	known = a != NULL && a->lost == stream_shared->lost && a->until > now &&
		a->until - STREAM_ACROSS_REWALK <= now;
	if (!known && a != NULL && a->until != 0)
	{
		uint64		turn = pg_atomic_read_u64(&a->walker);

		/* another claim's turn, or this one's */
		known = (TimestampTz) turn > now ||
			!pg_atomic_compare_exchange_u64(&a->walker, &turn,
											(uint64) (now + STREAM_ACROSS_WALK_TURN));
	}
	if (known)
	{
		hash_seq_init(&status, stream_positions);
		while ((p = hash_seq_search(&status)) != NULL)
		{
			int			len;

			if (p->key.dboid != MyDatabaseId || p->key.relid != relid ||
				StreamPositionIdle(p))
				continue;
			len = strnlen(p->key.topic, STREAM_TOPIC_BYTES);
			*topics = lappend(*topics, cstring_to_text_with_len(p->key.topic, len));
		}
	}
	LWLockRelease(stream_shared->position_lock);
	return known;
}

/*
 * Before a walk of every topic: what StreamAcrossComplete is given.  From
 * now on the commits that append to the table note their topics; the
 * walk's reads begin after this, so they see every row committed before
 * the first such note.
 */
uint64
StreamAcrossBegin(void)
{
	Oid			relid;
	uint64		lost;

	if (!StreamAvailable())
		return 0;
	relid = StreamMessageRelid();
	LWLockAcquire(stream_shared->position_lock, LW_EXCLUSIVE);
	if (obx_across_slot(MyDatabaseId, relid, false) == NULL)
	{
		StreamAcross *a = obx_across_slot(MyDatabaseId, relid, true);

		a->lost = stream_shared->lost - 1;	/* no finding yet */
		a->until = 0;
		pg_atomic_write_u64(&a->walker, 0);
		pg_atomic_fetch_add_u32(&stream_shared->across_used, 1);
	}
	lost = stream_shared->lost;
	LWLockRelease(stream_shared->position_lock);
	return lost;
}

/*
 * A walk of every topic that began at lost ended, having searched the
 * positions of every topic with messages (or marked it held): if no
 * position that may have work was lost meanwhile, later claims across all
 * topics visit only the positions with work, until until; else one of them
 * walks again.
 */
void
StreamAcrossComplete(uint64 lost, TimestampTz until)
{
	Oid			relid;
	StreamAcross *a;

	if (!StreamAvailable())
		return;
	relid = StreamMessageRelid();
	LWLockAcquire(stream_shared->position_lock, LW_EXCLUSIVE);
	/* none when another table took its place meanwhile: notes were lost */
	a = obx_across_slot(MyDatabaseId, relid, false);
	if (a != NULL)
	{
		/*
		 * A finding that lost positions meanwhile is kept too: it is not
		 * used (lost differs), but the next walks take turns.
		 */
		a->lost = lost;
		a->until = until;
		/* the turn ends: the next claim that finds the finding stale walks */
		pg_atomic_write_u64(&a->walker, 0);
	}
	LWLockRelease(stream_shared->position_lock);
}

/*
 * The position of topic, whose default subscription is held: skipped by
 * claims across all topics until the next walk.
 */
void
StreamMarkHeld(text *topic)
{
	StreamPosition *p;

	if (!StreamPositionLock(topic, LW_EXCLUSIVE, &p))
		return;
	if (p != NULL)
		p->held = true;
	LWLockRelease(stream_shared->position_lock);
}

/* The interval of StreamAcrossComplete's until after a walk at now. */
TimestampTz
StreamAcrossUntil(TimestampTz now)
{
	return now + STREAM_ACROSS_REWALK;
}
