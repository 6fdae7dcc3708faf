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
 * what lies before it was taken, by this claim or by the claims it raced.
 * A claim from the hint that comes out short reads again from the first
 * entry, and a hint is followed for at most a second after such a read:
 * a message that became due before the hint meanwhile (a lease that ran
 * out, a message that a search of the claim position made deferred, one
 * revived with an available_at in the past) waits at most that long.
 * The hints live in the backend's memory, a few topics, the least
 * recently set replaced.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "outbox_claim_int.h"

/* how long the claims follow a hint after reading from the first entry */
#define CLAIM_HINT_MAX_AGE	USECS_PER_SEC

#define CLAIM_HINTS			8

typedef struct ClaimHint
{
	char	   *topic;			/* NULL: unused */
	bool		set;			/* the next claim reads from (at, id) */
	TimestampTz at;
	pg_uuid_t	id;
	TimestampTz walked;			/* when a claim last read from the first entry */
} ClaimHint;

static ClaimHint claim_hints[CLAIM_HINTS];

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
	return oldest;
}

/*
 * Where a claim of topic at now reads the deferred messages from, as the
 * claim's arguments args[10] (available_at) and args[11] (id): the hint,
 * or the first entry.  Returns whether it is a hint.
 */
bool
ClaimHintArgs(text *topic, TimestampTz now, Datum *args)
{
	char	   *name = text_to_cstring(topic);
	ClaimHint  *h = hint_find(name, false, now);
	pg_uuid_t  *id = palloc0(sizeof(pg_uuid_t));
	bool		hinted;

	pfree(name);
	hinted = h != NULL && h->set && h->walked <= now &&
		now - h->walked < CLAIM_HINT_MAX_AGE;
	if (hinted)
		memcpy(id, &h->id, sizeof(pg_uuid_t));
	args[10] = TimestampTzGetDatum(hinted ? h->at : DT_NOBEGIN);
	args[11] = UUIDPGetDatum(id);
	return hinted;
}

/*
 * After a claim of topic at now, its rows (outbox.message's) still in
 * SPI_tuptable: when the deferred ones among them fill the wanted batch,
 * the last of them is the hint of the next claim; otherwise there is none.
 * hinted: whether the claim read from a hint.
 */
void
ClaimHintNote(text *topic, TimestampTz now, bool hinted, int wanted)
{
	TupleDesc	desc = SPI_tuptable->tupdesc;
	int			c_deferred = SPI_fnumber(desc, "deferred");
	int			c_at = SPI_fnumber(desc, "available_at");
	int			c_id = SPI_fnumber(desc, "id");
	char	   *name;
	ClaimHint  *h;
	int			n = 0;
	TimestampTz at = DT_NOBEGIN;
	pg_uuid_t	id;
	uint64		i;

	if (c_deferred <= 0 || c_at <= 0 || c_id <= 0)
		return;
	memset(&id, 0, sizeof(id));
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		bool		isnull;
		Datum		d = SPI_getbinval(tup, desc, c_deferred, &isnull);
		TimestampTz row_at;
		pg_uuid_t  *row_id;

		if (isnull || !DatumGetBool(d))
			continue;
		n++;
		row_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, c_at, &isnull));
		row_id = DatumGetUUIDP(SPI_getbinval(tup, desc, c_id, &isnull));
		if (n == 1 || row_at > at ||
			(row_at == at && memcmp(row_id, &id, sizeof(pg_uuid_t)) > 0))
		{
			at = row_at;
			memcpy(&id, row_id, sizeof(pg_uuid_t));
		}
	}

	name = text_to_cstring(topic);
	h = hint_find(name, n >= wanted, now);
	pfree(name);
	if (h == NULL)
		return;
	if (n < wanted)
	{
		h->set = false;
		return;
	}
	h->set = true;
	h->at = at;
	h->id = id;
	if (!hinted)
		h->walked = now;
}
