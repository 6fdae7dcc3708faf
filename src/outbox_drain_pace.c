/*-------------------------------------------------------------------------
 *
 * outbox_drain_pace.c
 *		The pace of the worker's NOTIFY batches: the size of each routed
 *		topic's next batch, kept from round to round.
 *
 * A NOTIFY batch is claimed and marked delivered by one statement, which
 * reads the head of the topic's index once per batch.  Under a backlog (all
 * the more with dead index entries that a long-running snapshot keeps from
 * being removed) larger batches spread that read and their commit over
 * more messages, so a topic that fills whole batches doubles its next one,
 * up to NOTIFY_BATCH_MAX.  A short batch that found messages shrinks the
 * next ones for a while, so that a backlog under one ordering key is not
 * read through at each claim.  drain_once takes outbox.batch_size
 * throughout; only the worker's rounds (outbox_drain.c) keep a pace.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_drain_int.h"

/* The largest NOTIFY batch of the worker under a backlog */
#define NOTIFY_BATCH_MAX	1000

/* The longest a topic holds a smaller NOTIFY batch after a short one */
#define PACE_HOLD_MAX_MS	60000

static MemoryContext obx_pace_cxt = NULL;	/* the worker's paces */
static TopicPace *obx_paces = NULL;
static int	obx_npaces = 0;

/* The pace of a NOTIFY topic after a batch that found claimed messages. */
void
DrainPace(TopicPace *pace, int claimed, int batch_size)
{
	TimestampTz now = GetCurrentTimestamp();

	if (claimed == 0)
	{
		pace->size = batch_size;
		pace->grow_after = 0;
		pace->hold_ms = 0;
	}
	else if (claimed >= pace->size)
	{
		if (now >= pace->grow_after)
			pace->size = Min(pace->size * 2, Max(NOTIFY_BATCH_MAX, batch_size));
	}
	else
	{
		pace->size = claimed;
		pace->hold_ms = pace->hold_ms == 0 ? 1000 :
			Min(pace->hold_ms * 2, PACE_HOLD_MAX_MS);
		pace->grow_after = TimestampTzPlusMilliseconds(now, pace->hold_ms);
	}
}

/*
 * The paces of the routes, one per route in their order: the one the
 * topic had, or a full batch for a topic new to the worker.  The paces of
 * topics no longer routed are dropped.
 */
TopicPace *
DrainPacesFor(List *routes, int batch_size)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "outbox drain paces",
											  ALLOCSET_SMALL_SIZES);
	TopicPace  *paces = MemoryContextAllocZero(cxt, sizeof(TopicPace) *
											   Max(list_length(routes), 1));
	ListCell   *lc;

	foreach(lc, routes)
	{
		OutboxRoute *route = (OutboxRoute *) lfirst(lc);
		TopicPace  *pace = &paces[foreach_current_index(lc)];

		pace->topic = MemoryContextStrdup(cxt, route->topic);
		pace->subscription = route->subscription ?
			MemoryContextStrdup(cxt, route->subscription) : NULL;
		pace->size = batch_size;
		for (int i = 0; i < obx_npaces; i++)
		{
			if (SameRoute(obx_paces[i].topic, obx_paces[i].subscription,
						  route->topic, route->subscription))
			{
				pace->size = obx_paces[i].size;
				pace->grow_after = obx_paces[i].grow_after;
				pace->hold_ms = obx_paces[i].hold_ms;
				break;
			}
		}
	}
	if (obx_pace_cxt != NULL)
		MemoryContextDelete(obx_pace_cxt);
	obx_pace_cxt = cxt;
	obx_paces = paces;
	obx_npaces = list_length(routes);
	return paces;
}
