/*-------------------------------------------------------------------------
 *
 * outbox_claim_hint.c
 *		Where this backend's next claim of a topic starts reading the
 *		topic's deferred messages.
 *
 * A deferred message's completion takes it out of message_deferred_idx by
 * writing a new row version; the old version keeps its entry until vacuum
 * removes it, and under a held snapshot until the snapshot ends.  Claims
 * read that index oldest first, from its first entry of the topic: while a
 * backlog of deferred messages drained, each claim passed every message
 * completed before it, and under a held snapshot visited each one's row
 * (100,000 retried messages drained at an eighth of their rate without
 * the snapshot, and an empty claim after them took 35 ms).
 *
 * So when a claim filled its batch with deferred messages, the next claim
 * of this backend reads them on from the last one it took (the hint):
 * what lies before it was taken by this claim or by the claims it raced,
 * or locked by another transaction when read (completing it, say).  The
 * backend keeps following it, also when a claim from it comes out short
 * (nothing due after it: an idle topic), and reads from the first entry
 * once a second: a message that became due before the hint meanwhile (a
 * lease that ran out, a message that a search of the claim position made
 * deferred, a claim that rolled back, a message moved by hand) waits at
 * most that long.  A topic with keyed deferred messages pending gets no
 * hint (see stmt_keyed_deferred).  The hints live in the backend's memory,
 * for a few topics; the one read from its first entry longest ago makes
 * room.  Each change of one is published beside the topic's claim position
 * in shared memory (when preloaded), and a claim whose own hint is missing
 * or a second old takes the published one when it comes from a later read
 * from the first entry: a new connection per claim, or each of several
 * connections claiming the topic, then follows the hint of the others,
 * and under a held snapshot the topic is read from its first entry about
 * once a second, not once a second by each connection or at every claim
 * of a new one.  The claim across all topics takes them too, for the
 * topics it reads.
 *
 * The claim across all topics reads each topic from the same hints and
 * notes them after it as a claim of each topic would; the topics it took
 * deferred messages of count as filled.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "outbox_claim_int.h"
#include "outbox_stream.h"

/* how long the claims follow a hint after one read from the first entry */
#define CLAIM_HINT_MAX_AGE	USECS_PER_SEC

/*
 * how long after its last read from the first entry a topic's published
 * hint keeps it out of the look for due topics of the claim across all
 * topics (whose claims of it then read it, and publish the hint anew)
 */
#define CLAIM_HINT_SHARED_AGE	(60 * USECS_PER_SEC)

#define CLAIM_HINTS			8

typedef struct ClaimHint
{
	char	   *topic;			/* NULL: unused */
	bool		set;			/* the next claim reads from (at, id) */
	TimestampTz at;
	pg_uuid_t	id;
	TimestampTz walked;			/* when a claim last read from the first entry */
	bool		across;			/* read by the claim across all topics running */
	bool		across_hinted;	/* from (at, id) */
} ClaimHint;

/* the deferred messages a claim across all topics took of one topic */
typedef struct ClaimHintTopic
{
	text	   *topic;
	ClaimHintFound found;
} ClaimHintTopic;

static ClaimHint claim_hints[CLAIM_HINTS];

static ClaimHint *hint_adopt(const char *name, const StreamHint *shared,
							 ClaimHint *h, TimestampTz now);
static void hint_note(char *name, text *topic, TimestampTz now, bool hinted,
					  int wanted, const ClaimHintFound *found);

static ClaimHint *
hint_find(const char *topic, bool create, TimestampTz now)
{
	ClaimHint  *oldest = &claim_hints[0];
	int			i;

	for (i = 0; i < CLAIM_HINTS; i++)
	{
		ClaimHint  *h = &claim_hints[i];

		if (h->topic != NULL && strcmp(h->topic, topic) == 0)
			return h;
		if (h->topic == NULL || (oldest->topic != NULL && h->walked < oldest->walked))
			oldest = h;
	}
	if (!create)
		return NULL;
	if (oldest->topic != NULL)
		pfree(oldest->topic);
	oldest->topic = MemoryContextStrdup(TopMemoryContext, topic);
	oldest->set = false;
	oldest->walked = now;
	oldest->across = false;
	return oldest;
}

/* Whether a claim at now reads from hint h */
static bool
hint_usable(const ClaimHint *h, TimestampTz now)
{
	return h != NULL && h->set && h->walked <= now && now - h->walked < CLAIM_HINT_MAX_AGE;
}

/*
 * The hint of a topic (whose name is name) that a backend published,
 * shared (from the topic's claim state), taken as this backend's when its
 * own, h (or NULL), is not usable at now and comes from an earlier read
 * from the first entry: a new connection, or one of several claiming the
 * topic, follows the hint of the others instead of reading from the first
 * entry again.  One a second old is taken too: the claim reads from the
 * first entry then, and publishes the hint anew for the others.  Returns
 * the hint to use.
 */
static ClaimHint *
hint_adopt(const char *name, const StreamHint *shared, ClaimHint *h, TimestampTz now)
{
	if (hint_usable(h, now) || !shared->set ||
		(h != NULL && h->walked >= shared->walked))
		return h;
	if (h == NULL)
		h = hint_find(name, true, now);
	h->set = true;
	h->at = shared->at;
	memcpy(&h->id, shared->id, sizeof(pg_uuid_t));
	h->walked = shared->walked;
	return h;
}

/* Publish this backend's hint h of topic, for the others to adopt */
static void
hint_publish(text *topic, const ClaimHint *h)
{
	StreamHint	shared;

	shared.set = h->set;
	shared.at = h->at;
	memcpy(shared.id, &h->id, sizeof(pg_uuid_t));
	shared.walked = h->walked;
	StreamHintPut(topic, &shared);
}

/* Whether this backend follows a hint of some topic */
bool
ClaimHintsHeld(void)
{
	int			i;

	for (i = 0; i < CLAIM_HINTS; i++)
		if (claim_hints[i].topic != NULL && claim_hints[i].set)
			return true;
	return false;
}

/*
 * The topics that this backend's claims at now follow a hint of, as a
 * text[] allocated in the current memory context: those it has a hint of,
 * and those another backend published a hint of in the last minute (which
 * the claim across all topics takes, ClaimHintArgsAcross).  A claim of each reads
 * its deferred messages from the hint, or from the first entry once the
 * hint is a second old (which finds every one due).
 */
Datum
ClaimHintTopics(TimestampTz now)
{
	List	   *shared = StreamHintedTopics(now - CLAIM_HINT_SHARED_AGE);
	Datum	   *elems = palloc(sizeof(Datum) * (CLAIM_HINTS + list_length(shared)));
	int			n = 0;
	int			i;
	ListCell   *lc;

	for (i = 0; i < CLAIM_HINTS; i++)
		if (claim_hints[i].topic != NULL && claim_hints[i].set)
			elems[n++] = CStringGetTextDatum(claim_hints[i].topic);
	foreach(lc, shared)
		elems[n++] = PointerGetDatum(lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* A claim's arguments args[10] and args[11] that read from the first entry */
static void
ClaimHintNone(Datum *args)
{
	args[10] = TimestampTzGetDatum(DT_NOBEGIN);
	args[11] = UUIDPGetDatum(palloc0(sizeof(pg_uuid_t)));
}

/*
 * Where a claim of topic at now reads the deferred messages from, as the
 * claim's arguments args[10] (available_at) and args[11] (id): the hint
 * (this backend's, or the one published in shared, see hint_adopt), or the
 * first entry.  Returns whether it is a hint.
 */
bool
ClaimHintArgs(text *topic, const StreamHint *shared, TimestampTz now, Datum *args)
{
	char	   *name = text_to_cstring(topic);
	ClaimHint  *h = hint_adopt(name, shared, hint_find(name, false, now), now);

	pfree(name);
	if (!hint_usable(h, now))
	{
		ClaimHintNone(args);
		return false;
	}
	args[10] = TimestampTzGetDatum(h->at);
	args[11] = UUIDPGetDatum(palloc(sizeof(pg_uuid_t)));
	memcpy(DatumGetUUIDP(args[11]), &h->id, sizeof(pg_uuid_t));
	return true;
}

/*
 * Where a claim across all topics at now reads the deferred messages of
 * the n topics names (text Datums) from: the arrays args[10]
 * (timestamptz[]) and args[11] (uuid[]), each topic's hint (this
 * backend's, or the one published in shared[i], from the topic's claim
 * state) or the first entry.  The topics with hints are marked as read by
 * this claim, for ClaimHintNoteAcross.
 */
void
ClaimHintArgsAcross(Datum *names, const StreamHint *shared, int n, TimestampTz now,
					Datum *args)
{
	Datum	   *ats = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *ids = palloc(sizeof(Datum) * Max(n, 1));
	pg_uuid_t  *uuids = palloc0(sizeof(pg_uuid_t) * Max(n, 1));
	bool		any = ClaimHintsHeld();
	int			i;

	for (i = 0; i < CLAIM_HINTS; i++)
		claim_hints[i].across = false;
	for (i = 0; i < n; i++)
	{
		ClaimHint  *h = NULL;

		/* a topic without a hint set notes nothing after the claim */
		if (any || shared[i].set)
		{
			char	   *name = text_to_cstring(DatumGetTextPP(names[i]));

			h = hint_adopt(name, &shared[i], hint_find(name, false, now), now);
			pfree(name);
		}
		ats[i] = TimestampTzGetDatum(DT_NOBEGIN);
		if (h != NULL)
		{
			h->across = true;
			h->across_hinted = hint_usable(h, now);
			if (h->across_hinted)
			{
				ats[i] = TimestampTzGetDatum(h->at);
				uuids[i] = h->id;
			}
		}
		ids[i] = UUIDPGetDatum(&uuids[i]);
	}
	args[10] = PointerGetDatum(construct_array(ats, n, TIMESTAMPTZOID, sizeof(TimestampTz),
											   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	args[11] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false,
											   TYPALIGN_CHAR));
}

/*
 * Whether topic has keyed deferred messages not finished: $1 topic.  Their
 * claims may pass a message of a key whose earlier message is still
 * pending, and a hint after it would leave it behind for a second each
 * time: a key with a run of deferred messages would drain at one a second.
 */
SAVED_STATEMENT(stmt_keyed_deferred) = {
	"SELECT EXISTS (SELECT FROM outbox.message k"
	" WHERE k.deferred AND k.topic OPERATOR(pg_catalog.=) $1"
	" AND k.ordering_key IS NOT NULL AND k.delivered_at IS NULL AND k.dead_at IS NULL)",
	SPI_OK_SELECT,
	1, {TEXTOID}
};

/* Whether (at, id) comes after the last one *found holds */
static bool
obx_after(const ClaimHintFound *found, TimestampTz at, const pg_uuid_t *id)
{
	return at > found->at ||
		(at == found->at && memcmp(id, &found->id, sizeof(pg_uuid_t)) > 0);
}

/*
 * A deferred message a claim took, of topic (a text Datum), at its
 * available_at and id: counted into *found (emptied before the claim),
 * which keeps the last of them; for a claim across all topics, into the
 * ClaimHintTopic of its topic in found->topics
 */
void
ClaimHintSee(ClaimHintFound *found, Datum topic, TimestampTz at, const pg_uuid_t *id)
{
	if (found->across)
	{
		text	   *name = DatumGetTextPP(topic);
		ClaimHintTopic *each = NULL;
		ListCell   *lc;

		foreach(lc, found->topics)
		{
			text	   *other = ((ClaimHintTopic *) lfirst(lc))->topic;

			if (VARSIZE_ANY_EXHDR(other) == VARSIZE_ANY_EXHDR(name) &&
				memcmp(VARDATA_ANY(other), VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name)) == 0)
			{
				each = lfirst(lc);
				break;
			}
		}
		if (each == NULL)
		{
			each = palloc0(sizeof(ClaimHintTopic));
			each->topic = DatumGetTextPCopy(topic);
			found->topics = lappend(found->topics, each);
		}
		found->n++;
		ClaimHintSee(&each->found, topic, at, id);
		return;
	}
	if (found->n++ == 0 || obx_after(found, at, id))
	{
		found->at = at;
		memcpy(&found->id, id, sizeof(pg_uuid_t));
	}
}

/*
 * After a claim of topic at now that wanted so many messages and took the
 * deferred ones in *found (hinted: it read from a hint).  A claim whose
 * deferred messages fill the batch sets the hint to the last of them; the
 * claims after it keep the hint, moved on past what they took, and one
 * that reads from the first entry (once the hint is a second old) keeps it
 * too, since it took every deferred message due before.  A topic with
 * keyed deferred messages pending, when a claim fills its batch or reads
 * from the first entry, loses its hint.
 */
void
ClaimHintNote(text *topic, TimestampTz now, bool hinted, int wanted,
			  const ClaimHintFound *found)
{
	hint_note(text_to_cstring(topic), topic, now, hinted, wanted, found);
}

/*
 * After a claim across all topics at now, which took the deferred messages
 * in found->topics: each topic of theirs has its hint noted as after a claim
 * of the topic that wanted as many as it took (so that is a full batch:
 * what came before them in the topic was taken or locked), and each topic
 * with a hint that the claim read and took none of as after a claim of the
 * topic that came out short.
 */
void
ClaimHintNoteAcross(TimestampTz now, const ClaimHintFound *found)
{
	char	   *read[CLAIM_HINTS];
	bool		read_hinted[CLAIM_HINTS];
	int			nread = 0;
	ListCell   *lc;
	int			i;

	/*
	 * The topics read (marked by ClaimHintArgsAcross, for each round of the
	 * claim), before the notes below reuse their entries
	 */
	for (i = 0; i < CLAIM_HINTS; i++)
	{
		if (claim_hints[i].topic == NULL || !claim_hints[i].across)
			continue;
		read[nread] = pstrdup(claim_hints[i].topic);
		read_hinted[nread++] = claim_hints[i].across_hinted;
	}

	foreach(lc, found->topics)
	{
		ClaimHintTopic *each = lfirst(lc);
		char	   *name = text_to_cstring(each->topic);
		bool		hinted = false;

		for (i = 0; i < nread; i++)
		{
			if (read[i] != NULL && strcmp(read[i], name) == 0)
			{
				hinted = read_hinted[i];
				read[i] = NULL;
			}
		}
		hint_note(name, each->topic, now, hinted, each->found.n, &each->found);
	}
	for (i = 0; i < nread; i++)
	{
		ClaimHintFound none = {0};

		if (read[i] != NULL)
			hint_note(read[i], cstring_to_text(read[i]), now, read_hinted[i], 1, &none);
	}
}

/* ClaimHintNote of topic, whose name is name (palloc'd, freed here) */
static void
hint_note(char *name, text *topic, TimestampTz now, bool hinted, int wanted,
		  const ClaimHintFound *found)
{
	ClaimHint  *h = hint_find(name, false, now);
	ClaimHint	before;
	bool		full = found->n >= wanted;
	bool		keep = full || (h != NULL && h->set);

	if (keep && (full || !hinted))
	{
		Datum		arg = PointerGetDatum(topic);

		keep = !SpiExecuteBool(&stmt_keyed_deferred, &arg);
	}
	if (!keep)
	{
		if (h != NULL && h->set)
		{
			h->set = false;
			hint_publish(topic, h);
		}
		pfree(name);
		return;
	}
	if (h == NULL)
		h = hint_find(name, true, now);
	pfree(name);
	before = *h;
	if (full || !h->set || (found->n > 0 && !obx_after(found, h->at, &h->id)))
	{
		h->at = found->at;
		h->id = found->id;
	}
	h->set = true;
	if (!hinted)
		h->walked = now;
	if (!before.set || before.at != h->at || before.walked != h->walked ||
		memcmp(&before.id, &h->id, sizeof(pg_uuid_t)) != 0)
		hint_publish(topic, h);
}
